package externalgrpc

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/poolusability"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// A node group of an inventory's shape (a bare-metal rack's servers)
// grows to no more than the servers free, within the pool's limit; a
// cloud's shape beside it to the limit alone.
func TestAnInventoryGroupsMaximumIsItsFreeMachines(t *testing.T) {
	limit := int32(10)
	cpu, memory := resource.MustParse("8"), resource.MustParse("32Gi")
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "metal"},
		Spec: v1alpha1.NodePoolSpec{
			Limits: &v1alpha1.Limits{Nodes: &limit},
			Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "r640", CPU: &cpu, Memory: &memory}, {Name: "cloud", CPU: &cpu, Memory: &memory}}},
		},
	}
	capacity := func() corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory}
	}
	offered := []shapecatalog.Shape{
		{Name: "r640", Capacity: capacity(), Inventory: true, Available: 2},
		{Name: "cloud", Capacity: capacity()},
	}
	resolved, err := scheduling.PoolShapes(pool, offered)
	if err != nil {
		t.Fatal(err)
	}
	shapes, err := served(pool, poolusability.Offer{Offered: offered, Shapes: resolved})
	if err != nil {
		t.Fatal(err)
	}
	usage := poolUsage{nodes: 3, byShape: map[string]int32{"r640": 3}}
	for _, tc := range []struct {
		shape string
		want  int32
	}{{"r640", 3 + 2}, {"cloud", 10 - 3}} {
		shape, _ := shapes.shape(tc.shape)
		got := (&group{pool: pool, shape: shape, shapes: shapes}).message(usage).GetMaxSize()
		if got != tc.want {
			t.Errorf("group %s: max size %d, want %d", tc.shape, got, tc.want)
		}
	}
}
