package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// maxFlexibleShapes caps the grid a flexible range is expanded into; a finer
// grid is thinned by coarsening its steps, keeping the smallest and the
// largest size.
const maxFlexibleShapes = 256

// Shapes returns the sizes a pool's VMs may have. Proxmox has no catalog:
// fixed shapes must give cpu and memory; a flexible range is expanded into
// a grid of shapes named c<cores>-m<memory> (c2-m4Gi), at most
// maxFlexibleShapes of them. CPU is rounded up to whole cores and memory to
// whole MiB, because that is what the VM gets.
func (p *Provider) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	switch {
	case len(pool.Spec.Shapes.Fixed) > 0:
		return fixedShapes(pool)
	case pool.Spec.Shapes.Flexible != nil:
		return flexibleShapes(pool.Spec.Shapes.Flexible)
	default:
		return nil, provider.NewTerminal(fmt.Errorf("NodePool %s has neither fixed nor flexible shapes", pool.Name))
	}
}

func fixedShapes(pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	out := make([]provider.Shape, 0, len(pool.Spec.Shapes.Fixed))
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.CPU == nil || s.Memory == nil {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s needs cpu and memory: Proxmox has no catalog to look its size up in", s.Name, pool.Name))
		}
		cores, memMiB := ceilDiv(s.CPU.MilliValue(), 1000), ceilDiv(s.Memory.Value(), mib)
		if cores < 1 || memMiB < 1 {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s needs positive cpu and memory", s.Name, pool.Name))
		}
		price := float64(cores)*shapecatalog.DefaultPricePerCPU + float64(memMiB)/1024*shapecatalog.DefaultPricePerGiB
		if s.Price != "" {
			var err error
			if price, err = strconv.ParseFloat(s.Price, 64); err != nil {
				return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s has price %q, which is not a number", s.Name, pool.Name, s.Price))
			}
		}
		out = append(out, provider.Shape{Name: s.Name, Capacity: shapeCapacity(cores, memMiB), Price: price})
	}
	return out, nil
}

func flexibleShapes(f *v1alpha1.FlexibleShape) ([]provider.Shape, error) {
	cpuStep := resource.MustParse("1")
	if f.CPUStep != nil {
		cpuStep = *f.CPUStep
	}
	memStep := resource.MustParse("1Gi")
	if f.MemoryStep != nil {
		memStep = *f.MemoryStep
	}
	perCPU, err := priceOr(f.PricePerCPU, shapecatalog.DefaultPricePerCPU)
	if err != nil {
		return nil, err
	}
	perGiB, err := priceOr(f.PricePerGiB, shapecatalog.DefaultPricePerGiB)
	if err != nil {
		return nil, err
	}

	// A quantity beyond int64 converts to garbage: each is checked against
	// the bounds before it is converted, and a step beyond them is as good
	// as the bound (a single step over the whole range).
	cpuBound := resource.NewMilliQuantity(maxFlexibleMilliCPU, resource.DecimalSI)
	memBound := resource.NewQuantity(maxFlexibleMemory, resource.BinarySI)
	if f.MaxCPU.Cmp(*cpuBound) > 0 || f.MaxMemory.Cmp(*memBound) > 0 {
		return nil, provider.NewTerminal(fmt.Errorf("flexible shapes reach beyond what a VM can have (at most %d CPUs and %d EiB of memory)", maxFlexibleMilliCPU/1000, maxFlexibleMemory>>60))
	}
	if cpuStep.Cmp(*cpuBound) > 0 {
		cpuStep = *cpuBound
	}
	if memStep.Cmp(*memBound) > 0 {
		memStep = *memBound
	}
	return expandFlexible(
		axis{min: f.MinCPU.MilliValue(), max: f.MaxCPU.MilliValue(), step: cpuStep.MilliValue()},
		axis{min: f.MinMemory.Value(), max: f.MaxMemory.Value(), step: memStep.Value()},
		perCPU, perGiB)
}

// Bounds of a flexible range, far beyond any Proxmox VM (which has at most
// a few hundred cores and a few TiB), so that the arithmetic on them can
// never overflow int64.
const (
	maxFlexibleMilliCPU = 1 << 40
	maxFlexibleMemory   = 1 << 62
)

// expandFlexible turns a range of milli-CPU and bytes into at most
// maxFlexibleShapes shapes; the bounds above keep every sum below the int64
// bound.
func expandFlexible(cpuAxis, memAxis axis, perCPU, perGiB float64) ([]provider.Shape, error) {
	if cpuAxis.min <= 0 || memAxis.min <= 0 || cpuAxis.step <= 0 || memAxis.step <= 0 || cpuAxis.max < cpuAxis.min || memAxis.max < memAxis.min {
		return nil, provider.NewTerminal(fmt.Errorf("flexible shapes need positive minimums and steps, and maximums no smaller than the minimums"))
	}
	if cpuAxis.max > maxFlexibleMilliCPU || memAxis.max > maxFlexibleMemory {
		return nil, provider.NewTerminal(fmt.Errorf("flexible shapes reach beyond what a VM can have (at most %d CPUs and %d EiB of memory)", maxFlexibleMilliCPU/1000, maxFlexibleMemory>>60))
	}
	cpuAxis.step = min(cpuAxis.step, cpuAxis.max)
	memAxis.step = min(memAxis.step, memAxis.max)
	// Counts are at most 2^62 each: their product is compared in float64,
	// which cannot overflow. A step doubled is below twice the range,
	// which is below 2^63.
	for float64(cpuAxis.count())*float64(memAxis.count()) > maxFlexibleShapes {
		if cpuAxis.count() >= memAxis.count() {
			cpuAxis.step *= 2
		} else {
			memAxis.step *= 2
		}
	}

	cores := roundedValues(cpuAxis, 1000)
	mems := roundedValues(memAxis, mib)
	out := make([]provider.Shape, 0, len(cores)*len(mems))
	for _, c := range cores {
		for _, m := range mems {
			capacity := shapeCapacity(c, m)
			mem := capacity[corev1.ResourceMemory]
			out = append(out, provider.Shape{
				Name:     fmt.Sprintf("c%d-m%s", c, mem.String()),
				Capacity: capacity,
				Price:    float64(c)*perCPU + float64(m)/1024*perGiB,
			})
		}
	}
	return out, nil
}

// axis is one dimension of a flexible range, in milli-CPU or bytes.
type axis struct{ min, max, step int64 }

// count is how many values the axis has: the steps from the minimum, and
// the maximum when it is off the grid.
func (a axis) count() int64 {
	n := (a.max-a.min)/a.step + 1
	if (a.max-a.min)%a.step != 0 {
		n++
	}
	return n
}

// roundedValues lists the axis's values rounded up to whole units (cores,
// MiB), without duplicates, always including the maximum.
func roundedValues(a axis, unit int64) []int64 {
	out := make([]int64, 0, min(a.count(), maxFlexibleShapes)+1)
	for v := a.min; ; v += a.step {
		out = append(out, ceilDiv(v, unit))
		if a.max-v < a.step {
			break
		}
	}
	out = append(out, ceilDiv(a.max, unit))
	slices.Sort(out)
	return slices.Compact(out)
}

func shapeCapacity(cores, memMiB int64) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(cores, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memMiB*mib, resource.BinarySI),
	}
}

func priceOr(s string, def float64) (float64, error) {
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, provider.NewTerminal(fmt.Errorf("flexible shape price %q is not a number", s))
	}
	return v, nil
}
