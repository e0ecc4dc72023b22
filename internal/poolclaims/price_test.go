package poolclaims

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/pkg/provider"
)

// An unpriced shape (cloudscale flavors without a price in the pool) is
// ranked by size for the cheapest-first choice, and its claim carries no
// price, so PRICE/H and the hourly cost metric show no money nobody named.
func TestAClaimOfAnUnpricedShapeCarriesNoPrice(t *testing.T) {
	four, eight := resource.MustParse("4"), resource.MustParse("8Gi")
	for _, tc := range []struct {
		name      string
		pool      *v1alpha1.NodePool
		offered   []provider.Shape
		wantPrice string
	}{
		{"unpriced flavor of the catalog", poolOf(v1alpha1.Shape{Name: "flex-4-8"}), catalog(0), ""},
		{"flavor the pool prices", poolOf(v1alpha1.Shape{Name: "flex-4-8", Price: "0.12"}), catalog(0), "0.12"},
		{"shape the provider prices", poolOf(v1alpha1.Shape{Name: "flex-4-8"}), catalog(0.3), "0.3"},
		{"unpriced shape of the pool", poolOf(v1alpha1.Shape{Name: "flex-4-8", CPU: &four, Memory: &eight}), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shapes, err := scheduling.PoolShapes(tc.pool, tc.offered)
			if err != nil {
				t.Fatal(err)
			}
			if shapes.Fixed[0].Price <= 0 {
				t.Fatalf("shape price for ranking = %v, want a positive rank", shapes.Fixed[0].Price)
			}
			claim := New(tc.pool, shapes.Fixed[0], nil, nil)
			if claim.Spec.Shape.Price != tc.wantPrice {
				t.Fatalf("claim price = %q, want %q", claim.Spec.Shape.Price, tc.wantPrice)
			}
		})
	}
}

func poolOf(shape v1alpha1.Shape) *v1alpha1.NodePool {
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec:       v1alpha1.NodePoolSpec{ProviderRef: v1alpha1.ProviderReference{Name: "cloudscale"}, Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{shape}}},
	}
}

// catalog is a provider's answer for flex-4-8 (4 vCPUs, 8 GiB) at a price.
func catalog(price float64) []provider.Shape {
	return []provider.Shape{{Name: "flex-4-8", Price: price, Capacity: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
	}}}
}
