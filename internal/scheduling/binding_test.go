package scheduling

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/claimscale/claimscale/internal/scheduling/workloads"
)

// bindInOrder binds a decision's pods the way the kube-scheduler does
// once every new node has joined with its pods nominated to it: pod by pod
// in the given order, each on the node it was planned on if the Filter
// plugins pass it there twice, once with the pods still nominated to the
// node counted as if bound (those of equal priority, as the scheduler
// counts them) and once without. A pod that fails loses its nomination and
// is tried again after the others had their turn: on its node, else on
// the node with the most cpu free that passes it (the scheduler's
// default scoring prefers the least allocated), until a turn binds none.
// It returns how many pods failed at their first turn, how many bound on
// another node than planned, and the pods never bound.
func bindInOrder(t *testing.T, c Cluster, r Result, order []*corev1.Pod) (failedFirst, elsewhere int, neverBound []string) {
	t.Helper()
	ctx := context.Background()
	pools := map[string]*Pool{}
	for i := range c.Pools {
		pools[c.Pools[i].NodePool.Name] = &c.Pools[i]
	}
	snap := NewSnapshot()
	objs, err := newObjectStore(&c)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := newFrameworks(ctx, snap, objs)
	if err != nil {
		t.Fatal(err)
	}
	planned := map[string]string{}
	nominated := map[string][]*corev1.Pod{}
	var nodes []string
	for _, n := range r.NewNodes {
		node, err := TemplateNode(pools[n.Pool].NodePool, n.Shape, n.Zone, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.AddNode(node); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n.Name)
		for _, p := range n.Pods {
			planned[p.Name] = n.Name
			nominated[n.Name] = append(nominated[n.Name], p)
		}
	}
	passes := func(p *corev1.Pod, node string, withNominated bool) bool {
		var added []*corev1.Pod
		if withNominated {
			for _, other := range nominated[node] {
				if other != p {
					if err := snap.AddPod(other, node); err != nil {
						t.Fatal(err)
					}
					added = append(added, other)
				}
			}
		}
		state := framework.NewCycleState()
		_, st, _ := fw.full.RunPreFilterPlugins(ctx, state, p)
		if st.IsSuccess() {
			st = fw.full.RunFilterPlugins(ctx, state, p, snap.lookup(node))
		}
		for _, other := range added {
			if err := snap.RemovePod(other, node); err != nil {
				t.Fatal(err)
			}
		}
		return st.IsSuccess()
	}
	fits := func(p *corev1.Pod, node string) bool { return passes(p, node, true) && passes(p, node, false) }
	free := func(node string) int64 {
		ni := snap.lookup(node)
		return ni.GetAllocatable().GetMilliCPU() - ni.GetRequested().GetMilliCPU()
	}
	waiting := slices.Clone(order)
	for turn := 0; len(waiting) > 0; turn++ {
		var failed []*corev1.Pod
		for _, p := range waiting {
			target := planned[p.Name]
			if turn == 0 {
				nominated[target] = slices.DeleteFunc(nominated[target], func(other *corev1.Pod) bool { return other == p })
			}
			if !fits(p, target) {
				if turn == 0 {
					failedFirst++
					failed = append(failed, p)
					continue
				}
				target = ""
				slices.SortStableFunc(nodes, func(a, b string) int { return int(free(b) - free(a)) })
				for _, node := range nodes {
					if fits(p, node) {
						target = node
						elsewhere++
						break
					}
				}
			}
			if target == "" {
				failed = append(failed, p)
				continue
			}
			if err := snap.AddPod(p, target); err != nil {
				t.Fatal(err)
			}
		}
		if turn > 0 && len(failed) == len(waiting) {
			for _, p := range failed {
				neverBound = append(neverBound, p.Name)
			}
			break
		}
		waiting = failed
	}
	return failedFirst, elsewhere, neverBound
}

// Karpenter's diverse mix, on the pool of the end-to-end test that binds
// it with the real kube-scheduler (TestDiverseMixBindsOnTheNodesOfOneRound),
// is planned so that every spread holds once all pods are bound (their
// selectors count pods packed after them, which keep the spreads they are
// counted by, see watched.go): a pod the scheduler fails at its turn,
// because the domains were uneven then, has room where it can bind later,
// and a round that sees it pending finds that room instead of buying a
// node. Bound in the scheduler's order, whichever order the pods come in,
// every pod then binds on the nodes of the plan.
func TestTheDiverseMixBindsWherePlannedInTheSchedulersOrder(t *testing.T) {
	shapes := []Shape{
		shape("s2", "2", "8Gi", 0.06), shape("m4", "4", "16Gi", 0.11), shape("l8", "8", "32Gi", 0.2), shape("x16", "16", "64Gi", 0.38),
	}
	for name, selected := range map[string]bool{
		"bare pods": false,
		// As the end-to-end test makes them: only nodes of the pool's
		// label are domains of their spreads.
		"pods that select the pool's label": true,
	} {
		t.Run(name, func(t *testing.T) {
			c := Cluster{Pools: []Pool{nodePool("fidelity", shapes, zones("zone-a", "zone-b", "zone-c"), poolLabels("scenario", "fidelity"))}}
			generator := workloads.NewGenerator()
			if selected {
				generator.Adjust = func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"scenario": "fidelity"} }
			}
			pods := generator.Diverse(500)
			r := solve(t, c, pods)
			if len(r.NewNodes) != 100 || len(r.Unschedulable) > 0 {
				t.Fatalf("%d nodes, %d pods unschedulable; want 100 nodes, one per anti-affine pod, for every pod", len(r.NewNodes), len(r.Unschedulable))
			}
			replay(t, c, r)
			shuffled := slices.Clone(pods)
			rand.New(rand.NewPCG(7, 11)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			for order, pods := range map[string][]*corev1.Pod{"the generator's order": pods, "shuffled": shuffled} {
				failedFirst, elsewhere, neverBound := bindInOrder(t, c, r, pods)
				if len(neverBound) > 0 {
					t.Errorf("in %s, %d pods never bind: %v", order, len(neverBound), neverBound)
				}
				t.Logf("in %s, %d pods failed at their first turn; %d of them bound on another node than planned", order, failedFirst, elsewhere)
			}
		})
	}
}
