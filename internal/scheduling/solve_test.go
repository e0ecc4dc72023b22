package scheduling

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// newNodes summarises the new nodes as "pool/shape/zone:pods".
func newNodes(r Result) []string {
	var out []string
	for _, n := range r.NewNodes {
		out = append(out, fmt.Sprintf("%s/%s/%s:%d", n.Pool, n.Shape.Name, n.Zone, len(n.Pods)))
	}
	return out
}

func unschedulable(r Result) map[string]string {
	out := map[string]string{}
	for _, u := range r.Unschedulable {
		out[u.Pod.Name] = u.Reason
	}
	return out
}

// nodeOf returns where each pending pod went: an existing or phantom node's
// name, or the new node's name.
func nodeOf(r Result) map[string]string {
	out := map[string]string{}
	for _, p := range r.Placements {
		out[p.Pod.Name] = p.Node
	}
	for _, n := range r.NewNodes {
		for _, p := range n.Pods {
			out[p.Name] = n.Name
		}
	}
	return out
}

func solve(t *testing.T, c Cluster, pending []*corev1.Pod) Result {
	t.Helper()
	r, err := Solve(context.Background(), Input{Cluster: c, Pending: pending})
	if err != nil {
		t.Fatalf("Solve: %v", err)
	}
	if got := len(r.Placements) + len(r.Unschedulable); got+podsOnNew(r) != len(pending) {
		t.Fatalf("%d pending pods, but %d placed, %d on new nodes, %d unschedulable", len(pending), len(r.Placements), podsOnNew(r), len(r.Unschedulable))
	}
	return r
}

func podsOnNew(r Result) int {
	n := 0
	for _, nn := range r.NewNodes {
		n += len(nn.Pods)
	}
	return n
}

func wantNodes(want ...string) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		if got := newNodes(r); !slices.Equal(got, want) {
			t.Errorf("new nodes = %v, want %v (unschedulable: %v)", got, want, unschedulable(r))
		}
	}
}

func wantUnschedulable(pod string, reasonParts ...string) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		reason, ok := unschedulable(r)[pod]
		if !ok {
			t.Errorf("pod %s was placed (%v), want it unschedulable", pod, nodeOf(r))
			return
		}
		for _, part := range reasonParts {
			if !strings.Contains(reason, part) {
				t.Errorf("reason for %s = %q, want it to contain %q", pod, reason, part)
			}
		}
	}
}

func all(checks ...func(*testing.T, Result)) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		for _, c := range checks {
			c(t, r)
		}
	}
}

var (
	small  = shape("small", "2", "8Gi", 1)
	medium = shape("medium", "4", "16Gi", 2)
	large  = shape("large", "8", "32Gi", 4)
)

