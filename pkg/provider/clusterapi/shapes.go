package clusterapi

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Shapes answers the pool's fixed shapes that clusterAPI.shapes maps to
// templates, sized from the templates (see the package documentation) and
// priced by the pool.
func (p *Provider) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	if pool.Spec.Shapes.Flexible != nil {
		return nil, provider.NewTerminal(fmt.Errorf("pool %s has flexible shapes: Cluster API machines are made from templates, so a clusterapi pool lists fixed shapes named in clusterAPI.shapes", pool.Name))
	}
	var shapes []provider.Shape
	var unmapped []string
	for _, poolShape := range pool.Spec.Shapes.Fixed {
		settings, ok := p.shapeSettings(poolShape.Name)
		if !ok {
			unmapped = append(unmapped, poolShape.Name)
			continue
		}
		capacity, err := p.capacityOf(ctx, settings, poolShape)
		if err != nil {
			return nil, err
		}
		shape := provider.Shape{Name: poolShape.Name, Capacity: capacity}
		if poolShape.Price != "" {
			price, err := strconv.ParseFloat(poolShape.Price, 64)
			if err != nil {
				return nil, provider.NewTerminal(fmt.Errorf("pool %s shape %s: price %q is not a number", pool.Name, poolShape.Name, poolShape.Price))
			}
			shape.Price = price
		}
		shapes = append(shapes, shape)
	}
	if len(shapes) == 0 {
		return nil, provider.NewTerminal(fmt.Errorf("no shape of pool %s (%v) is in clusterAPI.shapes of the NodeProvider", pool.Name, unmapped))
	}
	return shapes, nil
}

// capacityOf sizes a shape: the infrastructure template's status.capacity,
// else the cluster-autoscaler capacity annotations of the
// MachineDeployment or the template, else the pool's cpu and memory.
func (p *Provider) capacityOf(ctx context.Context, settings *v1alpha1.ClusterAPIShape, poolShape v1alpha1.Shape) (corev1.ResourceList, error) {
	r, err := p.recipeOf(ctx, settings)
	if err != nil {
		return nil, err
	}
	template, err := p.template(ctx, r.infrastructure)
	if err != nil {
		return nil, err
	}
	sources := []func(corev1.ResourceName) (resource.Quantity, bool){
		func(name corev1.ResourceName) (resource.Quantity, bool) {
			value, _, _ := unstructured.NestedString(template.Object, "status", "capacity", string(name))
			return parse(value)
		},
	}
	if r.machineDeployment != nil {
		sources = append(sources, annotationSource(r.machineDeployment))
	}
	sources = append(sources, annotationSource(template), func(name corev1.ResourceName) (resource.Quantity, bool) {
		q := poolShape.CPU
		if name == corev1.ResourceMemory {
			q = poolShape.Memory
		}
		if q == nil {
			return resource.Quantity{}, false
		}
		return *q, true
	})
	capacity := corev1.ResourceList{}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		for _, source := range sources {
			if q, ok := source(name); ok && q.Sign() > 0 {
				capacity[name] = q
				break
			}
		}
		if _, ok := capacity[name]; !ok {
			return nil, provider.NewTerminal(fmt.Errorf("shape %s: no %s size: %s %s has no status.capacity.%s nor a %s annotation, and the pool gives none",
				settings.Name, name, r.infrastructure.Kind, r.infrastructure.Name, name, caAnnotation(name)))
		}
	}
	return capacity, nil
}

func annotationSource(obj *unstructured.Unstructured) func(corev1.ResourceName) (resource.Quantity, bool) {
	return func(name corev1.ResourceName) (resource.Quantity, bool) {
		return parse(obj.GetAnnotations()[caAnnotation(name)])
	}
}

func caAnnotation(name corev1.ResourceName) string {
	if name == corev1.ResourceMemory {
		return annotationCAMemory
	}
	return annotationCACPU
}

func parse(value string) (resource.Quantity, bool) {
	if value == "" {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(value)
	return q, err == nil
}
