package scheduling

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

const gpu corev1.ResourceName = "nvidia.com/gpu"

// withDevices gives a shape extended resources, name and count in turn.
func withDevices(s Shape, kv ...string) Shape {
	s.ExtendedResources = corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		s.ExtendedResources[corev1.ResourceName(kv[i])] = q(kv[i+1])
	}
	return s
}

// asking makes a pod request extended resources besides cpu and memory.
func asking(name corev1.ResourceName, count string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests[name] = q(count)
		if p.Spec.Containers[0].Resources.Limits == nil {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
		}
		p.Spec.Containers[0].Resources.Limits[name] = q(count)
	}
}

func TestScalarArithmetic(t *testing.T) {
	one := scalarsOfList(corev1.ResourceList{gpu: q("1")})
	four := scalarsOfList(corev1.ResourceList{gpu: q("4"), "example.com/fpga": q("1")})
	if got := scalarFitCount(four, one, 110); got != 4 {
		t.Errorf("pods of one GPU on a node of four: %d fit, want 4", got)
	}
	if got := scalarFitCount(nil, one, 110); got != 0 {
		t.Errorf("pods of one GPU on a node without GPUs: %d fit, want 0", got)
	}
	if !one.scaled(4).within(four) || one.scaled(5).within(four) {
		t.Error("four one-GPU pods must fit a four-GPU node, five must not")
	}
	if !extFits(one, one, four) || extFits(one.scaled(3), one.scaled(2), four) {
		t.Error("a pod's GPU and a DaemonSet pod's fit in four, five do not")
	}
	left := combine(four, one, -3)
	if got := left.get(gpu); got != 1 {
		t.Errorf("four GPUs less three: %d left", got)
	}
	if got := extRoom(four, one.scaled(2), one, one, 110); got != 1 {
		t.Errorf("room for one-GPU pods on four GPUs less two taken by pods and one by a DaemonSet pod: %d, want 1", got)
	}
	if combine(left, left, -1) != nil {
		t.Error("scalars less themselves are not nil: the arithmetic of devices would not end where it began")
	}
	if m := maxScalars(one, four); m.get(gpu) != 4 || m.get("example.com/fpga") != 1 {
		t.Errorf("the larger of one and four GPUs: %v / %v", m.names, m.counts)
	}
	if !four.equal(scalarsOfList(corev1.ResourceList{gpu: q("4"), "example.com/fpga": q("1")})) || four.equal(one) {
		t.Error("scalars made apart compare wrong")
	}
	l := corev1.ResourceList{}
	four.addTo(l)
	if l.Name(gpu, resource.DecimalSI).Value() != 4 {
		t.Errorf("as a resource list: %v", l)
	}
	if scalarsOfList(corev1.ResourceList{corev1.ResourceCPU: q("4"), "hugepages-2Mi": q("0")}) != nil {
		t.Error("cpu and a zero count are no scalars")
	}
}

func gpuPools() []Pool {
	return []Pool{
		nodePool("cpu", []Shape{shape("c8", "8", "32Gi", 1)}, noEviction()),
		nodePool("gpu", []Shape{
			withDevices(shape("g1", "8", "32Gi", 3), string(gpu), "1"),
			withDevices(shape("g4", "32", "128Gi", 10), string(gpu), "4"),
		}, noEviction()),
	}
}

func newNodesByShape(r Result) map[string]int {
	out := map[string]int{}
	for _, n := range r.NewNodes {
		out[n.Pool+"/"+n.Shape.Name]++
	}
	return out
}

func TestExtendedResourcesPickTheShapeThatHasThem(t *testing.T) {
	tests := []struct {
		name    string
		pending []*corev1.Pod
		want    map[string]int
	}{
		{
			"a pod asking one GPU gets the cheapest shape with one",
			pods(1, "train", "1", "1Gi", asking(gpu, "1")),
			map[string]int{"gpu/g1": 1},
		},
		{
			"four one-GPU pods share a four-GPU node when it is cheaper than four",
			pods(4, "train", "1", "1Gi", asking(gpu, "1")),
			map[string]int{"gpu/g4": 1},
		},
		{
			"a pod asking two GPUs needs the four-GPU shape",
			pods(1, "train", "1", "1Gi", asking(gpu, "2")),
			map[string]int{"gpu/g4": 1},
		},
		{
			"five one-GPU pods need five GPUs: a four and a one",
			pods(5, "train", "1", "1Gi", asking(gpu, "1")),
			map[string]int{"gpu/g4": 1, "gpu/g1": 1},
		},
		{
			"plain pods open no GPU node: the plain shape is cheaper",
			pods(6, "web", "1", "1Gi"),
			map[string]int{"cpu/c8": 1},
		},
		{
			"plain pods take the room a GPU node leaves when that saves their own nodes",
			append(pods(20, "web", "1", "1Gi"), pods(4, "train", "1", "1Gi", asking(gpu, "1"))...),
			map[string]int{"gpu/g4": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Cluster{Pools: gpuPools()}
			r := solve(t, c, tt.pending)
			if len(r.Unschedulable) > 0 {
				t.Fatalf("unschedulable: %s", r.Unschedulable[0].Reason)
			}
			if got := newNodesByShape(r); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("new nodes %v, want %v", got, tt.want)
			}
			replay(t, c, r)
		})
	}
}