func TestSolve(t *testing.T) {
	tests := []struct {
		name    string
		cluster Cluster
		pending []*corev1.Pod
		check   func(*testing.T, Result)
	}{
		{
			name:    "a pod gets the cheapest shape with room for its requests",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large, small, medium})}},
			pending: []*corev1.Pod{pod("p", "3", "1Gi")},
			check:   wantNodes("default/medium/:1"),
		},
		{
			name:    "a pod that selects an instance type gets that shape, not the cheapest",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, medium, large})}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", nodeSelector(corev1.LabelInstanceTypeStable, "large")), pod("q", "1", "1Gi")},
			check:   wantNodes("default/large/:2"),
		},
		{
			name:    "a pod that rules out instance types by affinity gets another shape",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, medium, large})}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", nodeAffinity(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpNotIn, "small"))},
			check:   wantNodes("default/medium/:1"),
		},
		{
			name:    "memory decides the shape when it is the scarce resource",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, medium, large})}},
			pending: []*corev1.Pod{pod("p", "100m", "20Gi")},
			check:   wantNodes("default/large/:1"),
		},
		{
			name:    "pods that fit together share one node of the smallest shape holding them all",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, medium, large})}},
			pending: pods(3, "web", "1", "1Gi"),
			check:   wantNodes("default/medium/:3"),
		},
		{
			name: "a node selector picks the pool carrying the label",
			cluster: Cluster{Pools: []Pool{
				nodePool("general", []Shape{small}, weight(50)),
				nodePool("fast", []Shape{small}, poolLabels("disk", "ssd")),
			}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", nodeSelector("disk", "ssd"))},
			check:   wantNodes("fast/small/:1"),
		},
		{
			name: "required node affinity NotIn keeps a pod off the pool with the label",
			cluster: Cluster{Pools: []Pool{
				nodePool("fast", []Shape{small}, weight(50), poolLabels("disk", "ssd")),
				nodePool("general", []Shape{small}, poolLabels("disk", "hdd")),
			}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", nodeAffinity("disk", corev1.NodeSelectorOpNotIn, "ssd"))},
			check:   wantNodes("general/small/:1"),
		},
		{
			name:    "a node selector no pool satisfies leaves the pod unschedulable",
			cluster: Cluster{Pools: []Pool{nodePool("general", []Shape{small})}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", nodeSelector("disk", "nvme"))},
			check: all(wantNodes(), wantUnschedulable("p",
				`pool "general": node(s) didn't match Pod's node affinity/selector`)),
		},
		{
			name: "a pod without toleration skips the tainted pool even at higher weight",
			cluster: Cluster{Pools: []Pool{
				nodePool("gpu", []Shape{small}, weight(90), poolTaint("gpu", "true")),
				nodePool("general", []Shape{small}),
			}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantNodes("general/small/:1"),
		},
		{
			name: "a tolerating pod goes to the tainted pool of higher weight",
			cluster: Cluster{Pools: []Pool{
				nodePool("gpu", []Shape{small}, weight(90), poolTaint("gpu", "true")),
				nodePool("general", []Shape{small}),
			}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi", tolerate("gpu"))},
			check:   wantNodes("gpu/small/:1"),
		},
		{
			name:    "an untolerated taint is named in the reason",
			cluster: Cluster{Pools: []Pool{nodePool("gpu", []Shape{small}, poolTaint("gpu", "true"))}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantUnschedulable("p", `pool "gpu": node(s) had untolerated taint {gpu: true}`),
		},
		{
			name:    "startup taints do not keep pods from a pool",
			cluster: Cluster{Pools: []Pool{nodePool("cni", []Shape{small}, startupTaint("cni-not-ready"))}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantNodes("cni/small/:1"),
		},
		{
			name:    "two pods on one host port need two nodes",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large})}},
			pending: pods(2, "ingress", "100m", "128Mi", hostPort(8443)),
			check:   wantNodes("default/large/:1", "default/large/:1"),
		},
		{
			name:    "zone spread opens one node per zone",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large}, zones("a", "b", "c"))}},
			pending: pods(3, "api", "100m", "128Mi", spread(corev1.LabelTopologyZone, 1, "api")),
			check:   wantNodes("default/large/a:1", "default/large/b:1", "default/large/c:1"),
		},
		{
			name:    "zone spread with maxSkew 1 fills zones evenly",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large}, zones("a", "b"))}},
			pending: pods(4, "api", "100m", "128Mi", spread(corev1.LabelTopologyZone, 1, "api")),
			check:   wantNodes("default/large/a:2", "default/large/b:2"),
		},
		{
			// A node never opened is no domain: the one node opened is
			// the only one, and the spread holds on it.
			name:    "hostname spread shares the only node",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large})}},
			pending: pods(3, "api", "100m", "128Mi", spread(corev1.LabelHostname, 1, "api")),
			check:   wantNodes("default/large/:3"),
		},
		{
			// A node too small for the pods is a domain with none of
			// them: no node may hold more than one.
			name:    "hostname spread puts one pod per node beside a node without room",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large})}, Nodes: []*corev1.Node{node("n1", "50m", "64Mi", nil)}},
			pending: pods(3, "api", "100m", "128Mi", spread(corev1.LabelHostname, 1, "api")),
			check:   wantNodes("default/large/:1", "default/large/:1", "default/large/:1"),
		},
		{
			name:    "required pod anti-affinity on hostname puts one pod per node",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, large})}},
			pending: pods(3, "db", "500m", "512Mi", podAntiAffinity(corev1.LabelHostname, "db")),
			check:   wantNodes("default/small/:1", "default/small/:1", "default/small/:1"),
		},
		{
			name:    "anti-affinity of pods on an existing node keeps matching pods away",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small})}, Nodes: []*corev1.Node{node("n1", "8", "32Gi", nil)}, Pods: []*corev1.Pod{pod("db-0", "100m", "128Mi", label("app", "web"), podAntiAffinity(corev1.LabelHostname, "web"), onNode("n1"))}},
			pending: pods(1, "web", "100m", "128Mi"),
			check:   wantNodes("default/small/:1"),
		},
		{
			name:    "required pod affinity co-locates pods with their peers",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, large})}},
			pending: append(pods(1, "cache", "200m", "256Mi"), pods(3, "web", "1", "1Gi", podAffinity(corev1.LabelHostname, "cache"))...),
			check: func(t *testing.T, r Result) {
				got := nodeOf(r)
				if len(r.NewNodes) != 1 || len(unschedulable(r)) != 0 {
					t.Fatalf("new nodes %v, unschedulable %v; want all on one node", newNodes(r), unschedulable(r))
				}
				for _, p := range []string{"web-00000", "web-00001", "web-00002"} {
					if got[p] != got["cache-00000"] {
						t.Errorf("%s on %s, cache on %s", p, got[p], got["cache-00000"])
					}
				}
			},
		},
		{
			name:    "max pods caps how many pods share a node",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large}, maxPodsOpt(5))}},
			pending: pods(12, "tiny", "10m", "16Mi"),
			check:   wantNodes("default/large/:5", "default/large/:5", "default/large/:2"),
		},
		{
			name:    "without DaemonSets the small shape holds the pod",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, medium}, noEviction())}},
			pending: []*corev1.Pod{pod("p", "1800m", "1Gi")},
			check:   wantNodes("default/small/:1"),
		},
		{
			name: "DaemonSet overhead pushes the pod to a bigger shape",
			cluster: Cluster{
				Pools:      []Pool{nodePool("default", []Shape{small, medium}, noEviction())},
				DaemonSets: []*appsv1.DaemonSet{daemonSet("node-exporter", "500m", "256Mi")},
			},
			pending: []*corev1.Pod{pod("p", "1800m", "1Gi")},
			check: func(t *testing.T, r Result) {
				wantNodes("default/medium/:1")(t, r)
				if got := r.NewNodes[0].DaemonSetRequests.Cpu().String(); got != "500m" {
					t.Errorf("DaemonSet requests cpu = %s, want 500m", got)
				}
			},
		},
		{
			name: "a DaemonSet that does not tolerate the pool's taint adds no overhead",
			cluster: Cluster{
				Pools:      []Pool{nodePool("default", []Shape{small, medium}, noEviction(), poolTaint("dedicated", "x"))},
				DaemonSets: []*appsv1.DaemonSet{daemonSet("node-exporter", "500m", "256Mi")},
			},
			pending: []*corev1.Pod{pod("p", "1800m", "1Gi", tolerate("dedicated"))},
			check:   wantNodes("default/small/:1"),
		},
		{
			name: "the highest-weight pool wins even when dearer",
			cluster: Cluster{Pools: []Pool{
				nodePool("cheap", []Shape{shape("c", "4", "16Gi", 1)}, weight(10)),
				nodePool("reserved", []Shape{shape("r", "4", "16Gi", 9)}, weight(60)),
			}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantNodes("reserved/r/:1"),
		},
		{
			name: "among pools of equal weight the cheapest shape wins",
			cluster: Cluster{Pools: []Pool{
				nodePool("a-dear", []Shape{shape("d", "4", "16Gi", 9)}),
				nodePool("b-cheap", []Shape{shape("c", "4", "16Gi", 3)}),
			}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantNodes("b-cheap/c/:1"),
		},
		{
			name: "the cheapest of several fitting shapes is taken, not the first listed",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{
				shape("pricey", "4", "16Gi", 5), shape("bargain", "4", "16Gi", 2), shape("mid", "4", "16Gi", 3),
			})}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantNodes("default/bargain/:1"),
		},
		{
			name:    "a shape in capacity backoff is not used",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small, medium}, unavailable("small"))}},
			pending: []*corev1.Pod{pod("p", "1", "1Gi")},
			check:   wantNodes("default/medium/:1"),
		},
		{
			name: "a flexible pool takes the smallest size on its step grid",
			cluster: Cluster{Pools: []Pool{{
				NodePool: &v1alpha1.NodePool{ObjectMeta: metaName("flex")},
				Shapes: Shapes{Flexible: &Flexible{
					MinCPU: q("1"), MaxCPU: q("16"), CPUStep: q("2"),
					MinMemory: q("1Gi"), MaxMemory: q("64Gi"), MemoryStep: q("4Gi"),
					PricePerCPU: 1, PricePerGiB: 0.25,
				}},
			}}},
			// 3 cores round up to 4; 5Gi plus the 100Mi eviction threshold
			// rounds up to 8Gi.
			pending: []*corev1.Pod{pod("p", "3", "5Gi")},
			check:   wantNodes("flex/flex-4-8Gi/:1"),
		},
		{
			name:    "the node limit leaves the rest unschedulable with the limit named",
			cluster: Cluster{Pools: []Pool{nodePool("small", []Shape{small}, limitNodes(3), inUse(1, "2", "8Gi"))}},
			pending: pods(3, "big", "1500m", "1Gi"),
			check: all(wantNodes("small/small/:1", "small/small/:1"),
				wantUnschedulable("big-00002", `pool "small": limit nodes=3 reached`)),
		},
		{
			name: "the cpu limit is never exceeded by the shapes chosen",
			cluster: Cluster{Pools: []Pool{
				nodePool("default", []Shape{small, large}, limitCPU("12"), inUse(1, "4", "16Gi")),
			}},
			pending: pods(6, "w", "1500m", "1Gi"),
			check: func(t *testing.T, r Result) {
				cpu := int64(4000)
				for _, n := range r.NewNodes {
					cpu += n.Shape.CPU.MilliValue()
				}
				if cpu > 12000 {
					t.Errorf("new nodes %v bring the pool to %dm cpu, over the 12 cpu limit", newNodes(r), cpu)
				}
				if len(r.Unschedulable) == 0 {
					t.Errorf("all pods placed on %v; want some left for the limit", newNodes(r))
				}
				wantUnschedulable("w-00005", `pool "default": limit cpu=12 reached`)(t, r)
			},
		},
		{
			name: "a launched claim with room absorbs the pod and no node is opened",
			cluster: Cluster{
				Pools:    []Pool{nodePool("default", []Shape{small, large})},
				InFlight: []InFlight{{Name: "default-abc12", Pool: "default", Shape: large}},
			},
			pending: pods(2, "web", "1", "1Gi"),
			check: func(t *testing.T, r Result) {
				wantNodes()(t, r)
				for _, p := range r.Placements {
					if p.Node != "default-abc12" {
						t.Errorf("%s placed on %s, want the in-flight claim", p.Pod.Name, p.Node)
					}
				}
			},
		},
		{
			name: "an existing node with room takes the pod",
			cluster: Cluster{
				Pools: []Pool{nodePool("default", []Shape{small})},
				Nodes: []*corev1.Node{node("worker-1", "4", "16Gi", nil)},
				Pods:  []*corev1.Pod{pod("old", "3", "1Gi", onNode("worker-1"))},
			},
			pending: []*corev1.Pod{pod("fits", "500m", "1Gi"), pod("too-big", "1500m", "1Gi")},
			check: func(t *testing.T, r Result) {
				wantNodes("default/small/:1")(t, r)
				if got := nodeOf(r)["fits"]; got != "worker-1" {
					t.Errorf("fits went to %s, want worker-1", got)
				}
			},
		},
		{
			name: "a pod no pool can hold is unschedulable with a reason per pool",
			cluster: Cluster{Pools: []Pool{
				nodePool("general", []Shape{small, large}),
				nodePool("gpu", []Shape{large}, poolTaint("gpu", "true")),
			}},
			pending: []*corev1.Pod{pod("huge", "64", "1Gi")},
			check: wantUnschedulable("huge",
				`pool "general": no shape fits the pod and its DaemonSet pods: insufficient cpu`,
				`pool "gpu": node(s) had untolerated taint {gpu: true}`),
		},
		{
			name:    "preferred anti-affinity and ScheduleAnyway spread never block packing",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{large}, zones("a", "b"))}},
			pending: pods(3, "soft", "100m", "128Mi", softAntiAffinity(corev1.LabelHostname, "soft"), softSpread(corev1.LabelTopologyZone, "soft")),
			check:   wantNodes("default/large/a:3"),
		},
		{
			name: "a pod whose volume is bound in one zone gets a node in that zone",
			cluster: Cluster{
				Pools:   []Pool{nodePool("default", []Shape{small}, zones("a", "b"))},
				Storage: zonalVolume("data", "b"),
			},
			pending: []*corev1.Pod{pod("db", "1", "1Gi", withClaim("data"))},
			check:   wantNodes("default/small/b:1"),
		},
		{
			name:    "a pod whose claim does not exist is unschedulable",
			cluster: Cluster{Pools: []Pool{nodePool("default", []Shape{small})}},
			pending: []*corev1.Pod{pod("db", "1", "1Gi", withClaim("missing"))},
			check:   all(wantNodes(), wantUnschedulable("db", `persistentvolumeclaim "missing" not found`)),
		},
		{
			name:    "without pools a pod that fits no node says so",
			cluster: Cluster{Nodes: []*corev1.Node{node("n1", "1", "1Gi", nil)}},
			pending: []*corev1.Pod{pod("p", "2", "1Gi")},
			check:   wantUnschedulable("p", "no node pool"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, solve(t, tc.cluster, tc.pending))
		})
	}
}

