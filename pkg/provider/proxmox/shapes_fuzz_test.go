package proxmox_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// FuzzFlexibleShapes parses a flexible range from quantities and expands
// it: whatever the range, the expansion ends, stays within
// maxFlexibleShapes shapes, and every shape is positive and within the
// range rounded up to whole cores and MiB. Seeds are in
// testdata/fuzz/FuzzFlexibleShapes (1m..1e6 CPU by 1Mi..1Ei with the
// smallest steps among them).
func FuzzFlexibleShapes(f *testing.F) {
	f.Add("1", "8", "1", "1Gi", "32Gi", "1Gi")
	api := fakeAPI(f)
	p := newProvider(f, api, cloneProvider(api.Endpoint()))
	f.Fuzz(func(t *testing.T, minCPU, maxCPU, cpuStep, minMem, maxMem, memStep string) {
		var q [6]resource.Quantity
		for i, s := range []string{minCPU, maxCPU, cpuStep, minMem, maxMem, memStep} {
			v, err := resource.ParseQuantity(s)
			if err != nil {
				return
			}
			q[i] = v
		}
		pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "fuzz"}}
		pool.Spec.Shapes.Flexible = &v1alpha1.FlexibleShape{
			MinCPU: q[0], MaxCPU: q[1], CPUStep: &q[2],
			MinMemory: q[3], MaxMemory: q[4], MemoryStep: &q[5],
		}
		shapes, err := p.Shapes(context.Background(), pool)
		if err != nil {
			if !provider.IsTerminal(err) {
				t.Fatalf("Shapes failed with a non-terminal error: %v", err)
			}
			return
		}
		if len(shapes) == 0 || len(shapes) > 256 {
			t.Fatalf("%d shapes, want 1 to 256", len(shapes))
		}
		names := map[string]bool{}
		maxCores := q[1].DeepCopy()
		maxCores.RoundUp(0)
		for _, s := range shapes {
			cpu, mem := s.Capacity[corev1.ResourceCPU], s.Capacity[corev1.ResourceMemory]
			if cpu.Sign() <= 0 || mem.Sign() <= 0 {
				t.Fatalf("shape %s has cpu %s memory %s", s.Name, cpu.String(), mem.String())
			}
			if cpu.Cmp(maxCores) > 0 {
				t.Fatalf("shape %s has %s CPUs, above the range's %s", s.Name, cpu.String(), q[1].String())
			}
			if names[s.Name] {
				t.Fatalf("shape name %s twice", s.Name)
			}
			names[s.Name] = true
		}
	})
}