func TestTemplateNodeAdvertisesDevices(t *testing.T) {
	pool := gpuPools()[1].NodePool
	node, err := TemplateNode(pool, withDevices(shape("g4", "32", "128Gi", 10), string(gpu), "4"), "", "n")
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		if got := list.Name(gpu, resource.DecimalSI).Value(); got != 4 {
			t.Errorf("the template node has %d GPUs in %v, want 4", got, list)
		}
	}
	if got := node.Labels[v1alpha1.LabelGPU]; got != "g4" {
		t.Errorf("GPU label %q, want the shape's name", got)
	}
	plain, err := TemplateNode(pool, shape("c8", "8", "32Gi", 1), "", "n")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Labels[v1alpha1.LabelGPU]; ok {
		t.Error("a shape without GPUs has the GPU label")
	}
}

// A pod asking for a device no pool has is refused by every pool, and the
// refusal names the device.
func TestDeviceNoPoolHasIsNamed(t *testing.T) {
	c := Cluster{Pools: gpuPools()}
	r := solve(t, c, pods(1, "fpga", "1", "1Gi", asking("example.com/fpga", "1")))
	if len(r.Unschedulable) != 1 || len(r.NewNodes) != 0 {
		t.Fatalf("want the pod unschedulable and no node, got %d unschedulable and nodes %v", len(r.Unschedulable), newNodesByShape(r))
	}
	u := r.Unschedulable[0]
	if !strings.Contains(u.Reason, "no shape of the pool has example.com/fpga") {
		t.Errorf("the reason does not name the device: %s", u.Reason)
	}
	if len(u.Pools) != 2 {
		t.Fatalf("want a refusal per pool, got %+v", u.Pools)
	}
	for _, p := range u.Pools {
		if p.Kind != RefusalTooSmall || p.Requested.Name("example.com/fpga", resource.DecimalSI).Value() != 1 {
			t.Errorf("pool %s: refusal %s %q, requested %v", p.Pool, p.Kind, p.Message, p.Requested)
		}
	}
}

// Devices on existing and booting nodes are counted: a node with two free
// GPUs takes two one-GPU pods, a booting GPU claim one more, and the
// fourth opens a node.
func TestDevicesOnExistingAndInFlightNodes(t *testing.T) {
	c := Cluster{Pools: gpuPools()}
	n := node("gpu-a", "16", "64Gi", nil)
	n.Status.Allocatable[gpu], n.Status.Capacity[gpu] = q("3"), q("3")
	n.Status.Allocatable["hugepages-2Mi"] = q("0")
	c.Nodes = []*corev1.Node{n}
	c.Pods = []*corev1.Pod{pod("busy", "1", "1Gi", asking(gpu, "1"), onNode("gpu-a"))}
	c.InFlight = []InFlight{{Name: "booting", Pool: "gpu", Shape: withDevices(shape("g1", "8", "32Gi", 3), string(gpu), "1")}}
	r := solve(t, c, pods(4, "train", "1", "1Gi", asking(gpu, "1")))
	onNodes := map[string]int{}
	for _, p := range r.Placements {
		onNodes[p.Node]++
	}
	if onNodes["gpu-a"] != 2 || onNodes["booting"] != 1 {
		t.Errorf("placements %v: want two on gpu-a (two GPUs free) and one on the booting claim", onNodes)
	}
	if got := newNodesByShape(r); fmt.Sprint(got) != fmt.Sprint(map[string]int{"gpu/g1": 1}) {
		t.Errorf("new nodes %v, want one g1 for the fourth pod", got)
	}
}

// A DaemonSet pod that asks for a device takes it on every node it runs
// on: a one-GPU shape then has none left for a pod.
func TestDaemonSetDevicesCount(t *testing.T) {
	c := Cluster{Pools: gpuPools()}
	ds := daemonSet("gpu-probe", "10m", "10Mi")
	ds.Spec.Template.Spec.Containers[0].Resources.Requests[gpu] = q("1")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: "gpu"}
	c.DaemonSets = append(c.DaemonSets, ds)
	r := solve(t, c, pods(1, "train", "1", "1Gi", asking(gpu, "1")))
	if got := newNodesByShape(r); fmt.Sprint(got) != fmt.Sprint(map[string]int{"gpu/g4": 1}) {
		t.Errorf("new nodes %v, want a g4: a g1's one GPU goes to the DaemonSet pod", got)
	}
	if ds := r.NewNodes[0].DaemonSetRequests; ds.Name(gpu, resource.DecimalSI).Value() != 1 {
		t.Errorf("DaemonSet requests %v: the GPU is missing", ds)
	}
}