func startupTaint(key string) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) {
		np.Spec.Template.StartupTaints = append(np.Spec.Template.StartupTaints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	}
}

func softAntiAffinity(key, app string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			}}},
		}}
	}
}

func softSpread(key, app string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		})
	}
}

func withClaim(name string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
		}})
	}
}

// zonalVolume is a claim bound to a volume that lives in one zone.
func zonalVolume(claim, zone string) Storage {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: claim, Namespace: "default", UID: "pvc-uid",
			// What the volume controller sets on a bound claim.
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName:  "pv-" + claim,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: q("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/data"}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim, UID: "pvc-uid"},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
			}}}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	return Storage{PersistentVolumeClaims: []*corev1.PersistentVolumeClaim{pvc}, PersistentVolumes: []*corev1.PersistentVolume{pv}}
}

func TestSolveTwiceOnOneSimulator(t *testing.T) {
	c, pending := mixedWorkload(300, 20)
	s, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Solve(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Solve(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := describeResult(first), describeResult(second); a != b || a == "" {
		t.Errorf("a second Solve on one Simulator differs:\n%s\nvs\n%s", a, b)
	}
}

func TestSolveIsDeterministic(t *testing.T) {
	c, pending := mixedWorkload(600, 40)
	first := solve(t, c, pending)
	for i := 0; i < 3; i++ {
		shuffled := append([]*corev1.Pod(nil), pending...)
		// A fixed permutation: the input order must not matter either.
		sort.SliceStable(shuffled, func(a, b int) bool { return (a*7919+i)%len(shuffled) < (b*7919+i)%len(shuffled) })
		again := solve(t, c, shuffled)
		if a, b := describeResult(first), describeResult(again); a != b {
			t.Fatalf("run %d differs:\n%s\nvs\n%s", i, a, b)
		}
	}
}

func describeResult(r Result) string {
	var b strings.Builder
	for _, n := range r.NewNodes {
		fmt.Fprintf(&b, "new %s %s/%s/%s:", n.Name, n.Pool, n.Shape.Name, n.Zone)
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
