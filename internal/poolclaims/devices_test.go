package poolclaims

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// A claim of a shape with devices carries them, for the provider that
// attaches them and the node that advertises them, and its template hash
// covers them; the claim's list is its own copy.
func TestAClaimCarriesItsShapesDevices(t *testing.T) {
	four, sixteen := resource.MustParse("4"), resource.MustParse("16Gi")
	pool := poolOf(v1alpha1.Shape{Name: "g1", CPU: &four, Memory: &sixteen, ExtendedResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}})
	shapes, err := scheduling.PoolShapes(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := New(pool, shapes.Fixed[0], nil, nil)
	if got := claim.Spec.Shape.ExtendedResources.Name("nvidia.com/gpu", resource.DecimalSI).Value(); got != 1 {
		t.Fatalf("the claim's shape has %d GPUs (%v), want 1", got, claim.Spec.Shape.ExtendedResources)
	}
	if claim.Annotations[v1alpha1.AnnotationTemplateHash] != pool.TemplateHash(claim.Spec.Shape) {
		t.Error("the template hash is not of the claim's shape")
	}
	without := claim.Spec.Shape
	without.ExtendedResources = nil
	if pool.TemplateHash(without) == claim.Annotations[v1alpha1.AnnotationTemplateHash] {
		t.Error("the template hash does not cover the devices")
	}
	claim.Spec.Shape.ExtendedResources["nvidia.com/gpu"] = resource.MustParse("3")
	if shapes.Fixed[0].ExtendedResources.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 1 {
		t.Error("the claim shares its list of devices with the pool's shape")
	}
}
