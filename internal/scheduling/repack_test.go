package scheduling

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// complementaryRandom is a random mix of cpu-heavy and memory-heavy
// Deployments on a catalog in one or two zones, with a DaemonSet, some pods that
// spread over zones and some with zone or hostname affinity to a plain
// Deployment (which then must not move).
func complementaryRandom(seed int) (Cluster, []*corev1.Pod) {
	rnd := lcg(seed)
	c := Cluster{
		Pools: []Pool{nodePool("general", catalog(30+rnd.next(100)), zones([]string{"a", "b", "c"}[:1+rnd.next(2)]...))},
	}
	if rnd.next(2) == 0 {
		c.DaemonSets = append(c.DaemonSets, daemonSet("agent", "200m", "512Mi"))
	}
	var pending []*corev1.Pod
	for d := 0; d < 4+rnd.next(12); d++ {
		name := fmt.Sprintf("r%d-d%d", seed, d)
		var cpu, mem string
		if rnd.next(2) == 0 {
			cpu, mem = fmt.Sprintf("%dm", 1000+rnd.next(12)*250), fmt.Sprintf("%dMi", 256*(1+rnd.next(6)))
		} else {
			cpu, mem = fmt.Sprintf("%dm", 100+rnd.next(8)*50), fmt.Sprintf("%dMi", 2048+1024*rnd.next(16))
		}
		var opts []podOpt
		switch rnd.next(9) {
		case 1:
			opts = append(opts, spread(corev1.LabelTopologyZone, 1, name))
		case 2:
			if d > 0 {
				opts = append(opts, podAffinity(corev1.LabelTopologyZone, fmt.Sprintf("r%d-d0", seed)))
			}
		case 3:
			if d > 0 {
				opts = append(opts, podAffinity(corev1.LabelHostname, fmt.Sprintf("r%d-d0", seed)))
			}
		}
		pending = append(pending, pods(10+rnd.next(90), name, cpu, mem, opts...)...)
	}
	return c, pending
}

// packOnly is Solve without the re-packing pass.
func packOnly(t *testing.T, s *Simulator, pending []*corev1.Pod) Result {
	t.Helper()
	s.snap.Fork()
	defer s.snap.Revert()
	r := s.newRound(context.Background(), s.base, true)
	items, err := s.classify(pending, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pack(items); err != nil {
		t.Fatal(err)
	}
	res, err := r.result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Re-packed nodes pass the filters, are never more nor dearer than packed
// ones, and are cheaper for some of these workloads.
func TestRepackedNodesPassTheFiltersAndCostLess(t *testing.T) {
	cheaper := 0
	for seed := 1; seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c, pending := complementaryRandom(seed)
			s, err := New(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			packed := packOnly(t, s, pending)
			r, err := s.Solve(context.Background(), pending)
			if err != nil {
				t.Fatal(err)
			}
			// Pods with hostname affinity may find their peers' nodes
			// full: re-packing leaves the same pods out as packing.
			if len(r.Unschedulable) != len(packed.Unschedulable) {
				t.Errorf("%d unschedulable, packing left %d", len(r.Unschedulable), len(packed.Unschedulable))
			}
			replay(t, c, r)
			placed := 0
			for _, n := range r.NewNodes {
				placed += len(n.Pods)
			}
			if want := len(pending) - len(r.Unschedulable); placed != want {
				t.Errorf("%d pods on new nodes, want %d", placed, want)
			}
			if len(r.NewNodes) > len(packed.NewNodes) {
				t.Errorf("%d nodes re-packed, %d packed", len(r.NewNodes), len(packed.NewNodes))
			}
			if got, was := cost(r), cost(packed); got > was+1e-9 {
				t.Errorf("re-packed nodes cost %.4f, packed %.4f", got, was)
			} else if got < was-1e-9 {
				cheaper++
			}
		})
	}
	if cheaper < 8 {
		t.Errorf("re-packing saved in %d of 30 workloads, want at least 8", cheaper)
	}
}
