package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/kubectlplugin"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// A pod that fits no pool, for each of the reasons a user meets most: too
// large for every shape, a node selector no pool offers, a taint it does
// not tolerate on the only pool it selects. `why pod/…` names each pool
// and its reason, with the numbers, and the pod's event says the same.
func TestWhyPodNamesEachPoolsReason(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "why-pod")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	general := s.CreatePool(nil)
	gpu := s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Name = s.Name + "-gpu"
		pool.Spec.Template.Labels["gpu-pool"] = "true"
		pool.Spec.Template.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "g8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "1"}}
		// At its limit from the start: a pod it could never hold says
		// that first.
		pool.Spec.Limits = &v1alpha1.Limits{Nodes: harness.Ptr(int32(0))}
	})
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), gpu) })

	pod := func(name, cpu string, selector map[string]string, tolerateGPU bool) {
		tolerations := []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}
		if tolerateGPU {
			tolerations = append(tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
		}
		selector["scenario"] = s.Name
		s.G.Expect(env.Client.Create(s.Ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec: corev1.PodSpec{
				NodeSelector: selector, Tolerations: tolerations,
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")},
				}}},
			},
		})).To(Succeed())
	}
	pod("too-big", "32", map[string]string{}, true)
	pod("no-such-disk", "1", map[string]string{"disk": "ssd"}, true)
	pod("untolerated", "1", map[string]string{"gpu-pool": "true"}, false)

	for _, tt := range []struct {
		pod  string
		want map[string][]string // per pool, what its lines say
	}{{
		pod: "too-big",
		want: map[string][]string{
			general.Name: {"TooSmall: no shape fits the pod and its DaemonSet pods: insufficient cpu", "largest shape c4", "requested 32, allocatable 4"},
			gpu.Name: {"TooSmall: no shape fits the pod and its DaemonSet pods: insufficient cpu; and limit nodes=0 reached", "largest shape g8", "requested 32, allocatable 8",
				"limits:", "nodes:             limit 0, in use 0"},
		},
	}, {
		pod: "no-such-disk",
		want: map[string][]string{
			general.Name: {"Filter (plugin NodeAffinity): node(s) didn't match Pod's node affinity/selector: it selects disk=ssd, and the pool's nodes have no label disk; they have ",
				"scenario=" + s.Name},
			gpu.Name: {"Filter (plugin NodeAffinity): node(s) didn't match Pod's node affinity/selector: it selects disk=ssd, and the pool's nodes have no label disk; they have ",
				"gpu-pool=true"},
		},
	}, {
		pod: "untolerated",
		want: map[string][]string{
			general.Name: {"Filter (plugin NodeAffinity): node(s) didn't match Pod's node affinity/selector: it selects gpu-pool=true, and the pool's nodes have no label gpu-pool"},
			gpu.Name:     {"Filter (plugin TaintToleration): node(s) had untolerated taint {gpu: true}"},
		},
	}} {
		var out string
		s.G.Eventually(func(g Gomega) {
			out = cli.Why(g, "pod/"+tt.pod, "-n", s.Namespace)
			g.Expect(out).To(ContainSubstring("pod %s/%s: Unschedulable", s.Namespace, tt.pod))
			for pool, lines := range tt.want {
				section := poolSection(out, pool)
				for _, line := range lines {
					g.Expect(section).To(ContainSubstring(line), "pool %s, pod %s", pool, tt.pod)
				}
			}
		}).Should(Succeed(), "why pod/%s", tt.pod)
		t.Logf("kubectl claimscale why pod/%s:\n%s", tt.pod, out)
		note := shortForm(out)
		s.G.Expect(note).To(ContainSubstring("pool %q", general.Name))
		s.G.Expect(note).To(ContainSubstring("pool %q", gpu.Name))
		s.G.Eventually(func() []string { return harness.EventsOf(s.G, "Pod", tt.pod) }).
			Should(ContainElement("FailedProvisioning: "+note), "the pod's event says what why says")
	}
	s.G.Expect(s.Claims()).To(BeEmpty(), "no node is bought for pods no pool holds")
}

// shortForm is the line of `why pod/…` that is the pod's event.
func shortForm(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if note, ok := strings.CutPrefix(strings.TrimSpace(line), "no pool can hold the pod: "); ok {
			return "no pool can hold the pod: " + note
		}
	}
	return ""
}

