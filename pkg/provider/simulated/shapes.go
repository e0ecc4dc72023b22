package simulated

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// MaxFlexibleShapes caps how many shapes a flexible range expands to. A
// finer grid is thinned, keeping the smallest and the largest size on each
// axis, so the scheduling search stays small and the biggest pod still fits.
const MaxFlexibleShapes = 256

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
		if err := machineSize("cpu", *s.CPU, maxCPU); err != nil {
			return nil, fmt.Errorf("shape %s: %w", s.Name, err)
		}
		if err := machineSize("memory", *s.Memory, maxMemory); err != nil {
			return nil, fmt.Errorf("shape %s: %w", s.Name, err)
		}
		price := shapecatalog.DefaultSizePrice(*s.CPU, *s.Memory)
		if s.Price != "" {
			var err error
			if price, err = parsePrice(s.Price, 0); err != nil {
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

// The largest machine the API admits; a pool stored before the API said so
// is refused here instead of overflowing the grid arithmetic.
var (
	maxCPU    = resource.MustParse(v1alpha1.MaxMachineCPU)
	maxMemory = resource.MustParse(v1alpha1.MaxMachineMemory)
)

// machineSize checks that q is a size a machine can have: above zero and
// at most limit.
func machineSize(what string, q, limit resource.Quantity) error {
	// The float first: comparing quantities of exponents like 1e33333336
	// or 1e-33333336 exactly takes seconds, their floats are +Inf and 0.
	approximate := q.AsApproximateFloat64()
	if !(approximate > 0) {
		return fmt.Errorf("%s %s must be greater than zero", what, q.String())
	}
	if approximate > 2*limit.AsApproximateFloat64() || q.Cmp(limit) > 0 {
		return fmt.Errorf("%s %s is above the %s a machine may have", what, q.String(), limit.String())
	}
	return nil
}

// flexibleShapes expands a flexible range on the grid the scheduling
// package sizes claims on, named as claims name them: each axis's minimum,
// then every multiple of the step above it up to the maximum. Every size a claim can ask for is in
// the list unless the grid is thinned to MaxFlexibleShapes.
func flexibleShapes(f *v1alpha1.FlexibleShape) ([]provider.Shape, error) {
	cpuStep := resource.MustParse("1")
	if f.CPUStep != nil {
		cpuStep = *f.CPUStep
	}
	memoryStep := resource.MustParse("1Gi")
	if f.MemoryStep != nil {
		memoryStep = *f.MemoryStep
	}
	perCPU, err := parsePrice(f.PricePerCPU, shapecatalog.DefaultPricePerCPU)
	if err != nil {
		return nil, fmt.Errorf("pricePerCPU: %w", err)
	}
	perGiB, err := parsePrice(f.PricePerGiB, shapecatalog.DefaultPricePerGiB)
	if err != nil {
		return nil, fmt.Errorf("pricePerGiB: %w", err)
	}
	for _, size := range []struct {
		what  string
		q     resource.Quantity
		limit resource.Quantity
	}{
		{"minCPU", f.MinCPU, maxCPU}, {"maxCPU", f.MaxCPU, maxCPU}, {"cpuStep", cpuStep, maxCPU},
		{"minMemory", f.MinMemory, maxMemory}, {"maxMemory", f.MaxMemory, maxMemory}, {"memoryStep", memoryStep, maxMemory},
	} {
		if err := machineSize(size.what, size.q, size.limit); err != nil {
			return nil, err
		}
	}
	// CPU in millicores and memory in bytes, so both are whole numbers;
	// within the bounds just checked both fit an int64 many times over.
	// Minimums round up and maximums down, so every size lies in the range.
	cpus, err := newGrid(f.MinCPU.MilliValue(), floorMilli(f.MaxCPU), cpuStep.MilliValue())
	if err != nil {
		return nil, fmt.Errorf("cpu %s to %s in steps of %s: %w", f.MinCPU.String(), f.MaxCPU.String(), cpuStep.String(), err)
	}
	memories, err := newGrid(f.MinMemory.Value(), floorValue(f.MaxMemory), memoryStep.Value())
	if err != nil {
		return nil, fmt.Errorf("memory %s to %s in steps of %s: %w", f.MinMemory.String(), f.MaxMemory.String(), memoryStep.String(), err)
	}
	// a*b > MaxFlexibleShapes, without the product: a fine memory grid can
	// have 10^13 points.
	for cpus.size() > MaxFlexibleShapes/memories.size() {
		if cpus.size() >= memories.size() {
			cpus.stride *= 2
		} else {
			memories.stride *= 2
		}
	}
	cpuPoints, memoryPoints := cpus.points(), memories.points()
	shapes := make([]provider.Shape, 0, len(cpuPoints)*len(memoryPoints))
	for _, milli := range cpuPoints {
		for _, bytes := range memoryPoints {
			cpu := *resource.NewMilliQuantity(milli, resource.DecimalSI)
			memory := *resource.NewQuantity(bytes, resource.BinarySI)
			shapes = append(shapes, provider.Shape{
				Name: shapecatalog.FlexibleName(cpu, memory),
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU:    cpu,
					corev1.ResourceMemory: memory,
				},
				Price: shapecatalog.SizePrice(cpu, memory, perCPU, perGiB),
			})
		}
	}
	return shapes, nil
}

// floorMilli is q in millicores, rounded down (MilliValue rounds up).
func floorMilli(q resource.Quantity) int64 {
	v := q.MilliValue()
	if resource.NewMilliQuantity(v, q.Format).Cmp(q) > 0 {
		v--
	}
	return v
}

// floorValue is q in whole units, rounded down (Value rounds up).
func floorValue(q resource.Quantity) int64 {
	v := q.Value()
	if resource.NewQuantity(v, q.Format).Cmp(q) > 0 {
		v--
	}
	return v
}

// grid is one axis of a flexible range: point 0 is the minimum, point i>0
// the i-th multiple of step above it; of the n points every stride-th is
// used, and always the last.
type grid struct {
	minimum, step, n, stride int64
}

func newGrid(minimum, maximum, step int64) (grid, error) {
	switch {
	case step <= 0:
		return grid{}, fmt.Errorf("the step must be greater than zero")
	case minimum <= 0:
		return grid{}, fmt.Errorf("the minimum must be greater than zero")
	case minimum > maximum:
		return grid{}, fmt.Errorf("the minimum exceeds the maximum, in whole millicores or bytes")
	}
	// Divisions first: no sum or product here can overflow.
	return grid{minimum: minimum, step: step, n: maximum/step - minimum/step + 1, stride: 1}, nil
}

// at is the size of point i.
func (g grid) at(i int64) int64 {
	if i == 0 {
		return g.minimum
	}
	return (g.minimum/g.step + i) * g.step
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
		points = append(points, g.at(i))
	}
	if last := g.at(g.n - 1); points[len(points)-1] != last {
		points = append(points, last)
	}
	return points
}

// parsePrice reads an hourly price, fallback when unset. The API admits
// only plain decimals; a price must be a finite number not below zero.
func parsePrice(s string, fallback float64) (float64, error) {
	if s == "" {
		return fallback, nil
	}
	price, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(price) || math.IsInf(price, 0) || price < 0 {
		return 0, fmt.Errorf("%q is not a price", s)
	}
	return price, nil
}
