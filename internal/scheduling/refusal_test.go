package scheduling

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// refusalOf is the one pool refusal of an unschedulable pod.
func refusalOf(t *testing.T, r Result, pod string) PoolRefusal {
	t.Helper()
	for _, u := range r.Unschedulable {
		if u.Pod.Name == pod {
			if len(u.Pools) != 1 {
				t.Fatalf("pod %s: refusals %+v, want one pool's", pod, u.Pools)
			}
			return u.Pools[0]
		}
	}
	t.Fatalf("pod %s is not unschedulable: %+v", pod, r)
	return PoolRefusal{}
}

func TestRefusalsSayWhatAUserCanActOn(t *testing.T) {
	small := shape("small", "2", "8Gi", 0.1)
	for _, tt := range []struct {
		name    string
		cluster Cluster
		pending []*corev1.Pod
		pod     string
		kind    RefusalKind
		want    []string
		// nodes is the node limit and its use in the refusal's numbers.
		nodes string
	}{{
		name:    "a pod too big for every shape says so first, also when the pool is at its node limit",
		cluster: Cluster{Pools: []Pool{nodePool("p", []Shape{small}, limitNodes(1), inUse(1, "2", "8Gi"))}},
		pending: []*corev1.Pod{pod("huge", "8", "1Gi")},
		pod:     "huge",
		kind:    RefusalTooSmall,
		want:    []string{"no shape fits the pod and its DaemonSet pods: insufficient cpu; and limit nodes=1 reached"},
		nodes:   "1/1",
	}, {
		name:    "a pod that fits a shape is refused by the node limit alone, counted in nodes",
		cluster: Cluster{Pools: []Pool{nodePool("p", []Shape{small}, limitNodes(1), inUse(1, "2", "8Gi"))}},
		pending: []*corev1.Pod{pod("fits", "1", "1Gi")},
		pod:     "fits",
		kind:    RefusalLimit,
		want:    []string{"limit nodes=1 reached"},
		nodes:   "1/1",
	}, {
		name:    "a node selector names the label the pool's nodes lack and the labels they have",
		cluster: Cluster{Pools: []Pool{nodePool("p", []Shape{small}, poolLabels("team", "web"), zones("a", "b"))}},
		pending: []*corev1.Pod{pod("ssd", "1", "1Gi", nodeSelector("disk", "ssd"))},
		pod:     "ssd",
		kind:    RefusalFilter,
		want: []string{
			"it selects disk=ssd, and the pool's nodes have no label disk; they have ",
			"team=web", "topology.kubernetes.io/zone in [a, b]",
		},
	}, {
		name:    "a node selector with another value names the value the pool's nodes have",
		cluster: Cluster{Pools: []Pool{nodePool("p", []Shape{small}, poolLabels("team", "web"))}},
		pending: []*corev1.Pod{pod("db", "1", "1Gi", nodeSelector("team", "db"))},
		pod:     "db",
		kind:    RefusalFilter,
		want:    []string{"it selects team=db, and the pool's nodes have team=web"},
	}, {
		name:    "a required node affinity names the requirement the pool's nodes miss",
		cluster: Cluster{Pools: []Pool{nodePool("p", []Shape{small}, poolLabels("team", "web"))}},
		pending: []*corev1.Pod{pod("arm", "1", "1Gi", nodeAffinity("kubernetes.io/arch", corev1.NodeSelectorOpIn, "arm64"))},
		pod:     "arm",
		kind:    RefusalFilter,
		want:    []string{"its node affinity requires kubernetes.io/arch In [arm64], and the pool's nodes have kubernetes.io/arch="},
	}, {
		name:    "an anti-affinity over zones that needs more zones than the pool has says how many it has",
		cluster: Cluster{Pools: []Pool{nodePool("p", []Shape{small}, zones("a", "b"))}},
		pending: pods(3, "spread", "500m", "1Gi", podAntiAffinity(corev1.LabelTopologyZone, "spread")),
		pod:     "spread-00002",
		kind:    RefusalFilter,
		want:    []string{"the pod spreads over zones, and pool p has 2 zones: a, b"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			refusal := refusalOf(t, solve(t, tt.cluster, tt.pending), tt.pod)
			if refusal.Kind != tt.kind {
				t.Errorf("kind %s, want %s (%s)", refusal.Kind, tt.kind, refusal.Message)
			}
			for _, want := range tt.want {
				if !strings.Contains(refusal.Message, want) {
					t.Errorf("message %q, want it to contain %q", refusal.Message, want)
				}
			}
			if tt.nodes != "" {
				limit, inUse := refusal.Limits[nodeResource], refusal.InUse[nodeResource]
				if got := limit.String() + "/" + inUse.String(); got != tt.nodes {
					t.Errorf("node limit/in use %q, want %q (limits %v)", got, tt.nodes, refusal.Limits)
				}
				if _, ok := refusal.Limits[corev1.ResourcePods]; ok {
					t.Errorf("a node limit labelled as pods: %v", refusal.Limits)
				}
			}
		})
	}
}

func TestDescribeNewNodesNamesThePodsAndZones(t *testing.T) {
	r := solve(t, Cluster{Pools: []Pool{nodePool("p", []Shape{shape("small", "2", "8Gi", 0.1)}, zones("a", "b"))}},
		pods(2, "web", "1500m", "1Gi", podAntiAffinity(corev1.LabelTopologyZone, "web")))
	got := DescribeNewNodes(r.NewNodes)
	for _, want := range []string{"small of pool p in zone a for default/web-0000", "small of pool p in zone b for default/web-0000"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q, want it to contain %q", got, want)
		}
	}
	if n := strings.Count(got, ";"); n != 1 {
		t.Errorf("%q names %d nodes, want 2", got, n+1)
	}
}
