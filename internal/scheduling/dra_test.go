package scheduling

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

const gpuDriver = "gpu.example.com"

// gpuClass selects the devices of the GPU driver.
func gpuClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + gpuDriver + `"`},
		}}},
	}
}

// gpuSlices is a template slice of n GPUs of a model.
func gpuSlices(model string, n int) []v1alpha1.TemplateResourceSlice {
	t := v1alpha1.TemplateResourceSlice{Driver: gpuDriver}
	for i := range n {
		t.Devices = append(t.Devices, v1alpha1.TemplateDevice{
			Name:       fmt.Sprintf("gpu-%d", i),
			Attributes: map[string]v1alpha1.TemplateDeviceAttribute{"model": {String: ptr.To(model)}},
			Capacity:   map[string]resource.Quantity{"memory": q("80Gi")},
		})
	}
	return []v1alpha1.TemplateResourceSlice{t}
}

func withSlices(s Shape, slices []v1alpha1.TemplateResourceSlice) Shape {
	s.ResourceSlices = slices
	return s
}

// draPools are a pool whose shapes have no devices, one, two or four
// a100s, or one t4.
func draPools() []Pool {
	return []Pool{nodePool("dra", []Shape{
		shape("small", "4", "16Gi", 1),
		withSlices(shape("a100-1", "8", "64Gi", 10), gpuSlices("a100", 1)),
		withSlices(shape("a100-2", "16", "128Gi", 18), gpuSlices("a100", 2)),
		withSlices(shape("a100-4", "32", "256Gi", 40), gpuSlices("a100", 4)),
		withSlices(shape("t4-1", "8", "32Gi", 4), gpuSlices("t4", 1)),
	}, noEviction())}
}

// claimedPods are n pods whose claims (made from a template, as the
// ResourceClaim controller does) each ask for one GPU of a model.
func claimedPods(n int, prefix, model string) ([]*corev1.Pod, []*resourcev1.ResourceClaim) {
	var claims []*resourcev1.ResourceClaim
	pods := pods(n, prefix, "1", "1Gi")
	for _, p := range pods {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(prefix + "-gpu")}}
		name := p.Name + "-gpu"
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(name)}}
		claims = append(claims, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: p.Namespace, UID: types.UID("claim-" + name),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}},
			},
			Spec: gpuClaimSpec(model),
		})
	}
	return pods, claims
}

func gpuClaimSpec(model string) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "gpu",
		Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: "gpu",
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: `device.attributes["` + gpuDriver + `"].model == "` + model + `"`,
			}}},
			AllocationMode: resourcev1.DeviceAllocationModeExactCount,
			Count:          1,
		},
	}}}}
}

func TestClaimsGetANodeWhoseTemplateSlicesSatisfyThem(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		model string
		want  map[string]int
	}{
		{"a pod asking an a100 gets the cheapest shape with one", 1, "a100", map[string]int{"dra/a100-1": 1}},
		{"a pod asking a t4 gets the t4 shape", 1, "t4", map[string]int{"dra/t4-1": 1}},
		{"two pods share a two-a100 node: no device is given twice", 2, "a100", map[string]int{"dra/a100-2": 1}},
		{"three pods need three a100s: the four-a100 shape, the cheapest with three", 3, "a100", map[string]int{"dra/a100-4": 1}},
		{"four pods fill a four-a100 node", 4, "a100", map[string]int{"dra/a100-4": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending, claims := claimedPods(tt.n, "train", tt.model)
			c := Cluster{Pools: draPools(), DRA: DRA{ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}}}
			r := solve(t, c, pending)
			if len(r.Unschedulable) > 0 {
				t.Fatalf("unschedulable: %s", r.Unschedulable[0].Reason)
			}
			if got := newNodesByShape(r); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("new nodes %v, want %v", got, tt.want)
			}
		})
	}
}

// A booting node's devices are counted: the pod it was bought for takes
// its one a100 again, a second pod needs a node of its own.
func TestBootingNodesDevicesAreGivenOnce(t *testing.T) {
	pending, claims := claimedPods(2, "train", "a100")
	c := Cluster{
		Pools:    draPools(),
		DRA:      DRA{ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}},
		InFlight: []InFlight{{Name: "booting", Pool: "dra", Shape: shape("a100-1", "8", "64Gi", 10)}},
	}
	r := solve(t, c, pending)
	if len(r.Placements) != 1 || r.Placements[0].Node != "booting" {
		t.Errorf("placements %v: want one pod on the booting node", r.Placements)
	}
	if got := newNodesByShape(r); fmt.Sprint(got) != fmt.Sprint(map[string]int{"dra/a100-1": 1}) {
		t.Errorf("new nodes %v, want one a100-1 for the second pod", got)
	}
}

