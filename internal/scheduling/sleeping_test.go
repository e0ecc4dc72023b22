package scheduling

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// woken summarises the new nodes as "pool/shape/zone:pods" with the claim
// they wake after an "@", e.g. "default/medium/:1@default-sleepy".
func woken(r Result) []string {
	var out []string
	for _, n := range r.NewNodes {
		s := fmt.Sprintf("%s/%s/%s:%d", n.Pool, n.Shape.Name, n.Zone, len(n.Pods))
		if n.Wake != "" {
			s += "@" + n.Wake
		}
		out = append(out, s)
	}
	return out
}

func wantWoken(want ...string) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		if got := woken(r); !slices.Equal(got, want) {
			t.Errorf("new nodes = %v, want %v (unschedulable: %v)", got, want, unschedulable(r))
		}
	}
}

func asleep(claim, pool string, sh Shape, zone string) Sleeping {
	return Sleeping{Name: claim, Pool: pool, Shape: sh, Zone: zone}
}

func TestSolveWakesSleepingMachines(t *testing.T) {
	flexible := Pool{
		NodePool: &v1alpha1.NodePool{ObjectMeta: metaName("flex")},
		Shapes: Shapes{Flexible: &Flexible{
			MinCPU: q("1"), MaxCPU: q("16"), CPUStep: q("2"),
			MinMemory: q("1Gi"), MaxMemory: q("64Gi"), MemoryStep: q("4Gi"),
			PricePerCPU: 1, PricePerGiB: 0.25,
		}},
	}
	tests := []struct {
		name    string
		cluster Cluster
		pending []*corev1.Pod
		check   func(*testing.T, Result)
	}{
		{
			name: "a sleeping machine that fits is woken instead of a cheaper new node",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small, medium, large})},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", medium, "")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantWoken("default/medium/:1@default-sleepy"),
		},
		{
			name: "a sleeping machine too small for the pod is not woken",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small, medium, large})},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", small, "")},
			},
			pending: []*corev1.Pod{pod("p", "3", "1Gi")},
			check:   wantWoken("default/medium/:1"),
		},
		{
			name: "a sleeping machine in a zone the pod does not select is not woken",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small}, zones("a", "b"))},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", small, "b")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", nodeSelector(corev1.LabelTopologyZone, "a"))},
			check:   wantWoken("default/small/a:1"),
		},
		{
			name: "a sleeping machine whose pool taint the pod does not tolerate is not woken",
			cluster: Cluster{
				Pools: []Pool{
					nodePool("gpu", []Shape{small}, weight(10), poolTaint("gpu", "true")),
					nodePool("plain", []Shape{small}),
				},
				Sleeping: []Sleeping{asleep("gpu-sleepy", "gpu", small, "")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantWoken("plain/small/:1"),
		},
		{
			name: "a sleeping machine whose pool taint the pod tolerates is woken",
			cluster: Cluster{
				Pools: []Pool{
					nodePool("gpu", []Shape{small}, weight(10), poolTaint("gpu", "true")),
					nodePool("plain", []Shape{small}),
				},
				Sleeping: []Sleeping{asleep("gpu-sleepy", "gpu", small, "")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", tolerate("gpu"))},
			check:   wantWoken("gpu/small/:1@gpu-sleepy"),
		},
		{
			name: "of two pools with sleeping machines the heavier one's is woken",
			cluster: Cluster{
				Pools: []Pool{
					nodePool("light", []Shape{small}, weight(1)),
					nodePool("heavy", []Shape{small}, weight(10)),
				},
				Sleeping: []Sleeping{asleep("light-sleepy", "light", small, ""), asleep("heavy-sleepy", "heavy", small, "")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantWoken("heavy/small/:1@heavy-sleepy"),
		},
		{
			name: "a heavier pool's new node comes before a lighter pool's sleeping machine",
			cluster: Cluster{
				Pools: []Pool{
					nodePool("light", []Shape{small}, weight(1)),
					nodePool("heavy", []Shape{small}, weight(10)),
				},
				Sleeping: []Sleeping{asleep("light-sleepy", "light", small, "")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantWoken("heavy/small/:1"),
		},
		{
			name: "three sleeping machines and pods for five nodes: three woken, two new",
			cluster: Cluster{
				Pools: []Pool{nodePool("default", []Shape{small}, noEviction())},
				Sleeping: []Sleeping{
					asleep("default-c", "default", small, ""), asleep("default-a", "default", small, ""), asleep("default-b", "default", small, ""),
				},
			},
			pending: pods(10, "w", "1", "1Gi"),
			check: wantWoken("default/small/:2@default-a", "default/small/:2@default-b", "default/small/:2@default-c",
				"default/small/:2", "default/small/:2"),
		},
		{
			name: "a woken machine counts against the pool's node limit like a new one",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small}, noEviction(), limitNodes(2), inUse(1, "2", "8Gi"))},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", small, "")},
			},
			pending: pods(4, "w", "1", "1Gi"),
			check: all(wantWoken("default/small/:2@default-sleepy"),
				wantUnschedulable("w-00002", `pool "default": limit nodes=2 reached`)),
		},
		{
			name: "pods that each need a machine of their own wake the sleeping one, then get new ones",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small})},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", small, "")},
			},
			pending: pods(2, "port", "100m", "100Mi", hostPort(8080)),
			check:   wantWoken("default/small/:1@default-sleepy", "default/small/:1"),
		},
		{
			name: "pods spread over zones wake the machine sleeping in one zone and open one in the other",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small}, zones("a", "b"))},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", small, "a")},
			},
			pending: pods(2, "s", "1500m", "1Gi", label("app", "s"), spread(corev1.LabelTopologyZone, 1, "s")),
			check: func(t *testing.T, r Result) {
				got := woken(r)
				slices.Sort(got)
				if want := []string{"default/small/a:1@default-sleepy", "default/small/b:1"}; !slices.Equal(got, want) {
					t.Errorf("new nodes = %v, want %v (unschedulable: %v)", got, want, unschedulable(r))
				}
			},
		},
		{
			name: "a sleeping machine of a flexible pool wakes with the size it has",
			cluster: Cluster{
				Pools:    []Pool{flexible},
				Sleeping: []Sleeping{asleep("flex-sleepy", "flex", shape("flex-8-16Gi", "8", "16Gi", 12), "")},
			},
			pending: []*corev1.Pod{pod("p", "3", "5Gi")},
			check:   wantWoken("flex/flex-8-16Gi/:1@flex-sleepy"),
		},
		{
			name: "a pool closed this round wakes none of its sleeping machines",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small}, unavailable("small"))},
				Sleeping: []Sleeping{asleep("default-sleepy", "default", small, "")},
			},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantUnschedulable("p", `pool "default"`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, solve(t, tt.cluster, tt.pending))
		})
	}
}

// BenchmarkMixed10kWaking is Mixed10k with 100 machines asleep in the
// general pool (a third of each of its shapes per zone): what waking them
// first costs a decision.
func BenchmarkMixed10kWaking(b *testing.B) {
	c, p := mixedWorkload(10000, 100)
	general := c.Pools[0]
	for i := 0; i < 100; i++ {
		sh := general.Shapes.Fixed[i%len(general.Shapes.Fixed)]
		c.Sleeping = append(c.Sleeping, asleep(fmt.Sprintf("general-sleepy-%03d", i), "general", sh, general.Zones[i%len(general.Zones)]))
	}
	benchmarkSolve(b, c, p)
}
