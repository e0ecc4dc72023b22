package kubectlplugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// offlineCluster is an empty cluster with one pool of a small and a large
// shape, as a snapshot holds it.
func offlineCluster() *Snapshot {
	quantity := func(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
	return &Snapshot{
		Version: snapshotVersion,
		Offers: []decisions.PoolOffer{{Pool: "general", Shapes: []decisions.OfferShape{
			{Name: "small", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.05},
			{Name: "large", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}, Price: 0.2},
		}}},
		NodeProviders: []v1alpha1.NodeProvider{{ObjectMeta: metav1.ObjectMeta{Name: "sim"}, Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated}}},
		NodePools: []v1alpha1.NodePool{{
			ObjectMeta: metav1.ObjectMeta{Name: "general"},
			Spec: v1alpha1.NodePoolSpec{
				ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
				Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
					{Name: "small", CPU: quantity("1"), Memory: quantity("4Gi"), Price: "0.05"},
					{Name: "large", CPU: quantity("4"), Memory: quantity("16Gi"), Price: "0.2"},
				}},
			},
		}},
	}
}

func TestSimulateDecidesOnPodsAsTheAPIServerStoresThem(t *testing.T) {
	deployment := func(name string, resources string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `}
spec:
  replicas: 2
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec: {containers: [{name: app, image: x, resources: ` + resources + `}]}
`
	}
	limitRange := corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: "shop"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type:           corev1.LimitTypeContainer,
		DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2500m")},
		Default:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")},
	}}}}
	for _, tt := range []struct {
		name     string
		manifest string
		ranges   []corev1.LimitRange
		want     []string
	}{{
		name:     "limits only: the pods request their limits, and take a large node each",
		manifest: deployment("web", "{limits: {cpu: '3', memory: 1Gi}}"),
		want:     []string{"general  large  -     2      0.4", "would buy 2 nodes for 0.4/h"},
	}, {
		name:     "no resources in a namespace with a LimitRange: its default requests",
		manifest: deployment("web", "{}"),
		ranges:   []corev1.LimitRange{limitRange},
		want:     []string{"general  large  -     2      0.4"},
	}, {
		name: "a LimitRange in the files applies to their pods, as if applied together",
		manifest: `apiVersion: v1
kind: LimitRange
metadata: {name: defaults}
spec: {limits: [{type: Container, defaultRequest: {cpu: 2500m}}]}
---
` + deployment("web", "{}"),
		want: []string{"general  large  -     2      0.4"},
	}, {
		name:     "an extended resource no shape has: pending, as the controller leaves it",
		manifest: deployment("gpu", "{limits: {nvidia.com/gpu: '1'}}"),
		want: []string{"would buy no node", "2 pods would stay pending:",
			`shop/gpu-0: no pool can hold the pod: pool "general": no shape of the pool has nvidia.com/gpu`},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := readWorkloads([]string{"-"}, strings.NewReader(tt.manifest), "shop")
			if err != nil {
				t.Fatal(err)
			}
			cluster := offlineCluster()
			cluster.LimitRanges = tt.ranges
			report, err := simulate(context.Background(), snapshotReader{cluster}, cluster.Offers, w)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := writeSimulation(&out, report); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("simulate said\n%s\nwant it to contain %q", out.String(), want)
				}
			}
		})
	}
}

func TestSimulateSaysWhatADaemonSetCostsOnTheExistingNodes(t *testing.T) {
	cluster := offlineCluster()
	node := func(name string) corev1.Node {
		return corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, v1alpha1.LabelNodePool: "general"}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		}
	}
	running := func(name, node, cpu string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: "uid-" + types.UID(name)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	claim := func(node string) v1alpha1.NodeClaim {
		c := v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: node}}
		c.Spec.NodePoolRef.Name = "general"
		c.Spec.Shape = v1alpha1.ClaimShape{Name: "large", Price: "0.2"}
		c.Status.NodeName = node
		return c
	}
	cluster.Nodes = []corev1.Node{node("roomy"), node("full")}
	cluster.Pods = []corev1.Pod{running("a", "roomy", "1"), running("b", "full", "3800m")}
	cluster.NodeClaims = []v1alpha1.NodeClaim{claim("roomy"), claim("full")}
	w, err := readWorkloads([]string{"-"}, strings.NewReader(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: x, resources: {requests: {cpu: 500m}}}]}
`), "shop")
	if err != nil {
		t.Fatal(err)
	}
	report, err := simulate(context.Background(), snapshotReader{cluster}, cluster.Offers, w)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeSimulation(&out, report); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"DaemonSet shop/agent: a pod (cpu=500m) on each of 2 existing nodes and on every new node it selects, taking 0.025/h of the existing nodes' price",
		"its pod would stay pending on 1 node without room (a DaemonSet's pod buys no node): full",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("simulate said\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}

func TestSimulatePrintsItsAnswerAsData(t *testing.T) {
	cluster := offlineCluster()
	w, err := readWorkloads([]string{"-"}, strings.NewReader(`apiVersion: v1
kind: Pod
metadata: {name: web}
spec: {containers: [{name: app, image: x, resources: {requests: {cpu: '3'}}}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
`), "shop")
	if err != nil {
		t.Fatal(err)
	}
	report, err := simulate(context.Background(), snapshotReader{cluster}, cluster.Offers, w)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printStructured(&out, "yaml", report); err != nil {
		t.Fatal(err)
	}
	want := `newNodeCount: 1
newNodes:
- count: 1
  pods:
  - shop/web-0
  pool: general
  pricePerHour: 0.2
  shape: large
placed: 0
pricePerHour: 0.2
skipped:
- Service web
`
	if out.String() != want {
		t.Errorf("simulate -o yaml printed\n%s\nwant\n%s", out.String(), want)
	}
}