// A real node's devices, published by its driver, serve a pending pod
// unless a claim holds them.
func TestRealNodesDevicesServeUntilAllocated(t *testing.T) {
	real := node("gpu-node", "16", "64Gi", nil)
	slices := templateSlices(gpuSlices("a100", 1), "gpu-node")
	for _, taken := range []bool{false, true} {
		t.Run(fmt.Sprintf("taken=%v", taken), func(t *testing.T) {
			pending, claims := claimedPods(1, "train", "a100")
			var bound []*corev1.Pod
			if taken {
				running, held := claimedPods(1, "running", "a100")
				onNode("gpu-node")(running[0])
				held[0].Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: gpuDriver, Pool: "gpu-node", Device: "gpu-0",
				}}}}
				claims = append(claims, held[0])
				bound = running
			}
			c := Cluster{
				Pools: draPools(), Nodes: []*corev1.Node{real}, Pods: bound,
				DRA: DRA{ResourceSlices: slices, ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}},
			}
			r := solve(t, c, pending)
			onReal := len(r.Placements) == 1 && r.Placements[0].Node == "gpu-node"
			if onReal == taken || taken && len(r.NewNodes) != 1 {
				t.Errorf("device taken %v: placements %v, new nodes %v", taken, r.Placements, newNodesByShape(r))
			}
		})
	}
}

// A pod whose claim no shape's devices satisfy gets no node, and the
// refusal names what it asks for and what the pool has.
func TestADeviceNoPoolHasIsNamed(t *testing.T) {
	pending, claims := claimedPods(1, "train", "h100")
	c := Cluster{Pools: draPools(), DRA: DRA{ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}}}
	r := solve(t, c, pending)
	if len(r.NewNodes) != 0 || len(r.Unschedulable) != 1 {
		t.Fatalf("want no node and the pod unschedulable, got %v and %d unschedulable", newNodesByShape(r), len(r.Unschedulable))
	}
	reason := r.Unschedulable[0].Reason
	for _, want := range []string{"no shape of the pool has the devices", "device class gpu", `model == "h100"`, "gpu.example.com: 1 on t4-1"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
	if p := r.Unschedulable[0].Pools; len(p) != 1 || p[0].Plugin != "DynamicResources" {
		t.Errorf("pool refusals %+v, want DynamicResources's", p)
	}

	c.DRA.DeviceClasses = nil
	r = solve(t, c, pending)
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "device class gpu does not exist") {
		t.Errorf("without its DeviceClass: %+v", r.Unschedulable)
	}
}

// Pods without claims pack as they did, on a cluster with device pools:
// as on the same shapes without template slices.
func TestPodsWithoutClaimsIgnoreTemplateSlices(t *testing.T) {
	pools := draPools()
	plain := draPools()
	for i := range plain[0].Shapes.Fixed {
		plain[0].Shapes.Fixed[i].ResourceSlices = nil
	}
	a := solve(t, Cluster{Pools: pools}, pods(10, "web", "1", "1Gi"))
	b := solve(t, Cluster{Pools: plain}, pods(10, "web", "1", "1Gi"))
	if fmt.Sprint(newNodesByShape(a)) != fmt.Sprint(newNodesByShape(b)) {
		t.Errorf("with device shapes %v, without %v", newNodesByShape(a), newNodesByShape(b))
	}
}

