package scheduling

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// keptFrom is an Existing told of the cluster's nodes and pods one at a
// time, as the informers' handlers tell it.
func keptFrom(c Cluster) *Existing {
	existing := NewExisting()
	existing.SetSynced(func() bool { return true })
	for _, n := range c.Nodes {
		existing.SetNode(n)
	}
	for _, p := range c.Pods {
		existing.SetPod(p)
	}
	return existing
}

// interactingCluster is existingCluster with pending pods whose
// constraints look at the pods already bound: spread over zones with a
// running Deployment, anti-affinity to one, affinity to another, and
// plain pods.
func interactingCluster() (Cluster, []*corev1.Pod) {
	c := existingCluster(Cluster{Pools: mixedPools()})
	var pending []*corev1.Pod
	pending = append(pending, pods(30, "running-003", "200m", "256Mi", spread(corev1.LabelTopologyZone, 1, "running-003"))...)
	pending = append(pending, pods(20, "shy", "500m", "512Mi", podAntiAffinity(corev1.LabelHostname, "running-001"))...)
	pending = append(pending, pods(20, "close", "300m", "256Mi", podAffinity(corev1.LabelTopologyZone, "running-010"))...)
	pending = append(pending, pods(200, "plain", "1", "2Gi")...)
	return c, pending
}

