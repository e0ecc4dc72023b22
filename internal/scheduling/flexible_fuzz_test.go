package scheduling

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// FuzzFlexibleRange feeds a flexible range as a user writes it through
// PoolShapes and the grid: whatever the values, nothing panics, a range is
// either refused with an error or yields a bounded catalog whose sizes lie
// on the range, and the grid searches agree with it. The seeds (testdata/fuzz)
// include 1m..1e6 cpu by 1Mi..1Ei memory, which once overflowed the grid
// and allocated without bound.
func FuzzFlexibleRange(f *testing.F) {
	f.Add("1", "64", "1", "1Gi", "256Gi", "1Gi")
	f.Add("1m", "1e6", "1", "1Mi", "1Ei", "1Gi")
	f.Fuzz(func(t *testing.T, minCPU, maxCPU, cpuStep, minMem, maxMem, memStep string) {
		var qs [6]resource.Quantity
		for i, s := range []string{minCPU, maxCPU, cpuStep, minMem, maxMem, memStep} {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return
			}
			qs[i] = q
		}
		np := &v1alpha1.NodePool{ObjectMeta: metaName("fuzz"), Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{
			Flexible: &v1alpha1.FlexibleShape{
				MinCPU: qs[0], MaxCPU: qs[1], CPUStep: &qs[2],
				MinMemory: qs[3], MaxMemory: qs[4], MemoryStep: &qs[5],
			},
		}}}
		shapes, err := PoolShapes(np, nil)
		if err != nil {
			return
		}
		flex := shapes.Flexible
		all := flex.Expand()
		if len(all) == 0 || len(all) > MaxExpandedShapes {
			t.Fatalf("Expand listed %d sizes, want 1 to %d", len(all), MaxExpandedShapes)
		}
		smallest, ok := flex.Smallest(flex.MinCPU, flex.MinMemory)
		if !ok || all[0].Name != smallest.Name {
			t.Fatalf("Expand starts with %s, the smallest size is %s (%v)", all[0].Name, smallest.Name, ok)
		}
		largest := flex.Largest()
		found := false
		for _, s := range all {
			if s.CPU.Cmp(flex.MinCPU) < 0 || s.CPU.Cmp(flex.MaxCPU) > 0 || s.Memory.Cmp(flex.MinMemory) < 0 || s.Memory.Cmp(flex.MaxMemory) > 0 {
				t.Fatalf("size %s lies outside the range", s.Name)
			}
			found = found || s.Name == largest.Name
		}
		if !found {
			t.Fatalf("Expand leaves out the largest size %s", largest.Name)
		}
		if got, ok := flex.Smallest(largest.CPU, largest.Memory); !ok || got.Name != largest.Name {
			t.Fatalf("Smallest(largest) = %s, %v; want %s", got.Name, ok, largest.Name)
		}
		beyond := flex.MaxCPU.DeepCopy()
		beyond.Add(resource.MustParse("1m"))
		if _, ok := flex.Smallest(beyond, flex.MinMemory); ok {
			t.Fatalf("a size above the maximum cpu %s fits", flex.MaxCPU.String())
		}
		// The packer's own search over the grid.
		pool := Pool{NodePool: np, Shapes: shapes}
		ps, err := newPoolState(&pool)
		if err != nil {
			return
		}
		if _, _, ok := ps.flexFit(vec{cpu: 1, mem: 1}, -1, -1); !ok && ps.flexMax.alloc.cpu > 0 && ps.flexMax.alloc.mem > 0 {
			t.Fatalf("the largest size has room but the smallest request fits nowhere")
		}
	})
}
