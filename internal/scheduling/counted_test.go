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
