package scheduling

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestTemplateNode(t *testing.T) {
	base := func(opts ...poolOpt) *v1alpha1.NodePool {
		return nodePool("workers", nil, opts...).NodePool
	}
	tests := []struct {
		name  string
		pool  *v1alpha1.NodePool
		shape Shape
		zone  string
		// want allocatable (cpu, memory, ephemeral-storage, pods) and
		// capacity pods.
		wantAlloc  map[corev1.ResourceName]string
		wantLabels map[string]string
		noLabels   []string
		wantTaints int
	}{
		{
			name:  "defaults: 110 pods, a 100Gi disk and the kubelet's eviction thresholds",
			pool:  base(),
			shape: shape("m", "4", "16Gi", 1),
			zone:  "zrh1",
			wantAlloc: map[corev1.ResourceName]string{
				corev1.ResourceCPU: "4", corev1.ResourceMemory: "16284Mi",
				corev1.ResourceEphemeralStorage: "92160Mi", corev1.ResourcePods: "110",
			},
			wantLabels: map[string]string{
				v1alpha1.LabelNodePool: "workers", corev1.LabelInstanceTypeStable: "m",
				corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				corev1.LabelTopologyZone: "zrh1", corev1.LabelHostname: "node-a",
			},
		},
		{
			name: "reservations and eviction thresholds come off capacity",
			pool: base(func(np *v1alpha1.NodePool, _ *Pool) {
				k := &np.Spec.Template.Kubelet
				mp := int32(30)
				k.MaxPods = &mp
				k.KubeReserved = corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("1Gi")}
				k.SystemReserved = corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("512Mi"), corev1.ResourceEphemeralStorage: q("1Gi")}
				k.EvictionHard = map[string]v1alpha1.EvictionThreshold{"memory.available": "5%", "nodefs.available": "15%"}
			}),
			shape: shape("m", "4", "16Gi", 1),
			wantAlloc: map[corev1.ResourceName]string{
				corev1.ResourceCPU: "3800m", corev1.ResourceMemory: "14710262989",
				corev1.ResourceEphemeralStorage: "84Gi", corev1.ResourcePods: "30",
			},
			noLabels: []string{corev1.LabelTopologyZone},
		},
		{
			name: "a disk size from the shape and a quantity threshold",
			pool: base(func(np *v1alpha1.NodePool, _ *Pool) {
				np.Spec.Template.Kubelet.EvictionHard = map[string]v1alpha1.EvictionThreshold{"nodefs.available": "5Gi"}
			}),
			shape: Shape{Name: "d", CPU: q("2"), Memory: q("4Gi"), EphemeralStorage: q("50Gi")},
			wantAlloc: map[corev1.ResourceName]string{
				corev1.ResourceMemory: "4Gi", corev1.ResourceEphemeralStorage: "45Gi",
			},
		},
		{
			name:  "pool labels and taints are carried, startup taints are not",
			pool:  base(poolLabels("team", "data"), poolTaint("dedicated", "data"), startupTaint("cni-not-ready")),
			shape: shape("m", "4", "16Gi", 1),
			wantLabels: map[string]string{
				"team": "data", v1alpha1.LabelNodePool: "workers",
			},
			wantTaints: 1,
		},
		{
			name: "reservations larger than the shape leave zero, not less",
			pool: base(func(np *v1alpha1.NodePool, _ *Pool) {
				np.Spec.Template.Kubelet.KubeReserved = corev1.ResourceList{corev1.ResourceCPU: q("8")}
			}),
			shape:     shape("tiny", "1", "1Gi", 1),
			wantAlloc: map[corev1.ResourceName]string{corev1.ResourceCPU: "0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := TemplateNode(tc.pool, tc.shape, tc.zone, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			for res, want := range tc.wantAlloc {
				got := n.Status.Allocatable[res]
				if got.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("allocatable %s = %s, want %s", res, got.String(), want)
				}
			}
			if c := n.Status.Capacity[corev1.ResourcePods]; c.Value() == 0 {
				t.Errorf("capacity pods is zero")
			}
			for k, v := range tc.wantLabels {
				if n.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
				}
			}
			for _, k := range tc.noLabels {
				if _, ok := n.Labels[k]; ok {
					t.Errorf("label %s set, want none", k)
				}
			}
			if len(n.Spec.Taints) != tc.wantTaints {
				t.Errorf("taints = %v, want %d", n.Spec.Taints, tc.wantTaints)
			}
			if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeReady || n.Status.Conditions[0].Status != corev1.ConditionTrue {
				t.Errorf("conditions = %v, want Ready", n.Status.Conditions)
			}
		})
	}
}

func TestTemplateNodeRejectsBadThresholds(t *testing.T) {
	np := nodePool("p", nil, func(np *v1alpha1.NodePool, _ *Pool) {
		np.Spec.Template.Kubelet.EvictionHard = map[string]v1alpha1.EvictionThreshold{"memory.available": "150%"}
	}).NodePool
	if _, err := TemplateNode(np, small, "", "n"); err == nil {
		t.Fatal("want an error for a threshold over 100%")
	}
}

func TestDaemonSetPods(t *testing.T) {
	tolerant := daemonSet("tolerant", "100m", "64Mi")
	tolerant.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	selective := daemonSet("gpu-driver", "100m", "64Mi")
	selective.Spec.Template.Spec.NodeSelector = map[string]string{"gpu": "true"}
	huge := daemonSet("huge", "64", "64Mi")
	tests := []struct {
		name string
		pool Pool
		ds   []*appsv1.DaemonSet
		want []string
	}{
		{
			name: "a plain DaemonSet runs on an untainted node",
			pool: nodePool("p", nil),
			ds:   []*appsv1.DaemonSet{daemonSet("exporter", "100m", "64Mi")},
			want: []string{"exporter"},
		},
		{
			name: "only DaemonSets tolerating the pool's taint run there",
			pool: nodePool("p", nil, poolTaint("dedicated", "x")),
			ds:   []*appsv1.DaemonSet{daemonSet("exporter", "100m", "64Mi"), tolerant},
			want: []string{"tolerant"},
		},
		{
			name: "a DaemonSet's node selector must match the pool's labels",
			pool: nodePool("p", nil, poolLabels("gpu", "true")),
			ds:   []*appsv1.DaemonSet{selective},
			want: []string{"gpu-driver"},
		},
		{
			name: "a node selector the pool lacks keeps the DaemonSet away",
			pool: nodePool("p", nil),
			ds:   []*appsv1.DaemonSet{selective},
		},
		{
			name: "a DaemonSet pod too big for the node stays pending and takes nothing",
			pool: nodePool("p", nil),
			ds:   []*appsv1.DaemonSet{huge, daemonSet("exporter", "100m", "64Mi")},
			want: []string{"exporter"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := TemplateNode(tc.pool.NodePool, medium, "", "n1")
			if err != nil {
				t.Fatal(err)
			}
			got, err := DaemonSetPods(context.Background(), n, tc.ds)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.Labels[dsNameLabel])
				if p.Spec.NodeName != "n1" {
					t.Errorf("pod %s bound to %q, want n1", p.Name, p.Spec.NodeName)
				}
			}
			if len(names) != len(tc.want) {
				t.Fatalf("DaemonSet pods %v, want %v", names, tc.want)
			}
			for i := range names {
				if names[i] != tc.want[i] {
					t.Errorf("DaemonSet pods %v, want %v", names, tc.want)
				}
			}
		})
	}
}
