package scheduling

import (
	"context"
	"fmt"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// catalog is a cloud-like list of n shapes: five families (1, 2, 4, 8 and 16
// GiB per core) in sizes of 1 to 192 cores up to 1.5 TiB, repeated over
// generations that differ in name and a few percent of price. Each family
// is cheaper on the resource it is rich in, as in real catalogs.
func catalog(n int) []Shape {
	type family struct {
		name             string
		gibPerCPU        int
		cpuTilt, gibTilt float64
	}
	families := []family{
		{"h", 1, 0.95, 1.10}, {"c", 2, 0.92, 1.0}, {"g", 4, 1.0, 1.0}, {"m", 8, 1.05, 0.93}, {"x", 16, 1.15, 0.88},
	}
	sizes := []int{1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192}
	var out []Shape
	for gen := 1; len(out) < n; gen++ {
		factor := 1 + 0.02*float64((gen*7)%5-2)
		for _, f := range families {
			for _, cpu := range sizes {
				mem := cpu * f.gibPerCPU
				if mem > 1536 || len(out) == n {
					continue
				}
				price := (float64(cpu)*0.025*f.cpuTilt + float64(mem)*0.0035*f.gibTilt) * factor
				out = append(out, Shape{
					Name: fmt.Sprintf("%s%d.%dx%d", f.name, gen, cpu, mem), CPU: q(fmt.Sprint(cpu)), Memory: q(fmt.Sprintf("%dGi", mem)),
					Price: math.Round(price*10000) / 10000,
				})
			}
		}
	}
	return out
}

func groupAntiAffinity(group string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels["group"] = group
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}},
			}},
		}}
	}
}

// constrainedWorkload is the mixed workload real clusters are made of: n
// pods in five equal parts (plain, spread over zones, spread over
// hostnames, zone affinity to a plain Deployment, and required hostname
// anti-affinity among all pods of the last part), ten Deployments each,
// with varied cpu and memory, on one pool of a 400-shape catalog in three
// zones. The anti-affine fifth needs n/5 nodes; that is the minimum.
func constrainedWorkload(n int) (Cluster, []*corev1.Pod) {
	c := Cluster{Pools: []Pool{nodePool("default", catalog(400), zones("a", "b", "c"))}}
	rnd := lcg(18)
	per := n / 50
	var pending []*corev1.Pod
	for part := 0; part < 5; part++ {
		for d := 0; d < 10; d++ {
			name := fmt.Sprintf("p%d-d%d", part, d)
			cpu := fmt.Sprintf("%dm", 100+rnd.next(16)*100)
			mem := fmt.Sprintf("%dMi", 256*(1+rnd.next(16)))
			var opts []podOpt
			switch part {
			case 1:
				opts = append(opts, spread(corev1.LabelTopologyZone, 1, name))
			case 2:
				opts = append(opts, spread(corev1.LabelHostname, 1, name))
			case 3:
				opts = append(opts, podAffinity(corev1.LabelTopologyZone, fmt.Sprintf("p0-d%d", d)))
			case 4:
				opts = append(opts, groupAntiAffinity("anti"))
			}
			pending = append(pending, pods(per, name, cpu, mem, opts...)...)
		}
	}
	return c, pending
}

// complementaryWorkload is plain pods, some cpu-heavy and some
// memory-heavy, on the 400-shape catalog: the cost case.
func complementaryWorkload() (Cluster, []*corev1.Pod) { return complementaryDeployments(20) }

// complementaryDeployments is the cost case with n Deployments (200 make
// about 5,400 pods).
func complementaryDeployments(n int) (Cluster, []*corev1.Pod) {
	c := Cluster{Pools: []Pool{nodePool("default", catalog(400))}}
	rnd := lcg(5)
	var pending []*corev1.Pod
	for d := 0; d < n; d++ {
		var cpu, mem string
		if d%2 == 0 {
			cpu, mem = fmt.Sprintf("%dm", 2000+rnd.next(8)*500), fmt.Sprintf("%dMi", 512*(1+rnd.next(4)))
		} else {
			cpu, mem = fmt.Sprintf("%dm", 250+rnd.next(8)*50), fmt.Sprintf("%dMi", 8192+4096*rnd.next(8))
		}
		pending = append(pending, pods(15+rnd.next(25), fmt.Sprintf("mix-%03d", d), cpu, mem)...)
	}
	return c, pending
}

