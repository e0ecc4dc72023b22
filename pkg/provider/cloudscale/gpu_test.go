package cloudscale_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	cs "github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

// TestGPUFlavorsCarryTheirGPUs: a GPU flavor's GPUs, as GET /v1/flavors
// lists them, are in its shape's capacity as the vendor's extended
// resource; a flavor without GPUs has none.
func TestGPUFlavorsCarryTheirGPUs(t *testing.T) {
	g := NewWithT(t)
	amd := cloudscaletest.Flavor{Slug: "gpu9-64-8-2-100", VCPUCount: 8, MemoryGB: 64, Zones: []string{"lpg1", "rma1"},
		GPU: &cloudscaletest.FlavorGPU{Name: "AMD Instinct MI210", Count: 2, VRAMPerGPUGB: 64}}
	other := cloudscaletest.Flavor{Slug: "gpu8-64-8-1-100", VCPUCount: 8, MemoryGB: 64, Zones: []string{"lpg1", "rma1"},
		GPU: &cloudscaletest.FlavorGPU{Name: "Acme Tensor 1", Count: 1, VRAMPerGPUGB: 16}}
	e := newEnv(t, withAPIOptions(cloudscaletest.WithFlavors(append(cloudscaletest.DefaultFlavors(), amd, other)...)))

	shapes, err := e.p.Shapes(e.ctx, pool("gpus",
		v1alpha1.Shape{Name: "flex-4-2"},
		v1alpha1.Shape{Name: "gpu2-128-16-1-200"},
		v1alpha1.Shape{Name: "gpu9-64-8-2-100"},
		v1alpha1.Shape{Name: "gpu8-64-8-1-100"},
	))
	g.Expect(err).NotTo(HaveOccurred())
	got := map[string]corev1.ResourceList{}
	for _, s := range shapes {
		got[s.Name] = s.Capacity
	}
	g.Expect(got["flex-4-2"]).To(HaveLen(2), "cpu and memory only")
	g.Expect(count(got["gpu2-128-16-1-200"], cs.ResourceNVIDIAGPU)).To(Equal(int64(1)))
	g.Expect(count(got["gpu2-128-16-1-200"], corev1.ResourceCPU)).To(Equal(int64(16)))
	g.Expect(count(got["gpu9-64-8-2-100"], cs.ResourceAMDGPU)).To(Equal(int64(2)))
	g.Expect(got["gpu8-64-8-1-100"]).To(HaveLen(2), "a GPU of a vendor without a known device plugin resource is not named")
}

// TestAShapeDeclaringDevicesItsFlavorLacksIsRefused: a pool's shape may
// declare the flavor's GPUs (the same count), nothing else.
func TestAShapeDeclaringDevicesItsFlavorLacksIsRefused(t *testing.T) {
	gpus := func(name corev1.ResourceName, n string) corev1.ResourceList {
		return corev1.ResourceList{name: resource.MustParse(n)}
	}
	tests := []struct {
		name    string
		shape   v1alpha1.Shape
		message string // empty when accepted
	}{
		{name: "the flavor's GPUs", shape: v1alpha1.Shape{Name: "gpu2-128-16-1-200", ExtendedResources: gpus(cs.ResourceNVIDIAGPU, "1")}},
		{name: "more GPUs than the flavor has", shape: v1alpha1.Shape{Name: "gpu2-128-16-1-200", ExtendedResources: gpus(cs.ResourceNVIDIAGPU, "2")},
			message: "nodepool gpus shape gpu2-128-16-1-200 declares 2 nvidia.com/gpu, but the cloudscale flavor has 1 NVIDIA RTX PRO 6000 Max-Q (as extended resources: nvidia.com/gpu: 1)"},
		{name: "another vendor's GPUs", shape: v1alpha1.Shape{Name: "gpu2-128-16-1-200", ExtendedResources: gpus(cs.ResourceAMDGPU, "1")},
			message: "declares 1 amd.com/gpu"},
		{name: "GPUs on a flavor without", shape: v1alpha1.Shape{Name: "flex-4-2", ExtendedResources: gpus(cs.ResourceNVIDIAGPU, "1")},
			message: "nodepool gpus shape flex-4-2 declares 1 nvidia.com/gpu, but the cloudscale flavor has no GPU (as extended resources: none)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			shapes, err := e.p.Shapes(e.ctx, pool("gpus", tt.shape))
			if tt.message == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(count(shapes[0].Capacity, cs.ResourceNVIDIAGPU)).To(Equal(int64(1)))
				return
			}
			g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.message))
		})
	}
}

// count is a resource's whole count in a list, -1 when it is absent.
func count(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return -1
	}
	return q.Value()
}