// A flexible pool has no devices: a GPU pod is refused there.
func TestFlexiblePoolTakesNoDevicePod(t *testing.T) {
	flex := nodePool("flex", nil)
	flex.Shapes = Shapes{Flexible: &Flexible{
		MinCPU: q("1"), MaxCPU: q("16"), CPUStep: q("1"),
		MinMemory: q("1Gi"), MaxMemory: q("64Gi"), MemoryStep: q("1Gi"),
		PricePerCPU: 1, PricePerGiB: 0.25,
	}}
	r := solve(t, Cluster{Pools: []Pool{flex}}, pods(1, "train", "1", "1Gi", asking(gpu, "1")))
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, string(gpu)) {
		t.Errorf("want the pod refused naming %s, got nodes %v and %+v", gpu, newNodesByShape(r), r.Unschedulable)
	}
}

func TestPoolShapesCarryDevices(t *testing.T) {
	np := &v1alpha1.NodePool{}
	np.Name = "gpu"
	np.Spec.Shapes.Fixed = []v1alpha1.Shape{
		{Name: "g1", CPU: ptrQ("8"), Memory: ptrQ("32Gi"), ExtendedResources: corev1.ResourceList{gpu: q("1")}},
		{Name: "catalog-gpu"},
	}
	catalogShape := shapecatalog.Shape{Name: "catalog-gpu", Capacity: corev1.ResourceList{
		corev1.ResourceCPU: q("16"), corev1.ResourceMemory: q("64Gi"), gpu: q("2"),
	}}
	shapes, err := PoolShapes(np, []shapecatalog.Shape{catalogShape})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, s := range shapes.Fixed {
		got[s.Name] = s.ExtendedResources.Name(gpu, resource.DecimalSI).Value()
	}
	if got["g1"] != 1 || got["catalog-gpu"] != 2 {
		t.Errorf("GPUs by shape %v: want g1 1 (the pool's) and catalog-gpu 2 (the provider's)", got)
	}
	np.Spec.Shapes.Fixed[0].ExtendedResources = corev1.ResourceList{"gpu": q("1")}
	if _, err := PoolShapes(np, []shapecatalog.Shape{catalogShape}); err == nil || !strings.Contains(err.Error(), "not an extended resource") {
		t.Errorf("a device without a domain: error %v", err)
	}
	np.Spec.Shapes.Fixed[0].ExtendedResources = corev1.ResourceList{gpu: q("500m")}
	if _, err := PoolShapes(np, []shapecatalog.Shape{catalogShape}); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Errorf("half a GPU: error %v", err)
	}
	np.Spec.Shapes.Fixed[0].ExtendedResources = nil
	np.Spec.Shapes.Fixed[0].ResourceSlices = []v1alpha1.TemplateResourceSlice{{Driver: "gpu.example.com", Devices: []v1alpha1.TemplateDevice{{
		Name: "gpu-0", Attributes: map[string]v1alpha1.TemplateDeviceAttribute{"gpu model": {}},
	}}}}
	if _, err := PoolShapes(np, []shapecatalog.Shape{catalogShape}); err == nil || !strings.Contains(err.Error(), `attribute name "gpu model"`) {
		t.Errorf("an attribute name with a space: error %v", err)
	}
	np.Spec.Shapes.Fixed[0].ResourceSlices[0].Devices[0].Attributes = map[string]v1alpha1.TemplateDeviceAttribute{"gpu.example.com/model": {}}
	if _, err := PoolShapes(np, []shapecatalog.Shape{catalogShape}); err != nil {
		t.Errorf("a domain-qualified attribute name: %v", err)
	}
}

func ptrQ(s string) *resource.Quantity { v := q(s); return &v }