// antiAffinityMinimum is the largest group of pending pods that must each
// have a node of their own: pods with a required hostname anti-affinity
// term that selects all of them.
func antiAffinityMinimum(pending []*corev1.Pod) int {
	groups := map[string]int{}
	for _, p := range pending {
		a := p.Spec.Affinity
		if a == nil || a.PodAntiAffinity == nil {
			continue
		}
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if term.TopologyKey != corev1.LabelHostname || term.LabelSelector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err == nil && sel.Matches(labels.Set(p.Labels)) {
				groups[sel.String()]++
			}
		}
	}
	most := 0
	for _, n := range groups {
		most = max(most, n)
	}
	return most
}

// costLowerBound is the least any set of nodes holding the pods' total
// requests can cost: the optimum of the linear relaxation over the pool's
// shapes (min Σ price·x with Σ allocatable·x ≥ total, x ≥ 0), which one
// shape or a pair of shapes attains.
func costLowerBound(s *Simulator, r Result) float64 {
	var total vec
	for _, n := range r.NewNodes {
		total = total.add(vecOfList(n.TotalRequests()))
	}
	if len(r.NewNodes) == 0 {
		return 0
	}
	p := s.poolByName[r.NewNodes[0].Pool]
	best := math.Inf(1)
	c, m := float64(total.cpu), float64(total.mem)
	for i, a := range p.shapes {
		ac, am := float64(a.alloc.cpu), float64(a.alloc.mem)
		best = min(best, a.shape.Price*max(c/ac, m/am))
		for _, b := range p.shapes[i+1:] {
			bc, bm := float64(b.alloc.cpu), float64(b.alloc.mem)
			det := ac*bm - am*bc
			if det == 0 {
				continue
			}
			x, y := (c*bm-m*bc)/det, (ac*m-am*c)/det
			if x >= 0 && y >= 0 {
				best = min(best, a.shape.Price*x+b.shape.Price*y)
			}
		}
	}
	return best
}

func cost(r Result) float64 {
	var sum float64
	for _, n := range r.NewNodes {
		sum += n.Shape.Price
	}
	return sum
}

func BenchmarkConstrained1k(b *testing.B) {
	c, p := constrainedWorkload(1000)
	benchmarkSolve(b, c, p)
}

func BenchmarkConstrained5k(b *testing.B) {
	c, p := constrainedWorkload(5000)
	benchmarkSolve(b, c, p)
}

func BenchmarkComplementary(b *testing.B) {
	c, p := complementaryWorkload()
	benchmarkSolve(b, c, p)
}

func BenchmarkComplementary5k(b *testing.B) {
	c, p := complementaryDeployments(200)
	benchmarkSolve(b, c, p)
}

// The small reproduction of an extra node: memory-heavy pods filled the
// first node to its last pod slot, so neither anti-affine pod could join
// it and a third node opened where two hold everything.
func TestAntiAffinePodsKeepRoomOnFilledNodes(t *testing.T) {
	c := Cluster{Pools: []Pool{nodePool("default", catalog(400))}}
	pending := append(pods(200, "memory", "300m", "12Gi"), pods(2, "anti", "1500m", "4Gi", groupAntiAffinity("anti"))...)
	r := solve(t, c, pending)
	if len(r.NewNodes) != 2 || len(r.Unschedulable) != 0 {
		t.Errorf("%d nodes (%v), %d unschedulable; want 2 nodes", len(r.NewNodes), newNodes(r), len(r.Unschedulable))
	}
}

func TestConstrainedWorkloadNeedsOnlyTheAntiAffinityMinimum(t *testing.T) {
	c, pending := constrainedWorkload(1000)
	s, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Solve(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	if want := antiAffinityMinimum(pending); len(r.NewNodes) != want || len(r.Unschedulable) != 0 {
		t.Errorf("%d nodes, %d unschedulable; want %d nodes", len(r.NewNodes), len(r.Unschedulable), want)
	}
}

func TestComplementaryPodsCostNearTheLowerBound(t *testing.T) {
	c, pending := complementaryWorkload()
	s, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Solve(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	// Packed in size order, nodes fill up on one resource (12.4 % above
	// the bound); re-packed, cpu-heavy and memory-heavy pods share nodes.
	if got, lb := cost(r), costLowerBound(s, r); got > lb*1.10 {
		t.Errorf("cost %.3f is %.1f%% above the lower bound %.3f; want at most 10%%", got, (got/lb-1)*100, lb)
	}
	// Not by opening more nodes than the lower bound.
	if lb := lowerBound(s, r); len(r.NewNodes) > lb {
		t.Errorf("%d nodes, lower bound %d", len(r.NewNodes), lb)
	}
}