// A decision started from the NodeInfos an Existing keeps is the one
// started from the pods, for placements, new nodes and removals; and it
// leaves the kept NodeInfos as they were, since other decisions share them.
func TestKeptNodesDecideAsNodesBuiltFromPods(t *testing.T) {
	ctx := context.Background()
	workloads := map[string]func() (Cluster, []*corev1.Pod){
		"interacting": interactingCluster,
		"full nodes":  func() (Cluster, []*corev1.Pod) { return fullCluster(200), pods(25, "late", "800m", "1Gi") },
	}
	for name, workload := range workloads {
		t.Run(name, func(t *testing.T) {
			c, pending := workload()
			built := solve(t, c, pending)

			existing := keptFrom(c)
			kept := c
			kept.Pods, kept.Existing = nil, existing
			view, err := existing.view(c.Nodes)
			if err != nil {
				t.Fatal(err)
			}
			before := describeInfos(view.infos)
			sim, err := New(ctx, kept)
			if err != nil {
				t.Fatal(err)
			}
			if len(sim.existingInfos) == 0 || sim.existingInfos[0] != view.infos[0] {
				t.Fatal("the simulator built its own NodeInfos instead of taking the kept ones")
			}
			fromKept, err := sim.Solve(ctx, pending)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := describeResult(fromKept), describeResult(built); got != want {
				t.Errorf("decided differently from kept nodes:\n%s\nfrom pods:\n%s", got, want)
			}
			// Both ways share the code that finds the bound pods a
			// constraint looks at: check what it found.
			shunned := map[string]bool{}
			for _, p := range c.Pods {
				if p.Labels["app"] == "running-001" {
					shunned[p.Spec.NodeName] = true
				}
			}
			shy := 0
			for _, placement := range fromKept.Placements {
				if placement.Pod.Labels["app"] == "shy" {
					shy++
					if shunned[placement.Node] {
						t.Errorf("%s placed on %s, next to a pod of running-001 it must keep away from", placement.Pod.Name, placement.Node)
					}
				}
			}
			if name == "interacting" && shy == 0 {
				t.Error("no shy pod placed on an existing node: the anti-affinity was not tried")
			}

			removed := []string{c.Nodes[1].Name, c.Nodes[2].Name}
			builtSim, err := New(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			want, err := builtSim.SimulateRemoval(ctx, removed, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sim.SimulateRemoval(ctx, removed, nil)
			if err != nil {
				t.Fatal(err)
			}
			if describeRemoval(got) != describeRemoval(want) {
				t.Errorf("removal simulated differently from kept nodes:\n%s\nfrom pods:\n%s", describeRemoval(got), describeRemoval(want))
			}
			if after := describeInfos(view.infos); after != before {
				t.Errorf("deciding changed the kept NodeInfos:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func describeInfos(infos []*framework.NodeInfo) string {
	var out string
	for _, ni := range infos {
		out += fmt.Sprintf("%s:%d:%d/%d ", ni.Node().Name, len(ni.Pods), ni.Requested.MilliCPU, ni.Requested.Memory)
	}
	return out
}

func describeRemoval(r RemovalResult) string {
	out := ""
	for _, p := range r.Placements {
		out += fmt.Sprintf("place %s %s\n", p.Pod.Name, p.Node)
	}
	for _, u := range r.Unschedulable {
		out += fmt.Sprintf("unschedulable %s: %s\n", u.Pod.Name, u.Reason)
	}
	return out
}

// A node is built again only when it or its pods changed; a decision
// holding an earlier view keeps it as it was; a class goes with its last
// pod.
func TestExistingBuildsOnlyWhatChanged(t *testing.T) {
	c := fullCluster(20)
	existing := keptFrom(c)
	viewOf := func() keptView {
		t.Helper()
		v, err := existing.view(c.Nodes)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := viewOf()
	if existing.builds != 20 || len(first.classes) != 10 {
		t.Fatalf("first view built %d nodes with %d classes, want 20 and 10", existing.builds, len(first.classes))
	}
	if again := viewOf(); existing.builds != 20 || again.infos[3] != first.infos[3] {
		t.Fatalf("nothing changed, yet %d builds", existing.builds)
	}

	late := pod("late-0", "100m", "128Mi", owner("late"), label("app", "late"), onNode(c.Nodes[3].Name))
	existing.SetPod(late)
	second := viewOf()
	if existing.builds != 21 || len(second.infos[3].Pods) != 11 || len(first.infos[3].Pods) != 10 {
		t.Fatalf("a pod bound to node 3: %d builds, %d pods there now, %d in the earlier view; want 21, 11, 10",
			existing.builds, len(second.infos[3].Pods), len(first.infos[3].Pods))
	}
	if second.infos[4] != first.infos[4] || len(second.classes) != 11 {
		t.Fatalf("node 4 built again or class count %d, want 11", len(second.classes))
	}

	moved := late.DeepCopy()
	moved.Spec.NodeName = c.Nodes[5].Name
	existing.SetPod(moved)
	third := viewOf()
	if existing.builds != 23 || len(third.infos[3].Pods) != 10 || len(third.infos[5].Pods) != 11 {
		t.Fatalf("a pod moved from node 3 to 5: %d builds, %d and %d pods; want 23, 10 and 11",
			existing.builds, len(third.infos[3].Pods), len(third.infos[5].Pods))
	}

	finished := moved.DeepCopy()
	finished.Status.Phase = corev1.PodSucceeded
	existing.SetPod(finished)
	fourth := viewOf()
	if len(fourth.infos[5].Pods) != 10 || len(fourth.classes) != 10 {
		t.Fatalf("a finished pod still counts: %d pods on node 5, %d classes", len(fourth.infos[5].Pods), len(fourth.classes))
	}
	existing.DeletePod(finished)

	// A node changed by the caller (claim labels on a node still
	// starting) gets its own copy with the kept pods.
	relabelled := c.Nodes[7].DeepCopy()
	relabelled.Labels[v1alpha1.LabelNodeClaim] = "claim-7"
	nodes := append([]*corev1.Node(nil), c.Nodes...)
	nodes[7] = relabelled
	copied, err := existing.view(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if copied.infos[7] == fourth.infos[7] || copied.infos[7].Node() != relabelled || len(copied.infos[7].Pods) != 10 {
		t.Fatalf("a caller's copy of node 7 did not get a NodeInfo of its own with the kept pods")
	}
	if fourth.infos[7].Node() != c.Nodes[7] {
		t.Fatal("the kept NodeInfo took the caller's copy")
	}

	existing.DeleteNode(c.Nodes[9].Name)
	for _, p := range c.Pods {
		if p.Spec.NodeName == c.Nodes[9].Name {
			existing.DeletePod(p)
		}
	}
	if _, kept := existing.nodes[c.Nodes[9].Name]; kept {
		t.Error("a deleted node without pods is still kept")
	}
	if len(existing.podNode) != 190 {
		t.Errorf("%d pods kept, want 190", len(existing.podNode))
	}
}

// Until the handlers have been told of everything, decisions build their
// nodes from the pods they are given.
func TestAnExistingNotYetSyncedIsNotUsed(t *testing.T) {
	c := fullCluster(3)
	existing := NewExisting()
	synced := false
	existing.SetSynced(func() bool { return synced })
	for _, n := range c.Nodes {
		existing.SetNode(n)
	}
	c.Existing = existing
	sim, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(sim.existingInfos[0].GetPods()); got != 10 {
		t.Fatalf("%d pods on the first node, want the 10 given", got)
	}
	synced = true
	sim, err = New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(sim.existingInfos[0].GetPods()); got != 0 {
		t.Fatalf("%d pods on the first node, want the kept none", got)
	}
}

// Decisions read what they were given while handlers go on writing (run
// with -race): a view never changes under the decision holding it.
func TestDecisionsReadKeptNodesWhileHandlersWrite(t *testing.T) {
	c := fullCluster(40)
	existing := keptFrom(c)
	kept := c
	kept.Pods, kept.Existing = nil, existing
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 400 {
			p := pod(fmt.Sprintf("churn-%d", i), "100m", "128Mi", owner("churn"), label("app", "churn"), onNode(c.Nodes[i%40].Name))
			existing.SetPod(p)
			existing.SetNode(c.Nodes[(i+1)%40].DeepCopy())
			if i%2 == 0 {
				existing.DeletePod(p)
			}
		}
	}()
	for range 20 {
		sim, err := New(context.Background(), kept)
		if err != nil {
			t.Fatal(err)
		}
		before := describeInfos(asNodeInfos(sim.existingInfos))
		if _, err := sim.Solve(context.Background(), pods(15, "late", "800m", "1Gi")); err != nil {
			t.Fatal(err)
		}
		if after := describeInfos(asNodeInfos(sim.existingInfos)); after != before {
			t.Fatalf("the decision's nodes changed under it:\nbefore %s\nafter  %s", before, after)
		}
	}
	<-done
}

func asNodeInfos(infos []fwk.NodeInfo) []*framework.NodeInfo {
	out := make([]*framework.NodeInfo, len(infos))
	for i, ni := range infos {
		out[i] = ni.(*framework.NodeInfo)
	}
	return out
}

// A pending pod nominated to a node counts there, as the scheduler counts
// it for pods of no higher priority: its room is not given to another pod,
// whether the decision builds its nodes from the pods or from an Existing.
// A pod being deleted does not hold it.
func TestANominatedPodCountsOnItsNode(t *testing.T) {
	nominated := pod("planned", "1", "1Gi")
	nominated.Status.NominatedNodeName = "n1"
	leaving := pod("leaving", "1", "1Gi")
	leaving.Status.NominatedNodeName = "n2"
	leaving.DeletionTimestamp = &metav1.Time{}
	c := Cluster{
		Pools: []Pool{nodePool("default", []Shape{shape("c4", "4", "16Gi", 4)})},
		Nodes: []*corev1.Node{node("n1", "1", "16Gi", nil), node("n2", "1", "16Gi", nil)},
		Pods:  []*corev1.Pod{nominated, leaving},
	}
	for name, cluster := range map[string]Cluster{
		"from pods":     c,
		"from Existing": {Pools: c.Pools, Nodes: c.Nodes, Existing: keptFrom(c)},
	} {
		t.Run(name, func(t *testing.T) {
			r := solve(t, cluster, []*corev1.Pod{pod("late", "1", "1Gi", nodeSelector(corev1.LabelHostname, "n1")), pod("other", "1", "1Gi", nodeSelector(corev1.LabelHostname, "n2"))})
			placed := map[string]string{}
			for _, p := range r.Placements {
				placed[p.Pod.Name] = p.Node
			}
			if placed["late"] != "" || placed["other"] != "n2" {
				t.Errorf("%s; want late kept off n1, whose cpu is planned's, and other on n2", describeResult(r))
			}
		})
	}
}

// Pods an earlier decision planned on a claim still booting count on its
// node as if bound there: their room, the spreads that count them, and
// the anti-affinity that keeps their kind away. They are not placed again.
// The same whether the decision reads the bound pods from the pods or
// from an Existing (whose classes it must not write to).
func TestPodsPlannedOnAnInFlightClaimCountThere(t *testing.T) {
	c4 := shape("c4", "4", "16Gi", 4)
	inFlight := func(name string, planned ...*corev1.Pod) InFlight {
		return InFlight{Name: name, Pool: "default", Shape: c4, Pods: planned}
	}
	web := func(name string, opts ...podOpt) *corev1.Pod {
		return pod(name, "1", "1Gi", append([]podOpt{label("app", "web")}, opts...)...)
	}
	antiWeb := podAntiAffinity(corev1.LabelHostname, "web")
	cases := []struct {
		name     string
		inFlight []InFlight
		pending  *corev1.Pod
		// want is the node the pending pod goes to, "new" for a new one.
		want string
	}{
		{"the room planned for a pod is not given to another",
			[]InFlight{inFlight("claim-a", pod("planned", "3", "1Gi"))}, pod("late", "2", "1Gi"), "new"},
		{"a planned pod keeps the pods anti-affine to it off its node",
			[]InFlight{inFlight("claim-a", web("planned", antiWeb))}, web("late", antiWeb), "new"},
		{"a spread counts the planned pods",
			[]InFlight{inFlight("claim-a", web("planned")), inFlight("claim-b")}, web("late", spread(corev1.LabelHostname, 1, "web")), "claim-b"},
	}
	for _, tc := range cases {
		// A full node with a bound pod of anti-affinity of its own: the
		// existing classes the planned pods' join.
		c := Cluster{
			Pools:    []Pool{nodePool("default", []Shape{c4})},
			Nodes:    []*corev1.Node{node("n0", "1", "4Gi", nil)},
			Pods:     []*corev1.Pod{pod("bound", "1", "1Gi", onNode("n0"), label("app", "db"), podAntiAffinity(corev1.LabelHostname, "db"))},
			InFlight: tc.inFlight,
		}
		for source, cluster := range map[string]Cluster{
			"from pods":     c,
			"from Existing": {Pools: c.Pools, Nodes: c.Nodes, Existing: keptFrom(c), InFlight: c.InFlight},
		} {
			t.Run(tc.name+"/"+source, func(t *testing.T) {
				r := solve(t, cluster, []*corev1.Pod{tc.pending})
				got := ""
				for _, p := range r.Placements {
					got = p.Node
				}
				if len(r.NewNodes) == 1 {
					got = "new"
				}
				if got != tc.want || len(r.Placements)+len(r.NewNodes) != 1 {
					t.Errorf("%s; want %s on %s, and the planned pods left where they are", describeResult(r), tc.pending.Name, tc.want)
				}
			})
		}
	}
}
