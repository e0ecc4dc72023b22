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
const MaxFlexibleShapes = shapecatalog.MaxExpandedShapes

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
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    s.CPU.DeepCopy(),
			corev1.ResourceMemory: s.Memory.DeepCopy(),
		}
		for name, count := range s.ExtendedResources {
			capacity[name] = count.DeepCopy()
		}
		shapes = append(shapes, provider.Shape{Name: s.Name, Capacity: capacity, Price: price})
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
// package sizes claims on, named as claims name them (shapecatalog.Grid).
// Every size a claim can ask for is in the list unless the grid is thinned
// to MaxFlexibleShapes.
func flexibleShapes(f *v1alpha1.FlexibleShape) ([]provider.Shape, error) {
	grid, err := shapecatalog.GridOf(f)
	if err != nil {
		return nil, err
	}
	for _, size := range []struct {
		what  string
		q     resource.Quantity
		limit resource.Quantity
	}{
		{"minCPU", grid.MinCPU, maxCPU}, {"maxCPU", grid.MaxCPU, maxCPU}, {"cpuStep", grid.CPUStep, maxCPU},
		{"minMemory", grid.MinMemory, maxMemory}, {"maxMemory", grid.MaxMemory, maxMemory}, {"memoryStep", grid.MemoryStep, maxMemory},
	} {
		if err := machineSize(size.what, size.q, size.limit); err != nil {
			return nil, err
		}
	}
	if err := grid.Validate(); err != nil {
		return nil, err
	}
	return grid.Expand(), nil
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
