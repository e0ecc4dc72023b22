package simulated

import (
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestChooseZone(t *testing.T) {
	zoneIs := func(op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: op, Values: values}
	}
	tests := []struct {
		name         string
		zones        []string
		requirements []corev1.NodeSelectorRequirement
		want         string
	}{
		{"no requirement takes the first zone", []string{"a", "b"}, nil, "a"},
		{"a required zone among ours is taken", []string{"a", "b", "c"}, []corev1.NodeSelectorRequirement{zoneIs(corev1.NodeSelectorOpIn, "x", "c")}, "c"},
		{"an excluded zone is skipped", []string{"a", "b"}, []corev1.NodeSelectorRequirement{zoneIs(corev1.NodeSelectorOpNotIn, "a")}, "b"},
		{"requirements on other keys do not matter", []string{"a", "b"}, []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}, "a"},
		{"a required zone we do not have falls back to the first", []string{"a", "b"}, []corev1.NodeSelectorRequirement{zoneIs(corev1.NodeSelectorOpIn, "x")}, "a"},
		{"with no zones configured the first required one is taken", nil, []corev1.NodeSelectorRequirement{zoneIs(corev1.NodeSelectorOpIn, "x", "y")}, "x"},
		{"with no zones and no requirement there is no zone", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chooseZone(tt.zones, tt.requirements); got != tt.want {
				t.Errorf("chooseZone = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNodeResources(t *testing.T) {
	tests := []struct {
		name            string
		kubelet         v1alpha1.KubeletConfiguration
		wantCapacity    map[corev1.ResourceName]string
		wantAllocatable map[corev1.ResourceName]string
	}{
		{
			name:            "without kubelet settings allocatable is capacity with 110 pods",
			wantCapacity:    map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "100Gi"},
			wantAllocatable: map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "100Gi"},
		},
		{
			name: "reservations and eviction thresholds come off allocatable",
			kubelet: v1alpha1.KubeletConfiguration{
				MaxPods:        ptr.To[int32](30),
				KubeReserved:   corev1.ResourceList{"cpu": resource.MustParse("100m"), "memory": resource.MustParse("256Mi")},
				SystemReserved: corev1.ResourceList{"cpu": resource.MustParse("50m"), "ephemeral-storage": resource.MustParse("1Gi")},
				EvictionHard:   map[string]v1alpha1.EvictionThreshold{"memory.available": "256Mi", "nodefs.available": "10%"},
			},
			wantCapacity:    map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "30", "ephemeral-storage": "100Gi"},
			wantAllocatable: map[corev1.ResourceName]string{"cpu": "1850m", "memory": "3584Mi", "pods": "30", "ephemeral-storage": "89Gi"},
		},
		{
			name:            "a reservation larger than the machine leaves zero",
			kubelet:         v1alpha1.KubeletConfiguration{KubeReserved: corev1.ResourceList{"cpu": resource.MustParse("3")}},
			wantCapacity:    map[corev1.ResourceName]string{"cpu": "2"},
			wantAllocatable: map[corev1.ResourceName]string{"cpu": "0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			capacity, allocatable := nodeResources(resource.MustParse("2"), resource.MustParse("4Gi"), tt.kubelet)
			expectQuantities(g, capacity, tt.wantCapacity)
			expectQuantities(g, allocatable, tt.wantAllocatable)
		})
	}
}

func TestLabelValue(t *testing.T) {
	tests := []struct {
		name, in string
		keep     bool
	}{
		{"a valid value is kept", "prod-eu_1.a", true},
		{"a value with a slash is hashed", "team/prod", false},
		{"a value longer than 63 characters is hashed", strings.Repeat("a", 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := labelValue(tt.in)
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Fatalf("labelValue(%q) = %q, not a label value: %v", tt.in, got, errs)
			}
			if (got == tt.in) != tt.keep {
				t.Errorf("labelValue(%q) = %q, want kept: %v", tt.in, got, tt.keep)
			}
			if got != labelValue(tt.in) {
				t.Errorf("labelValue(%q) is not stable", tt.in)
			}
		})
	}
}

func TestMachineRecordRoundTrips(t *testing.T) {
	g := gomega.NewWithT(t)
	claim := newClaim("pool-abc", "pool")
	claim.Spec.Taints = []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}
	// A taint that is both a taint and a startup taint appears once, beside
	// the unregistered taint.
	claim.Spec.StartupTaints = []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}, {Key: "s", Effect: corev1.TaintEffectNoExecute}}
	now := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	m := newMachine(claim, machineParams{cluster: "c1", zone: "z1", createdAt: now, bootAt: now.Add(time.Minute), neverRegister: true})
	cm, err := m.configMap("ns")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	back, err := machineFromConfigMap(cm)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	expectSameJSON(g, back.instance(), m.instance())
	expectSameJSON(g, back.node(), m.node())
	g.Expect(back.node().Spec.Taints).To(gomega.HaveLen(3))
	g.Expect(back.neverRegister).To(gomega.BeTrue())
	g.Expect(back.bootAt).To(gomega.Equal(now.Add(time.Minute)))
}

// A machine of a shape with devices registers a Node that advertises them,
// whole and unreserved, as a device plugin would, so that pods asking for
// them bind there; the instance reports them too.
func TestMachineAdvertisesItsShapesDevices(t *testing.T) {
	g := gomega.NewWithT(t)
	claim := newClaim("gpu-a", "gpu")
	claim.Spec.Shape.ExtendedResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	m := newMachine(claim, machineParams{cluster: "c1", kubelet: v1alpha1.KubeletConfiguration{
		KubeReserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
	}})
	node := m.node()
	expectQuantities(g, node.Status.Capacity, map[corev1.ResourceName]string{"nvidia.com/gpu": "2"})
	expectQuantities(g, node.Status.Allocatable, map[corev1.ResourceName]string{"nvidia.com/gpu": "2"})
	expectQuantities(g, m.instance().Capacity, map[corev1.ResourceName]string{"nvidia.com/gpu": "2"})

	// The record keeps them across a restart.
	cm, err := m.configMap("ns")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	back, err := machineFromConfigMap(cm)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	expectQuantities(g, back.node().Status.Allocatable, map[corev1.ResourceName]string{"nvidia.com/gpu": "2"})
}