// randomDeviceWorkload mixes plain pods, GPU pods of one and two GPUs and
// pods with spread and anti-affinity over a plain pool and a GPU pool.
func randomDeviceWorkload(seed int) (Cluster, []*corev1.Pod) {
	rnd := lcg(seed)
	c := Cluster{Pools: []Pool{
		nodePool("general", catalog(10+rnd.next(20)), weight(10), zones("a", "b")),
		nodePool("gpu", []Shape{
			withDevices(shape("g1", "8", "32Gi", 3), string(gpu), "1"),
			withDevices(shape("g2", "16", "64Gi", 5), string(gpu), "2"),
			withDevices(shape("g8", "64", "256Gi", 18), string(gpu), "8", "example.com/nic", "2"),
		}, zones("a", "b")),
	}}
	var pending []*corev1.Pod
	for d := 0; d < 3+rnd.next(6); d++ {
		name := fmt.Sprintf("s%d-d%d", seed, d)
		cpu := fmt.Sprintf("%dm", 100+rnd.next(20)*100)
		mem := fmt.Sprintf("%dMi", 128*(1+rnd.next(16)))
		var opts []podOpt
		switch rnd.next(4) {
		case 1:
			opts = append(opts, asking(gpu, "1"))
		case 2:
			opts = append(opts, asking(gpu, fmt.Sprint(1+rnd.next(2))), asking("example.com/nic", "1"))
		}
		switch rnd.next(5) {
		case 1:
			opts = append(opts, spread(corev1.LabelTopologyZone, 1, name))
		case 2:
			opts = append(opts, podAntiAffinity(corev1.LabelHostname, name))
		}
		pending = append(pending, pods(1+rnd.next(12), name, cpu, mem, opts...)...)
	}
	return c, pending
}

// Whatever the mix, every pod the packer puts on a new node passes the
// kube-scheduler's filters there, devices included, and the counts
// decide as the plugins do.
func TestRandomDeviceWorkloadsPassTheFilters(t *testing.T) {
	for seed := 1; seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c, pending := randomDeviceWorkload(seed)
			r := solve(t, c, pending)
			if len(r.Unschedulable) > 0 {
				t.Errorf("%d unschedulable, first: %s: %s", len(r.Unschedulable), r.Unschedulable[0].Pod.Name, r.Unschedulable[0].Reason)
			}
			replay(t, c, r)
			s, err := New(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			s.pluginsOnly = true
			byPlugins, err := s.Solve(context.Background(), pending)
			if err != nil {
				t.Fatal(err)
			}
			if len(byPlugins.NewNodes) != len(r.NewNodes) {
				t.Errorf("the counts open %d nodes, the plugins alone %d", len(r.NewNodes), len(byPlugins.NewNodes))
			}
		})
	}
}

// deviceWorkload is mixedWorkload's three pools and n pods with two GPU
// pools beside them (one- and four-GPU shapes, a pool of eight-GPU shapes
// with a second device), where every fourth Deployment not pinned to a
// pool asks for one or two GPUs.
func deviceWorkload(n, deployments int) (Cluster, []*corev1.Pod) {
	c, pending := mixedWorkload(n, deployments)
	c.Pools = append(c.Pools,
		nodePool("gpu", []Shape{
			withDevices(shape("gpu1", "8", "32Gi", 12), string(gpu), "1"),
			withDevices(shape("gpu4", "32", "128Gi", 40), string(gpu), "4"),
		}, weight(50), zones("a", "b", "c")),
		nodePool("gpu-large", []Shape{
			withDevices(shape("gpu8", "96", "768Gi", 90), string(gpu), "8", "example.com/rdma", "4"),
		}, weight(40), zones("a", "b", "c")),
	)
	for i, p := range pending {
		d := i / (n / deployments)
		if len(p.Spec.NodeSelector) > 0 {
			continue // pinned to the highmem or batch pool
		}
		switch d % 8 {
		case 2:
			asking(gpu, "1")(p)
		case 6:
			asking(gpu, "2")(p)
			asking("example.com/rdma", "1")(p)
		}
	}
	return c, pending
}

// BenchmarkDevices10k is the mixed workload with GPU pools and about a
// fifth of its Deployments asking for GPUs.
func BenchmarkDevices10k(b *testing.B) {
	c, p := deviceWorkload(10000, 100)
	benchmarkSolve(b, c, p)
}

// The device workload places every pod, each on a node with the devices
// it asks for (replay checks it with the plugins).
func TestDeviceWorkloadPlacesEveryPod(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 pods")
	}
	c, pending := deviceWorkload(2000, 40)
	r := solve(t, c, pending)
	if len(r.Unschedulable) > 0 {
		t.Fatalf("%d unschedulable, first: %s", len(r.Unschedulable), r.Unschedulable[0].Reason)
	}
	replay(t, c, r)
	for _, n := range r.NewNodes {
		asked := n.Requests.Name(gpu, resource.DecimalSI).Value()
		if has := n.Shape.ExtendedResources.Name(gpu, resource.DecimalSI).Value(); asked > has {
			t.Errorf("node %s of shape %s has %d GPUs for pods asking %d", n.Name, n.Shape.Name, has, asked)
		}
	}
}