// A node's pods with claims move in a removal only to devices that are
// free: the displaced pod's own claim is allocated again.
func TestRemovalMovesClaimsToFreeDevices(t *testing.T) {
	a, b := node("gpu-a", "16", "64Gi", nil), node("gpu-b", "16", "64Gi", nil)
	slices := append(templateSlices(gpuSlices("a100", 1), "gpu-a"), templateSlices(gpuSlices("a100", 1), "gpu-b")...)
	running, claims := claimedPods(1, "running", "a100")
	onNode("gpu-a")(running[0])
	claims[0].Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: gpuDriver, Pool: "gpu-a", Device: "gpu-0",
	}}}}
	c := Cluster{
		Pools: draPools(), Nodes: []*corev1.Node{a, b}, Pods: running,
		DRA: DRA{ResourceSlices: slices, ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}},
	}
	s, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.SimulateRemoval(context.Background(), []string{"gpu-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fits() || len(res.Placements) != 1 || res.Placements[0].Node != "gpu-b" {
		t.Errorf("removing gpu-a: %+v, want its pod on gpu-b", res)
	}
	res, err = s.SimulateRemoval(context.Background(), []string{"gpu-a", "gpu-b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fits() {
		t.Errorf("removing both GPU nodes fits: %+v", res)
	}
}

// In a mix of plain pods and pods asking a100s and t4s, no new node holds
// more pods asking a model than its shape has devices of it.
func TestNoDeviceIsGivenTwice(t *testing.T) {
	a100, a100Claims := claimedPods(11, "a100", "a100")
	t4, t4Claims := claimedPods(3, "t4", "t4")
	pending := append(append(append(a100, t4...), pods(20, "web", "500m", "1Gi")...), pods(5, "db", "3", "8Gi")...)
	c := Cluster{Pools: draPools(), DRA: DRA{ResourceClaims: append(a100Claims, t4Claims...), DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}}}
	r := solve(t, c, pending)
	if len(r.Unschedulable) > 0 {
		t.Fatalf("unschedulable: %s", r.Unschedulable[0].Reason)
	}
	gpus := 0
	for _, n := range r.NewNodes {
		asking := map[string]int{}
		for _, p := range n.Pods {
			if len(p.Spec.ResourceClaims) > 0 {
				asking[p.Labels["app"]]++
			}
		}
		has := map[string]int{}
		for _, s := range n.Shape.ResourceSlices {
			for _, d := range s.Devices {
				has[*d.Attributes["model"].String]++
			}
		}
		for model, k := range asking {
			if k > has[model] {
				t.Errorf("node %s of shape %s holds %d pods asking a %s and has %d", n.Name, n.Shape.Name, k, model, has[model])
			}
			gpus += k
		}
	}
	if gpus != 14 {
		t.Errorf("%d pods with claims on new nodes, want 14", gpus)
	}
}

// BenchmarkClaims500 packs 500 pods whose claims ask for an a100 or a t4
// beside 2,000 plain pods, on the pool of device shapes.
func BenchmarkClaims500(b *testing.B) {
	a100, a100Claims := claimedPods(400, "a100", "a100")
	t4, t4Claims := claimedPods(100, "t4", "t4")
	pending := append(append(a100, t4...), pods(2000, "web", "500m", "1Gi")...)
	c := Cluster{Pools: draPools(), DRA: DRA{ResourceClaims: append(a100Claims, t4Claims...), DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}}}
	benchmarkSolve(b, c, pending)
}

// A pod whose pool is at its node limit, and whose booting node's
// devices went to the pod it was bought for, is told that those devices
// are taken.
func TestTakenDevicesAreNamed(t *testing.T) {
	pending, claims := claimedPods(2, "train", "a100")
	pools := draPools()
	limitNodes(1)(pools[0].NodePool, &pools[0])
	pools[0].InUse = Usage{Nodes: 1}
	c := Cluster{
		Pools:    pools,
		DRA:      DRA{ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}},
		InFlight: []InFlight{{Name: "booting", Pool: "dra", Shape: shape("a100-1", "8", "64Gi", 10)}},
	}
	r := solve(t, c, pending)
	if len(r.Unschedulable) != 1 {
		t.Fatalf("want one pod unschedulable, got %+v", r.Unschedulable)
	}
	reason := r.Unschedulable[0].Reason
	for _, want := range []string{"limit nodes=1 reached", `the devices of pool "dra"'s node booting that the claims could use are allocated to other pods`} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
}

// A claim the plugin cannot work with (a CEL selector that does not
// compile) leaves its pod unschedulable with the plugin's words, and the
// other pods of the decision are placed.
func TestABrokenClaimFailsOnlyItsPod(t *testing.T) {
	pending, claims := claimedPods(1, "broken", "a100")
	claims[0].Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression = `device.attributes["gpu.example.com"].model ==`
	pending = append(pending, pods(3, "web", "1", "1Gi")...)
	c := Cluster{Pools: draPools(), DRA: DRA{ResourceClaims: claims, DeviceClasses: []*resourcev1.DeviceClass{gpuClass()}}}
	r := solve(t, c, pending)
	if len(r.Unschedulable) != 1 || r.Unschedulable[0].Pod.Name != pending[0].Name {
		t.Fatalf("want the broken pod alone unschedulable, got %+v", r.Unschedulable)
	}
	placed := 0
	for _, n := range r.NewNodes {
		placed += len(n.Pods)
	}
	if placed != 3 {
		t.Errorf("%d plain pods on new nodes, want 3", placed)
	}
	t.Logf("reason: %s", r.Unschedulable[0].Reason)
}
