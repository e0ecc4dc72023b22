package proxmox

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Shapes returns the sizes a pool's VMs may have. Proxmox has no catalog:
// fixed shapes must give cpu and memory; a flexible range is expanded on
// the grid claims are sized on (shapecatalog.Grid), at most
// shapecatalog.MaxExpandedShapes sizes, each rounded up to whole cores and
// MiB, because that is what the VM gets, and named by
// shapecatalog.FlexibleName of the rounded size (flex-2-4Gi). A fixed
// shape's extended resources are its VM's PCI devices and are in its
// capacity; a resource that spec.proxmox.pciDevices does not map is an
// error that names the shape, since no VM could have it.
func (p *Provider) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	switch {
	case len(pool.Spec.Shapes.Fixed) > 0:
		return p.fixedShapes(pool)
	case pool.Spec.Shapes.Flexible != nil:
		return flexibleShapes(pool.Spec.Shapes.Flexible)
	default:
		return nil, provider.NewTerminal(fmt.Errorf("NodePool %s has neither fixed nor flexible shapes", pool.Name))
	}
}

func (p *Provider) fixedShapes(pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	out := make([]provider.Shape, 0, len(pool.Spec.Shapes.Fixed))
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.CPU == nil || s.Memory == nil {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s needs cpu and memory: Proxmox has no catalog to look its size up in", s.Name, pool.Name))
		}
		cores, memMiB := ceilDiv(s.CPU.MilliValue(), 1000), ceilDiv(s.Memory.Value(), mib)
		if cores < 1 || memMiB < 1 {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s needs positive cpu and memory", s.Name, pool.Name))
		}
		devices, err := p.settings.devicesOf(s.ExtendedResources)
		if err != nil {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s: %w", s.Name, pool.Name, err))
		}
		capacity := shapeCapacity(cores, memMiB)
		price := shapecatalog.DefaultSizePrice(capacity[corev1.ResourceCPU], capacity[corev1.ResourceMemory])
		capacity = withDevices(capacity, devices)
		if s.Price != "" {
			var err error
			if price, err = strconv.ParseFloat(s.Price, 64); err != nil {
				return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s has price %q, which is not a number", s.Name, pool.Name, s.Price))
			}
		}
		out = append(out, provider.Shape{Name: s.Name, Capacity: capacity, Price: price})
	}
	return out, nil
}

func flexibleShapes(f *v1alpha1.FlexibleShape) ([]provider.Shape, error) {
	grid, err := shapecatalog.GridOf(f)
	if err != nil {
		return nil, provider.NewTerminal(fmt.Errorf("flexible shapes: %w", err))
	}
	if err := grid.Validate(); err != nil {
		return nil, provider.NewTerminal(fmt.Errorf("flexible shapes: %w", err))
	}
	return grid.ExpandRounded(shapecatalog.Rounding{CPU: 1000, Memory: mib}), nil
}

func shapeCapacity(cores, memMiB int64) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(cores, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memMiB*mib, resource.BinarySI),
	}
}
