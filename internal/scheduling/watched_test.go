package scheduling

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Pods a placed pod's hard spread counts keep that spread where another
// node takes them: the spread pod packed first on n0 counts the web pods
// packed after it, and with all of them on n0 it would fail there once
// they are bound (the kube-scheduler checks a spread against the pods
// bound by then). Where no node takes them within the spread, they go
// where they would have gone, rather than onto a new node.
func TestPodsCountedByAPlacedSpreadKeepIt(t *testing.T) {
	spreadPod := pod("spread", "1", "1Gi", label("app", "spread"), spread(corev1.LabelHostname, 1, "web"))
	web := pods(3, "web", "1", "1Gi")
	pool := nodePool("default", []Shape{shape("c4", "4", "16Gi", 4)})
	cases := []struct {
		name  string
		nodes []*corev1.Node
		want  map[string]string
	}{
		{"another node takes the pods the spread counts",
			[]*corev1.Node{node("n0", "4", "16Gi", nil), node("n1", "4", "16Gi", nil)},
			map[string]string{"spread": "n0", "web-00000": "n0", "web-00001": "n1", "web-00002": "n1"}},
		{"no other node: the spread gives way, and no node is opened for it",
			[]*corev1.Node{node("n0", "4", "16Gi", nil)},
			map[string]string{"spread": "n0", "web-00000": "n0", "web-00001": "n0", "web-00002": "n0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Cluster{Pools: []Pool{pool}, Nodes: tc.nodes}
			r := solve(t, c, append([]*corev1.Pod{spreadPod}, web...))
			got := map[string]string{}
			for _, p := range r.Placements {
				got[p.Pod.Name] = p.Node
			}
			if len(r.NewNodes) > 0 || len(got) != len(tc.want) {
				t.Fatalf("%s; want %v", describeResult(r), tc.want)
			}
			for name, node := range tc.want {
				if got[name] != node {
					t.Errorf("%s on %s, want %s (%v)", name, got[name], node, got)
				}
			}
		})
	}
}

// Plain pods that fit on no node there is open no more nodes for the
// watches than without: a new node goes to a zone the watches let a pod
// go to, and takes as many as fit. Spread pods in each of three zones
// count the web pods; once the zones' nodes are full, the four left take
// one new node, not one per zone and skew.
func TestWatchesOpenNoMoreNodes(t *testing.T) {
	var nodes []*corev1.Node
	for _, zone := range []string{"a", "b", "c"} {
		nodes = append(nodes, node("n-"+zone, "4", "16Gi", map[string]string{corev1.LabelTopologyZone: zone}))
	}
	// One spread pod per zone.
	pending := pods(3, "spread", "1", "1Gi", spread(corev1.LabelTopologyZone, 1, "web"), podAntiAffinity(corev1.LabelTopologyZone, "spread"))
	pending = append(pending, pods(13, "web", "1", "1Gi")...)
	c := Cluster{Pools: []Pool{nodePool("default", []Shape{shape("c4", "4", "16Gi", 4)}, zones("a", "b", "c"))}, Nodes: nodes}
	r := solve(t, c, pending)
	if len(r.NewNodes) != 1 || len(r.Unschedulable) > 0 {
		t.Errorf("%s; want the 4 web pods the zones' nodes cannot hold on one new node", describeResult(r))
	}
}