// poolSection is the part of `why pod/…` about one pool: its line and
// the indented lines under it.
func poolSection(out, pool string) string {
	var section []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "  pool "+pool+": "):
			in = true
		case !strings.HasPrefix(line, "    "):
			in = false
		}
		if in {
			section = append(section, line)
		}
	}
	return strings.Join(section, "\n")
}

// An underused node that a cheaper one could replace is kept while a pod
// on it is annotated do-not-disrupt, then while a PodDisruptionBudget
// allows no eviction, then while its pool's disruption budget is 0; `why
// node/…` says which each time, and once nothing holds it, it goes.
func TestWhyNodeSaysWhatKeepsIt(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "why-node")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateConsolidatingPool(time.Second, harness.WithBudgetOfZero)
	big := s.CreateDeployment("big", 1, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("big") }).Should(Equal(1))
	s.CreateDeployment("guarded", 1, "1", func(deployment *appsv1.Deployment) {
		deployment.Spec.Template.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
	})
	s.G.Eventually(func() int { return s.RunningPods("guarded") }).Should(Equal(1))
	s.CreatePodDisruptionBudget("guarded", 0)
	s.G.Expect(s.Claims()).To(HaveLen(1))
	kept := s.Claims()[0]
	s.Scale(big, 0)

	expectWhy := func(reason string, says ...string) {
		t.Helper()
		var out string
		s.G.Eventually(func(g Gomega) {
			out = cli.Why(g, "node/"+kept.Status.NodeName)
			g.Expect(out).To(ContainSubstring("node %s (claim %s, pool %s): Kept, %s", kept.Status.NodeName, kept.Name, s.Name, reason))
			for _, text := range says {
				g.Expect(out).To(ContainSubstring(text))
			}
		}).Should(Succeed(), "why node: %s", reason)
		t.Logf("kubectl claimscale why node/%s:\n%s", kept.Status.NodeName, out)
		byClaim := cli.Why(s.G, "nodeclaim/"+kept.Name)
		s.G.Expect(byClaim).To(ContainSubstring("Kept, "+reason), "the same record by the claim's name")
	}

	// get shows the kept node with what it costs and how full it is: one
	// cpu of four requested.
	s.G.Eventually(func(g Gomega) {
		out, err := cli.Run("get")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s+%s\s+c4\s+\S+\s+\S+\s+25%%\s+\d+%%\s+0\.4\s+Ready$`, s.Name, kept.Name, kept.Status.NodeName))
		t.Logf("kubectl claimscale get:\n%s", out)
	}).Should(Succeed())

	guarded := s.Pods("guarded")[0]
	expectWhy("DoNotDisrupt", "pod "+s.Namespace+"/"+guarded.Name+" is annotated "+v1alpha1.AnnotationDoNotDisrupt)

	patch := client.MergeFrom(guarded.DeepCopy())
	delete(guarded.Annotations, v1alpha1.AnnotationDoNotDisrupt)
	s.G.Expect(env.Client.Patch(s.Ctx, &guarded, patch)).To(Succeed())
	expectWhy("PodDisruptionBudget", "PodDisruptionBudget "+s.Namespace+"/guarded of pod "+guarded.Name+" allows no disruption now")

	s.G.Expect(env.Client.Delete(s.Ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: s.Namespace}})).To(Succeed())
	expectWhy("DisruptionBudget", "disruption budget for Underutilized allows 0 disruptions now")
	s.G.Expect(s.Claims()).To(HaveLen(1), "the budget of 0 kept it")

	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "100%"}}
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).NotTo(Equal(kept.Name))
	}).Should(Succeed(), "once nothing holds it the node is replaced by a cheaper one")
}

// In dry-run the controller decides as in native mode and records it, but
// buys nothing: the pods stay pending, no claim or machine appears, and
// `why pod/…` says which pool and shape a real run would have bought.
func TestDryRunDecidesAndRecordsButCreatesNothing(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address, DryRun: true})
	s := harness.NewScenario(t, "dry-run")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	s.CreateDeployment("web", 2, "1", nil)
	s.G.Eventually(func() []corev1.Pod { return s.Pods("web") }).Should(HaveLen(2))
	pods := s.Pods("web")

	for _, pod := range pods {
		var out string
		s.G.Eventually(func(g Gomega) {
			out = cli.Why(g, "pod/"+pod.Name, "-n", s.Namespace)
			g.Expect(out).To(ContainSubstring("pod %s/%s: NewNode (dry-run)", s.Namespace, pod.Name))
			g.Expect(out).To(ContainSubstring("a new node of pool %s, shape c4", s.Name))
		}).Should(Succeed())
		t.Logf("kubectl claimscale why pod/%s:\n%s", pod.Name, out)
		s.G.Eventually(func() []string { return harness.EventsOf(s.G, "Pod", pod.Name) }).
			Should(ContainElement(ContainSubstring("WouldNominate: dry-run: pod would schedule on a new node (pool %s, shape c4)", s.Name)))
	}
	s.G.Consistently(func(g Gomega) {
		g.Expect(s.Claims()).To(BeEmpty())
		g.Expect(s.Machines()).To(BeEmpty())
		g.Expect(s.Nodes()).To(BeEmpty())
		for _, pod := range s.Pods("web") {
			g.Expect(pod.Spec.NodeName).To(BeEmpty())
		}
	}, 5*time.Second, 250*time.Millisecond).Should(Succeed(), "a dry run buys nothing, and the pods stay pending")
}

// simulate answers "what if I deploy this" with the controller's own
// decision: it says which nodes would be bought, writes nothing (every
// object it reads keeps its resourceVersion), and the controller, given
// the same workload for real, buys exactly those.
func TestSimulateAgreesWithTheControllerAndWritesNothing(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "simulate")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "c4", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.4"},
			{Name: "c8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.9"},
		}
	})
	web := s.DeploymentObject("web", 5, "1500m")
	workload := filepath.Join(t.TempDir(), "workload.yaml")
	data, err := yaml.Marshal(web)
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Expect(os.WriteFile(workload, data, 0o600)).To(Succeed())

	s.G.Eventually(func(g Gomega) {
		out, err := cli.Run("simulate", "-f", workload, "-n", s.Namespace)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).NotTo(ContainSubstring("pools left out"), "the controller has resolved the pool")
		var pool v1alpha1.NodePool
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(pool.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
	}).Should(Succeed())
	// The controller has settled the pool's status: from here only a
	// write of simulate's would change a resourceVersion.
	before := s.ResourceVersions()
	out, err := cli.Run("simulate", "-f", workload, "-n", s.Namespace)
	s.G.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubectl claimscale simulate -f workload.yaml:\n%s", out)
	s.G.Expect(s.ResourceVersions()).To(Equal(before), "simulate wrote nothing")
	// The same decision offline, from a snapshot, with neither the cluster
	// nor the controller.
	snapshot, err := cli.Run("snapshot")
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Expect(s.ResourceVersions()).To(Equal(before), "snapshot wrote nothing")
	s.G.Expect(snapshot).NotTo(ContainSubstring(`"kind": "Secret"`))
	s.G.Expect(snapshot).NotTo(ContainSubstring(`"env"`), "pod specs are stripped to what scheduling reads")
	snapshotFile := filepath.Join(t.TempDir(), "cluster.json")
	s.G.Expect(os.WriteFile(snapshotFile, []byte(snapshot), 0o600)).To(Succeed())
	var offline, offlineErr bytes.Buffer
	replay := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &offline, ErrOut: &offlineErr})
	replay.SetArgs([]string{"simulate", "--from", snapshotFile, "-f", workload, "-n", s.Namespace})
	s.G.Expect(replay.Execute()).To(Succeed(), offlineErr.String())
	t.Logf("kubectl claimscale simulate --from cluster.json -f workload.yaml:\n%s", offline.String())
	s.G.Expect(offline.String()).To(Equal(out), "the replay decides as the live simulation did")

	predicted := harness.SimulatedNodes(out, s.Name)
	s.G.Expect(predicted).NotTo(BeEmpty())
	s.G.Expect(out).NotTo(ContainSubstring(" "+s.Namespace+"/"), "every pod of the workload finds a node")

	s.G.Expect(env.Client.Create(s.Ctx, web)).To(Succeed())
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(5))
	actual := map[string]int{}
	for _, claim := range s.Claims() {
		actual[claim.Spec.Shape.Name]++
	}
	s.G.Expect(actual).To(Equal(predicted), "the controller bought what simulate said")
}
