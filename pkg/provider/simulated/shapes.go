package simulated

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// MaxFlexibleShapes caps how many shapes a flexible range expands to. A
// finer grid is thinned, keeping the smallest and the largest size on each
// axis, so the scheduling search stays small and the biggest pod still fits.
const MaxFlexibleShapes = 256

// Prices where the pool sets none: one unit per core and a quarter unit
// per GiB of memory per hour, the same defaults as the flexible range's.
const (
	defaultPricePerCPU = 1.0
	defaultPricePerGiB = 0.25
)

// Shapes returns the pool's fixed shapes, which must state cpu and memory
// (simulated machines have no catalog to look them up in), or its flexible
// range expanded on its step grid.
func (p *Provider) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	switch {
	case pool.Spec.Shapes.Flexible != nil:
		shapes, err := flexibleShapes(pool.Spec.Shapes.Flexible)
		if err != nil {
			return nil, provider.NewTerminal(fmt.Errorf("nodepool %s: shapes.flexible: %w", pool.Name, err))
		}
		return shapes, nil
	case len(pool.Spec.Shapes.Fixed) > 0:
		shapes, err := fixedShapes(pool.Spec.Shapes.Fixed)
		if err != nil {
			return nil, provider.NewTerminal(fmt.Errorf("nodepool %s: %w", pool.Name, err))
		}
		return shapes, nil
	default:
		return nil, provider.NewTerminal(fmt.Errorf("nodepool %s lists no shapes", pool.Name))
	}
}

func fixedShapes(fixed []v1alpha1.Shape) ([]provider.Shape, error) {
	var incomplete []string
	shapes := make([]provider.Shape, 0, len(fixed))
	for _, s := range fixed {
		if s.CPU == nil || s.Memory == nil {
			incomplete = append(incomplete, s.Name)
			continue
		}
		price := sizePrice(*s.CPU, *s.Memory, defaultPricePerCPU, defaultPricePerGiB)
		if s.Price != "" {
			var err error
			if price, err = strconv.ParseFloat(s.Price, 64); err != nil {
				return nil, fmt.Errorf("shape %s: price %q: %w", s.Name, s.Price, err)
			}
		}
		shapes = append(shapes, provider.Shape{
			Name: s.Name,
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    s.CPU.DeepCopy(),
				corev1.ResourceMemory: s.Memory.DeepCopy(),
			},
			Price: price,
		})
	}
	if len(incomplete) > 0 {
		return nil, fmt.Errorf("simulated shapes need cpu and memory, which shapes.fixed %s lacks", strings.Join(incomplete, ", "))
	}
	return shapes, nil
}

func flexibleShapes(f *v1alpha1.FlexibleShape) ([]provider.Shape, error) {
	cpuStep := resource.MustParse("1")
	if f.CPUStep != nil {
		cpuStep = *f.CPUStep
	}
	memoryStep := resource.MustParse("1Gi")
	if f.MemoryStep != nil {
		memoryStep = *f.MemoryStep
	}
	perCPU, err := parsePrice(f.PricePerCPU, defaultPricePerCPU)
	if err != nil {
		return nil, fmt.Errorf("pricePerCPU: %w", err)
	}
	perGiB, err := parsePrice(f.PricePerGiB, defaultPricePerGiB)
	if err != nil {
		return nil, fmt.Errorf("pricePerGiB: %w", err)
	}
	// CPU in millicores and memory in bytes, so both are whole numbers.
	cpus, err := newGrid(f.MinCPU.MilliValue(), f.MaxCPU.MilliValue(), cpuStep.MilliValue())
	if err != nil {
		return nil, fmt.Errorf("cpu %s to %s in steps of %s: %w", f.MinCPU.String(), f.MaxCPU.String(), cpuStep.String(), err)
	}
	memories, err := newGrid(f.MinMemory.Value(), f.MaxMemory.Value(), memoryStep.Value())
	if err != nil {
		return nil, fmt.Errorf("memory %s to %s in steps of %s: %w", f.MinMemory.String(), f.MaxMemory.String(), memoryStep.String(), err)
	}
	for cpus.size()*memories.size() > MaxFlexibleShapes {
		if cpus.size() >= memories.size() {
			cpus.stride *= 2
		} else {
			memories.stride *= 2
		}
	}
	var shapes []provider.Shape
	for _, milli := range cpus.points() {
		for _, bytes := range memories.points() {
			cpu := *resource.NewMilliQuantity(milli, resource.DecimalSI)
			memory := *resource.NewQuantity(bytes, resource.BinarySI)
			shapes = append(shapes, provider.Shape{
				Name: fmt.Sprintf("flex-%scpu-%s", cpu.String(), memory.String()),
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU:    cpu,
					corev1.ResourceMemory: memory,
				},
				Price: sizePrice(cpu, memory, perCPU, perGiB),
			})
		}
	}
	return shapes, nil
}

// grid is the multiples of step from min (rounded up) to max, of which every
// stride-th is used, and always the last.
type grid struct {
	first, step, n, stride int64
}

func newGrid(minimum, maximum, step int64) (grid, error) {
	if step <= 0 {
		return grid{}, fmt.Errorf("the step must be greater than zero")
	}
	first := (minimum + step - 1) / step * step
	if first <= 0 {
		first = step
	}
	if first > maximum {
		return grid{}, fmt.Errorf("no size on the step grid lies in the range")
	}
	return grid{first: first, step: step, n: (maximum-first)/step + 1, stride: 1}, nil
}

// size is how many points points returns.
func (g grid) size() int64 {
	size := (g.n-1)/g.stride + 1
	if (g.n-1)%g.stride != 0 {
		size++ // the last point, added to the thinned ones
	}
	return size
}

func (g grid) points() []int64 {
	points := make([]int64, 0, g.size())
	for i := int64(0); i < g.n; i += g.stride {
		points = append(points, g.first+i*g.step)
	}
	if last := g.first + (g.n-1)*g.step; points[len(points)-1] != last {
		points = append(points, last)
	}
	return points
}

func parsePrice(s string, fallback float64) (float64, error) {
	if s == "" {
		return fallback, nil
	}
	return strconv.ParseFloat(s, 64)
}

// sizePrice is the hourly price of a size at the given unit prices.
func sizePrice(cpu, memory resource.Quantity, perCPU, perGiB float64) float64 {
	return perCPU*float64(cpu.MilliValue())/1000 + perGiB*float64(memory.Value())/float64(1<<30)
}
