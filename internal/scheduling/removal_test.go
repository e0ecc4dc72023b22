package scheduling

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func daemonPodOn(name, node string) *corev1.Pod {
	p := pod(name, "100m", "64Mi", onNode(node))
	t := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "exporter", UID: types.UID("ds"), Controller: &t}}
	return p
}

func mirrorPodOn(name, node string) *corev1.Pod {
	p := pod(name, "100m", "64Mi", onNode(node))
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	return p
}

func TestSimulateRemoval(t *testing.T) {
	cluster := func(pods ...*corev1.Pod) Cluster {
		return Cluster{
			Pools: []Pool{nodePool("default", []Shape{small, large})},
			Nodes: []*corev1.Node{
				node("a", "4", "16Gi", nil), node("b", "4", "16Gi", nil), node("c", "4", "16Gi", nil),
			},
			Pods: pods,
		}
	}
	tests := []struct {
		name        string
		cluster     Cluster
		remove      []string
		replacement *InFlight
		wantFits    bool
		wantMoved   int
	}{
		{
			name:      "pods of an underused node fit on the others",
			cluster:   cluster(pod("p1", "1", "1Gi", onNode("a")), pod("p2", "1", "1Gi", onNode("a")), pod("q", "3", "1Gi", onNode("b"))),
			remove:    []string{"a"},
			wantFits:  true,
			wantMoved: 2,
		},
		{
			name:     "pods too big for the rest do not fit",
			cluster:  cluster(pod("p1", "3", "1Gi", onNode("a")), pod("q", "3", "1Gi", onNode("b")), pod("r", "3", "1Gi", onNode("c"))),
			remove:   []string{"a"},
			wantFits: false,
		},
		{
			name:        "a replacement node takes what the rest cannot",
			cluster:     cluster(pod("p1", "3", "1Gi", onNode("a")), pod("p2", "3", "1Gi", onNode("b")), pod("r", "3", "1Gi", onNode("c"))),
			remove:      []string{"a", "b"},
			replacement: &InFlight{Pool: "default", Shape: large},
			wantFits:    true,
			wantMoved:   2,
		},
		{
			name:      "DaemonSet and mirror pods are not moved",
			cluster:   cluster(daemonPodOn("ds-a", "a"), mirrorPodOn("static-a", "a"), pod("q", "3500m", "1Gi", onNode("b")), pod("r", "3500m", "1Gi", onNode("c"))),
			remove:    []string{"a"},
			wantFits:  true,
			wantMoved: 0,
		},
		{
			name: "anti-affinity keeps a displaced pod off a node with its peer",
			cluster: cluster(
				pod("db-0", "100m", "64Mi", label("app", "db"), podAntiAffinity(corev1.LabelHostname, "db"), onNode("a")),
				pod("db-1", "100m", "64Mi", label("app", "db"), podAntiAffinity(corev1.LabelHostname, "db"), onNode("b")),
				pod("db-2", "100m", "64Mi", label("app", "db"), podAntiAffinity(corev1.LabelHostname, "db"), onNode("c")),
			),
			remove:   []string{"a"},
			wantFits: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := New(ctx, tc.cluster)
			if err != nil {
				t.Fatal(err)
			}
			before, err := s.Solve(ctx, []*corev1.Pod{pod("probe", "3500m", "1Gi")})
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.SimulateRemoval(ctx, tc.remove, tc.replacement)
			if err != nil {
				t.Fatal(err)
			}
			if r.Fits() != tc.wantFits {
				t.Errorf("Fits = %v, want %v (placements %v, unschedulable %v)", r.Fits(), tc.wantFits, r.Placements, r.Unschedulable)
			}
			if tc.wantFits && len(r.Placements) != tc.wantMoved {
				t.Errorf("moved %d pods, want %d", len(r.Placements), tc.wantMoved)
			}
			for _, p := range r.Placements {
				for _, gone := range tc.remove {
					if p.Node == gone {
						t.Errorf("%s placed on removed node %s", p.Pod.Name, gone)
					}
				}
			}
			// The simulation leaves the simulator as it was.
			after, err := s.Solve(ctx, []*corev1.Pod{pod("probe", "3500m", "1Gi")})
			if err != nil {
				t.Fatal(err)
			}
			if describeResult(before) != describeResult(after) {
				t.Errorf("Solve changed after SimulateRemoval:\n%s\nvs\n%s", describeResult(before), describeResult(after))
			}
		})
	}
}
