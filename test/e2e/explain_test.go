package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/kubectlplugin"
)

// claimscaleCLI runs `kubectl claimscale` in this process against the
// in-process controller's endpoint, as a user bound to the decisions
// reader role (the chart's <release>-decisions-reader) with a token.
type claimscaleCLI struct {
	endpoint   string
	kubeconfig string
}

func newClaimscaleCLI(ctx context.Context, t *testing.T, endpoint string) *claimscaleCLI {
	t.Helper()
	return newClaimscaleCLIAs(ctx, t, endpoint, "cluster-admin")
}

// newClaimscaleCLIAs is newClaimscaleCLI for a user who is bound to
// clusterRole instead of cluster-admin, besides the decisions reader role.
func newClaimscaleCLIAs(ctx context.Context, t *testing.T, endpoint, clusterRole string) *claimscaleCLI {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	account := "decisions-reader-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	if clusterRole != "cluster-admin" {
		account = strings.ReplaceAll(clusterRole, ":", "-") + "-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	}
	if len(account) > 60 {
		account = strings.TrimRight(account[:60], "-")
	}
	token := serviceAccountToken(ctx, t, clientset, account)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: account},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/decisions", "/decisions/*"}, Verbs: []string{"get"}}},
	}
	grantClusterRole(ctx, t, role, account)
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["e2e"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kubeconfig.AuthInfos["reader"] = &clientcmdapi.AuthInfo{Token: token}
	kubeconfig.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "reader", Namespace: "default"}
	kubeconfig.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	// get and simulate list nodes, pods, DaemonSets and claimscale.io
	// objects with the caller's credentials; by default an
	// administrator's.
	viewer := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: account + "-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: controllerNamespace}},
	}
	if err := env.Client.Create(ctx, viewer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), viewer) })
	return &claimscaleCLI{endpoint: "https://" + endpoint, kubeconfig: path}
}

// run returns what the command printed, and its error.
func (c *claimscaleCLI) run(args ...string) (string, error) {
	return c.runWithInput("", args...)
}

// runWithInput runs the command with stdin.
func (c *claimscaleCLI) runWithInput(stdin string, args ...string) (string, error) {
	var out bytes.Buffer
	err := c.runContext(context.Background(), strings.NewReader(stdin), &out, args...)
	return out.String(), err
}

// runContext runs the command until it ends or ctx does, printing to out.
func (c *claimscaleCLI) runContext(ctx context.Context, in io.Reader, out io.Writer, args ...string) error {
	var errOut bytes.Buffer
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: in, Out: out, ErrOut: &errOut})
	cmd.SetArgs(append(args, "--kubeconfig", c.kubeconfig, "--endpoint", c.endpoint, "--insecure-skip-endpoint-verify"))
	return cmd.ExecuteContext(ctx)
}

// why runs `why`, failing the poll (not the test) on an error: the
// decision may not be taken yet.
func (c *claimscaleCLI) why(g Gomega, args ...string) string {
	out, err := c.run(append([]string{"why"}, args...)...)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

// A pod that fits no pool, for each of the reasons a user meets most: too
// large for every shape, a node selector no pool offers, a taint it does
// not tolerate on the only pool it selects. `why pod/…` names each pool
// and its reason, with the numbers, and the pod's event says the same.
func TestWhyPodNamesEachPoolsReason(t *testing.T) {
	address := freeLocalAddress(t)
	startOperator(t, operatorOptions{metricsAddress: address})
	s := newScenario(t, "why-pod")
	defer s.cleanup()
	cli := newClaimscaleCLI(s.ctx, t, address)
	s.createProvider(v1alpha1.SimulatedSettings{})
	general := s.createPool(nil)
	gpu := s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Name = s.name + "-gpu"
		pool.Spec.Template.Labels["gpu-pool"] = "true"
		pool.Spec.Template.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "g8", CPU: qty("8"), Memory: qty("32Gi"), Price: "1"}}
		// At its limit from the start: a pod it could never hold says
		// that first.
		pool.Spec.Limits = &v1alpha1.Limits{Nodes: ptr(int32(0))}
	})
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), gpu) })

	pod := func(name, cpu string, selector map[string]string, tolerateGPU bool) {
		tolerations := []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}
		if tolerateGPU {
			tolerations = append(tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
		}
		selector["scenario"] = s.name
		s.g.Expect(env.Client.Create(s.ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace},
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
				"scenario=" + s.name},
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
		s.g.Eventually(func(g Gomega) {
			out = cli.why(g, "pod/"+tt.pod, "-n", s.namespace)
			g.Expect(out).To(ContainSubstring("pod %s/%s: Unschedulable", s.namespace, tt.pod))
			for pool, lines := range tt.want {
				section := poolSection(out, pool)
				for _, line := range lines {
					g.Expect(section).To(ContainSubstring(line), "pool %s, pod %s", pool, tt.pod)
				}
			}
		}).Should(Succeed(), "why pod/%s", tt.pod)
		t.Logf("kubectl claimscale why pod/%s:\n%s", tt.pod, out)
		note := shortForm(out)
		s.g.Expect(note).To(ContainSubstring("pool %q", general.Name))
		s.g.Expect(note).To(ContainSubstring("pool %q", gpu.Name))
		s.g.Eventually(func() []string { return eventsOf(s.g, "Pod", tt.pod) }).
			Should(ContainElement("FailedProvisioning: "+note), "the pod's event says what why says")
	}
	s.g.Expect(s.claims()).To(BeEmpty(), "no node is bought for pods no pool holds")
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
	address := freeLocalAddress(t)
	startOperator(t, operatorOptions{metricsAddress: address})
	s := newScenario(t, "why-node")
	defer s.cleanup()
	cli := newClaimscaleCLI(s.ctx, t, address)
	s.createConsolidatingPool(time.Second, withBudgetOfZero)
	big := s.createDeployment("big", 1, "3", nil)
	s.g.Eventually(func() int { return s.runningPods("big") }).Should(Equal(1))
	s.createDeployment("guarded", 1, "1", func(deployment *appsv1.Deployment) {
		deployment.Spec.Template.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
	})
	s.g.Eventually(func() int { return s.runningPods("guarded") }).Should(Equal(1))
	s.createPodDisruptionBudget("guarded", 0)
	s.g.Expect(s.claims()).To(HaveLen(1))
	kept := s.claims()[0]
	s.scale(big, 0)

	expectWhy := func(reason string, says ...string) {
		t.Helper()
		var out string
		s.g.Eventually(func(g Gomega) {
			out = cli.why(g, "node/"+kept.Status.NodeName)
			g.Expect(out).To(ContainSubstring("node %s (claim %s, pool %s): Kept, %s", kept.Status.NodeName, kept.Name, s.name, reason))
			for _, text := range says {
				g.Expect(out).To(ContainSubstring(text))
			}
		}).Should(Succeed(), "why node: %s", reason)
		t.Logf("kubectl claimscale why node/%s:\n%s", kept.Status.NodeName, out)
		byClaim := cli.why(s.g, "nodeclaim/"+kept.Name)
		s.g.Expect(byClaim).To(ContainSubstring("Kept, "+reason), "the same record by the claim's name")
	}

	// get shows the kept node with what it costs and how full it is: one
	// cpu of four requested.
	s.g.Eventually(func(g Gomega) {
		out, err := cli.run("get")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`(?m)^%s\s+%s\s+%s\s+c4\s+\S+\s+\S+\s+25%%\s+\d+%%\s+0\.4\s+Ready$`, s.name, kept.Name, kept.Status.NodeName))
		t.Logf("kubectl claimscale get:\n%s", out)
	}).Should(Succeed())

	guarded := s.pods("guarded")[0]
	expectWhy("DoNotDisrupt", "pod "+s.namespace+"/"+guarded.Name+" is annotated "+v1alpha1.AnnotationDoNotDisrupt)

	patch := client.MergeFrom(guarded.DeepCopy())
	delete(guarded.Annotations, v1alpha1.AnnotationDoNotDisrupt)
	s.g.Expect(env.Client.Patch(s.ctx, &guarded, patch)).To(Succeed())
	expectWhy("PodDisruptionBudget", "PodDisruptionBudget "+s.namespace+"/guarded of pod "+guarded.Name+" allows no disruption now")

	s.g.Expect(env.Client.Delete(s.ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: s.namespace}})).To(Succeed())
	expectWhy("DisruptionBudget", "disruption budget for Underutilized allows 0 disruptions now")
	s.g.Expect(s.claims()).To(HaveLen(1), "the budget of 0 kept it")

	s.g.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "100%"}}
		return env.Client.Update(s.ctx, &pool)
	}).Should(Succeed())
	s.g.Eventually(func(g Gomega) {
		claims := s.claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).NotTo(Equal(kept.Name))
	}).Should(Succeed(), "once nothing holds it the node is replaced by a cheaper one")
}

// In dry-run the controller decides as in native mode and records it, but
// buys nothing: the pods stay pending, no claim or machine appears, and
// `why pod/…` says which pool and shape a real run would have bought.
func TestDryRunDecidesAndRecordsButCreatesNothing(t *testing.T) {
	address := freeLocalAddress(t)
	startOperator(t, operatorOptions{metricsAddress: address, dryRun: true})
	s := newScenario(t, "dry-run")
	defer s.cleanup()
	cli := newClaimscaleCLI(s.ctx, t, address)
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(nil)
	s.createDeployment("web", 2, "1", nil)
	s.g.Eventually(func() []corev1.Pod { return s.pods("web") }).Should(HaveLen(2))
	pods := s.pods("web")

	for _, pod := range pods {
		var out string
		s.g.Eventually(func(g Gomega) {
			out = cli.why(g, "pod/"+pod.Name, "-n", s.namespace)
			g.Expect(out).To(ContainSubstring("pod %s/%s: NewNode (dry-run)", s.namespace, pod.Name))
			g.Expect(out).To(ContainSubstring("a new node of pool %s, shape c4", s.name))
		}).Should(Succeed())
		t.Logf("kubectl claimscale why pod/%s:\n%s", pod.Name, out)
		s.g.Eventually(func() []string { return eventsOf(s.g, "Pod", pod.Name) }).
			Should(ContainElement(ContainSubstring("WouldNominate: dry-run: pod would schedule on a new node (pool %s, shape c4)", s.name)))
	}
	s.g.Consistently(func(g Gomega) {
		g.Expect(s.claims()).To(BeEmpty())
		g.Expect(s.machines()).To(BeEmpty())
		g.Expect(s.nodes()).To(BeEmpty())
		for _, pod := range s.pods("web") {
			g.Expect(pod.Spec.NodeName).To(BeEmpty())
		}
	}, 5*time.Second, 250*time.Millisecond).Should(Succeed(), "a dry run buys nothing, and the pods stay pending")
}

// simulate answers "what if I deploy this" with the controller's own
// decision: it says which nodes would be bought, writes nothing (every
// object it reads keeps its resourceVersion), and the controller, given
// the same workload for real, buys exactly those.
func TestSimulateAgreesWithTheControllerAndWritesNothing(t *testing.T) {
	address := freeLocalAddress(t)
	startOperator(t, operatorOptions{metricsAddress: address})
	s := newScenario(t, "simulate")
	defer s.cleanup()
	cli := newClaimscaleCLI(s.ctx, t, address)
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "c4", CPU: qty("4"), Memory: qty("16Gi"), Price: "0.4"},
			{Name: "c8", CPU: qty("8"), Memory: qty("32Gi"), Price: "0.9"},
		}
	})
	web := s.deploymentObject("web", 5, "1500m")
	workload := filepath.Join(t.TempDir(), "workload.yaml")
	data, err := yaml.Marshal(web)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(os.WriteFile(workload, data, 0o600)).To(Succeed())

	s.g.Eventually(func(g Gomega) {
		out, err := cli.run("simulate", "-f", workload, "-n", s.namespace)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).NotTo(ContainSubstring("pools left out"), "the controller has resolved the pool")
		var pool v1alpha1.NodePool
		g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(pool.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
	}).Should(Succeed())
	// The controller has settled the pool's status: from here only a
	// write of simulate's would change a resourceVersion.
	before := s.resourceVersions()
	out, err := cli.run("simulate", "-f", workload, "-n", s.namespace)
	s.g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubectl claimscale simulate -f workload.yaml:\n%s", out)
	s.g.Expect(s.resourceVersions()).To(Equal(before), "simulate wrote nothing")
	// The same decision offline, from a snapshot, with neither the cluster
	// nor the controller.
	snapshot, err := cli.run("snapshot")
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(s.resourceVersions()).To(Equal(before), "snapshot wrote nothing")
	s.g.Expect(snapshot).NotTo(ContainSubstring(`"kind": "Secret"`))
	s.g.Expect(snapshot).NotTo(ContainSubstring(`"env"`), "pod specs are stripped to what scheduling reads")
	snapshotFile := filepath.Join(t.TempDir(), "cluster.json")
	s.g.Expect(os.WriteFile(snapshotFile, []byte(snapshot), 0o600)).To(Succeed())
	var offline, offlineErr bytes.Buffer
	replay := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &offline, ErrOut: &offlineErr})
	replay.SetArgs([]string{"simulate", "--from", snapshotFile, "-f", workload, "-n", s.namespace})
	s.g.Expect(replay.Execute()).To(Succeed(), offlineErr.String())
	t.Logf("kubectl claimscale simulate --from cluster.json -f workload.yaml:\n%s", offline.String())
	s.g.Expect(offline.String()).To(Equal(out), "the replay decides as the live simulation did")

	predicted := simulatedNodes(out, s.name)
	s.g.Expect(predicted).NotTo(BeEmpty())
	s.g.Expect(out).NotTo(ContainSubstring(" "+s.namespace+"/"), "every pod of the workload finds a node")

	s.g.Expect(env.Client.Create(s.ctx, web)).To(Succeed())
	s.g.Eventually(func() int { return s.runningPods("web") }).Should(Equal(5))
	actual := map[string]int{}
	for _, claim := range s.claims() {
		actual[claim.Spec.Shape.Name]++
	}
	s.g.Expect(actual).To(Equal(predicted), "the controller bought what simulate said")
}

// simulatedNodes reads simulate's table: count per shape of one pool.
func simulatedNodes(out, pool string) map[string]int {
	counts := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 5 && fields[0] == pool {
			n, err := strconv.Atoi(fields[3])
			if err == nil {
				counts[fields[1]] += n
			}
		}
	}
	return counts
}

// resourceVersions of every object of every kind a simulation reads, and
// of the controller's machines, keyed by kind, namespace and name.
func (s *scenario) resourceVersions() map[string]string {
	versions := map[string]string{}
	for kind, list := range map[string]client.ObjectList{
		"Pod": &corev1.PodList{}, "Node": &corev1.NodeList{}, "Namespace": &corev1.NamespaceList{},
		"ConfigMap": &corev1.ConfigMapList{}, "Deployment": &appsv1.DeploymentList{}, "DaemonSet": &appsv1.DaemonSetList{},
		"ReplicaSet": &appsv1.ReplicaSetList{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
		"NodePool": &v1alpha1.NodePoolList{}, "NodeClaim": &v1alpha1.NodeClaimList{}, "NodeProvider": &v1alpha1.NodeProviderList{},
	} {
		s.g.Expect(env.Client.List(s.ctx, list)).To(Succeed())
		items, err := meta.ExtractList(list)
		s.g.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			object := item.(client.Object)
			// Only what this scenario owns: other objects (kwok's node
			// heartbeats, leases) change on their own.
			if object.GetNamespace() != s.namespace && object.GetNamespace() != controllerNamespace &&
				object.GetName() != s.name && object.GetName() != s.namespace && object.GetLabels()[v1alpha1.LabelNodePool] != s.name {
				continue
			}
			versions[kind+" "+object.GetNamespace()+"/"+object.GetName()] = object.GetResourceVersion()
		}
	}
	return versions
}
