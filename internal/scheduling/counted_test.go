package scheduling

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Classes decided by counts get the decision the Filter plugins give:
// the same nodes, shapes, zones and pods on each, for the property test's
// random workloads and for Karpenter's.
func TestCountedClassesDecideAsThePluginsDo(t *testing.T) {
	type workload struct {
		name string
		make func() (Cluster, []*corev1.Pod)
	}
	var workloads []workload
	for seed := 1; seed <= 40; seed++ {
		workloads = append(workloads, workload{fmt.Sprint("random-", seed), func() (Cluster, []*corev1.Pod) { return randomWorkload(seed) }})
	}
	workloads = append(workloads,
		workload{"diverse", func() (Cluster, []*corev1.Pod) { return diverseWorkload(500) }},
		workload{"topology-heavy", func() (Cluster, []*corev1.Pod) { return topologyHeavyWorkload(500) }},
		workload{"pod-affinity", func() (Cluster, []*corev1.Pod) { return podAffinityWorkload(500) }},
		workload{"constrained", func() (Cluster, []*corev1.Pod) { return constrainedWorkload(500) }},
	)
	counted := 0
	for _, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			c, pending := w.make()
			decide := func(pluginsOnly bool) string {
				s, err := New(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				s.pluginsOnly = pluginsOnly
				r, err := s.Solve(context.Background(), pending)
				if err != nil {
					t.Fatal(err)
				}
				if !pluginsOnly {
					items, err := s.classify(pending, true)
					if err != nil {
						t.Fatal(err)
					}
					for _, cls := range classesOf(items) {
						if cls.counted {
							counted++
						}
					}
				}
				return withoutNodeNames(r)
			}
			if byCounts, byPlugins := decide(false), decide(true); byCounts != byPlugins {
				t.Errorf("counts and plugins decide differently:\n%s\nvs\n%s", byCounts, byPlugins)
			}
		})
	}
	if counted == 0 {
		t.Error("no class was decided by counts")
	}
}

// withoutNodeNames describes a decision by each new node's pool, shape,
// zone and pods: the plugins' path names the empty domains it adds as
// nodes, so the new nodes' numbers differ.
func withoutNodeNames(r Result) string {
	var b strings.Builder
	for _, n := range r.NewNodes {
		fmt.Fprintf(&b, "%s/%s/%s:", n.Pool, n.Shape.Name, n.Zone)
		for _, p := range n.Pods {
			b.WriteString(" " + p.Name)
		}
		b.WriteString("\n")
	}
	for _, p := range r.Placements {
		fmt.Fprintf(&b, "place %s %s\n", p.Pod.Name, p.Node)
	}
	for _, u := range r.Unschedulable {
		fmt.Fprintf(&b, "unschedulable %s %s\n", u.Pod.Name, u.Reason)
	}
	return b.String()
}

// A class whose anti-affinity has a matching pod in every domain opens a
// node for each pod without trying the others (excludedEverywhere), but a
// node without the term's key is no domain: the term never keeps a pod
// off it, and the pods go there, as the plugins place them.
func TestAnAntiAffineClassTakesTheNodeOutsideEveryDomain(t *testing.T) {
	bare := node("bare", "8", "32Gi", nil)
	delete(bare.Labels, corev1.LabelHostname)
	c := Cluster{
		Pools: []Pool{nodePool("default", []Shape{shape("c4", "4", "16Gi", 4)})},
		Nodes: []*corev1.Node{node("n1", "8", "32Gi", nil), bare},
		Pods:  []*corev1.Pod{pod("bound-web", "1", "1Gi", onNode("n1"), label("app", "web"))},
	}
	pending := pods(3, "web", "1", "1Gi", podAntiAffinity(corev1.LabelHostname, "web"))
	decide := func(pluginsOnly bool) Result {
		s, err := New(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		s.pluginsOnly = pluginsOnly
		r, err := s.Solve(context.Background(), pending)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := decide(false)
	if len(r.NewNodes) != 0 || len(r.Placements) != 3 {
		t.Fatalf("%s; want the three pods on the node without a hostname label", describeResult(r))
	}
	for _, p := range r.Placements {
		if p.Node != "bare" {
			t.Errorf("%s on %s, want bare", p.Pod.Name, p.Node)
		}
	}
	if byPlugins := describeResult(decide(true)); byPlugins != describeResult(r) {
		t.Errorf("counts and plugins decide differently:\n%s\nvs\n%s", describeResult(r), byPlugins)
	}
}
