package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// simulate -f sees a workload as the API server will store it, and what it
// predicts is what the controller buys: the same files go to simulate and,
// applied for real, to the controller, one case after another on one pool
// (small 1 cpu at 0.05/h, large 4 cpu at 0.4/h, xlarge 8 cpu at 0.9/h).
// Before, a Deployment with limits only was predicted one small node.
func TestSimulateBuysWhatTheControllerBuysForTheSameFiles(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "simulate-files")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "small", CPU: harness.Qty("1"), Memory: harness.Qty("4Gi"), Price: "0.05"},
			{Name: "large", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.4"},
			{Name: "xlarge", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.9"},
		}
		pool.Spec.Disruption.ConsolidateAfter.Duration = 0
	})
	// Every pod of the files goes to the scenario's pool and tolerates
	// kwok's nodes.
	podSpec := func(resources string) string {
		return fmt.Sprintf(`{nodeSelector: {scenario: %s}, tolerations: [{key: kwok.x-k8s.io/node, operator: Exists}], containers: [{name: app, image: registry.example/app:1, resources: %s}]}`, s.Name, resources)
	}
	deployment := func(name string, replicas int, resources string) string {
		return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec: %[3]s
`, name, replicas, podSpec(resources))
	}
	for i, tt := range []struct {
		name string
		// limitRange, when set, is the namespace's LimitRange (its
		// spec.limits[0]), there before simulate runs.
		limitRange *corev1.LimitRangeItem
		files      string
		// want is what both buy, by shape; pending the pods that stay.
		want    map[string]int
		pending int
		says    []string
	}{{
		name:  "limits only: the pods request their limits",
		files: deployment("web", 2, "{limits: {cpu: '3', memory: 1Gi}}"),
		want:  map[string]int{"xlarge": 1},
		says:  []string{"would buy 1 node for 0.9/h"},
	}, {
		name: "a LimitRange's default requests",
		limitRange: &corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
			DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		files: deployment("web", 2, "{}"),
		want:  map[string]int{"xlarge": 1},
	}, {
		name:    "an extended resource no shape has stays pending",
		files:   deployment("gpu", 2, "{limits: {nvidia.com/gpu: '1'}}"),
		want:    map[string]int{},
		pending: 2,
		says:    []string{"would buy no node", "no shape of the pool has nvidia.com/gpu"},
	}, {
		name: "a file of many kinds: what makes no pods is skipped with a note",
		files: fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}], selector: {app: web}}
---
%s---
apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  parallelism: 1
  template: {spec: %s}
`, deployment("web", 2, "{requests: {cpu: 1500m, memory: 1Gi}}"), strings.Replace(podSpec("{requests: {cpu: 500m, memory: 256Mi}}"), "{nodeSelector", "{restartPolicy: Never, nodeSelector", 1)),
		want: map[string]int{"large": 1},
		says: []string{"skipped 2 objects that make no pods: ConfigMap settings, Service web"},
	}, {
		name: "a DaemonSet is on every new node: two pods that share an xlarge alone need one each with it",
		files: fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: %s
---
%s`, podSpec("{requests: {cpu: 1500m, memory: 256Mi}}"), deployment("web", 2, "{requests: {cpu: 3500m, memory: 1Gi}}")),
		want: map[string]int{"xlarge": 2},
		says: []string{"DaemonSet " + s.Name + "-5/agent: a pod (cpu=1500m, memory=256Mi) on each of 0 existing nodes"},
	}} {
		namespace := fmt.Sprintf("%s-%d", s.Name, i+1)
		s.G.Expect(env.Client.Create(s.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
		if tt.limitRange != nil {
			s.G.Expect(env.Client.Create(s.Ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: namespace},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{*tt.limitRange}}})).To(Succeed())
		}
		file := filepath.Join(t.TempDir(), "workload.yaml")
		s.G.Expect(os.WriteFile(file, []byte(tt.files), 0o600)).To(Succeed())

		var out string
		s.G.Eventually(func(g Gomega) {
			var err error
			out, err = cli.Run("simulate", "-f", file, "-n", namespace)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).NotTo(ContainSubstring("pools left out"), "the controller has resolved the pool")
		}).Should(Succeed(), tt.name)
		t.Logf("%s: kubectl claimscale simulate -f workload.yaml:\n%s", tt.name, out)
		predicted := harness.SimulatedNodes(out, s.Name)
		for _, says := range tt.says {
			s.G.Expect(out).To(ContainSubstring(says), tt.name)
		}
		s.G.Expect(predicted).To(Equal(tt.want), "%s: simulate buys", tt.name)
		s.G.Expect(strings.Count(out, "  "+namespace+"/")).To(Equal(tt.pending), "%s: pods simulate leaves pending", tt.name)

		// The same files, applied.
		objects, err := testenv.DecodeManifests([]byte(tt.files))
		s.G.Expect(err).NotTo(HaveOccurred())
		for _, object := range objects {
			object.SetNamespace(namespace)
			s.G.Expect(env.Client.Create(s.Ctx, object)).To(Succeed(), "%s: %s %s", tt.name, object.GetKind(), object.GetName())
		}
		if tt.pending > 0 {
			s.G.Eventually(func() int { return podsWithEvent(s, namespace, "FailedProvisioning") }).Should(Equal(tt.pending),
				"%s: the controller refused the pods simulate leaves pending", tt.name)
		} else {
			s.G.Eventually(func() int { return unboundPods(s, namespace) }).Should(BeZero(), "%s: every pod bound", tt.name)
		}
		bought := map[string]int{}
		for _, claim := range s.Claims() {
			bought[claim.Spec.Shape.Name]++
		}
		s.G.Expect(bought).To(Equal(tt.want), "%s: the controller bought what simulate said", tt.name)

		// No namespace controller runs here: the objects go one by one,
		// their pods with them.
		for _, object := range objects {
			s.G.Expect(env.Client.Delete(s.Ctx, object, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		}
		s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero(), "%s: the nodes go with the workload", tt.name)
	}
}

// unboundPods counts the pods of a namespace without a node.
func unboundPods(s *harness.Scenario, namespace string) int {
	var list corev1.PodList
	s.G.Expect(env.Client.List(context.Background(), &list, client.InNamespace(namespace))).To(Succeed())
	unbound := 0
	for _, pod := range list.Items {
		// A DaemonSet's pod follows its node, and the scheduler may bind
		// both web pods to whichever new node registers first, leaving
		// that node's agent no room: a race between the scheduler and the
		// nodes' joins, not a purchase, which is what this test compares.
		if pod.Spec.NodeName == "" && !ownedByDaemonSet(&pod) {
			unbound++
		}
	}
	if len(list.Items) == 0 {
		return -1
	}
	return unbound
}

// podsWithEvent counts the pods of a namespace with an event of reason.
func podsWithEvent(s *harness.Scenario, namespace, reason string) int {
	var list corev1.EventList
	s.G.Expect(env.Client.List(context.Background(), &list, client.InNamespace(namespace))).To(Succeed())
	pods := map[string]bool{}
	for _, event := range list.Items {
		if event.InvolvedObject.Kind == "Pod" && event.Reason == reason {
			pods[event.InvolvedObject.Name] = true
		}
	}
	return len(pods)
}

func ownedByDaemonSet(pod *corev1.Pod) bool {
	for _, owner := range pod.OwnerReferences {
		if owner.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}
