// Package poolclaims is what every writer of claims shares about a pool's
// claims: how a new one looks (provisioning, disruption's replacements,
// repair and the externalgrpc shim all make them here, so a claim looks the
// same whoever decided it) and what a pool's claims use against its limits.
package poolclaims

import (
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// New builds, without writing it, the claim for one new node of pool
// in shape, sized for requests and bound by requirements (both may be
// nil): named <pool>-<random>, carrying the pool's labels, the nodepool
// and nodeprovider labels, the template-hash annotation and the pool's
// taints. Provisioning and the externalgrpc shim write claims from it, so
// a claim looks the same whoever decided it.
func New(pool *v1alpha1.NodePool, shape scheduling.Shape, requests corev1.ResourceList, requirements []corev1.NodeSelectorRequirement) *v1alpha1.NodeClaim {
	claimShape := v1alpha1.ClaimShape{Name: shape.Name, CPU: shape.CPU, Memory: shape.Memory, ExtendedResources: shape.ExtendedResources.DeepCopy()}
	if shape.Price > 0 && knownPrice(pool, shape) {
		claimShape.Price = strconv.FormatFloat(shape.Price, 'f', -1, 64)
	}
	labels := map[string]string{}
	for key, value := range pool.Spec.Template.Labels {
		labels[key] = value
	}
	labels[v1alpha1.LabelNodePool] = pool.Name
	labels[v1alpha1.LabelNodeProvider] = pool.Spec.ProviderRef.Name
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: pool.Name + "-",
			Labels:       labels,
			Annotations:  map[string]string{v1alpha1.AnnotationTemplateHash: pool.TemplateHash(claimShape)},
		},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef:  v1alpha1.NodePoolReference{Name: pool.Name},
			Shape:        claimShape,
			Requirements: v1alpha1.NodeClaimRequirements{Resources: requests, NodeSelector: requirements},
			// Copies: the create decodes the API server's answer into the
			// claim, and the pool may be the cache's.
			Taints:        slices.Clone(pool.Spec.Template.Taints),
			StartupTaints: slices.Clone(pool.Spec.Template.StartupTaints),
		},
	}
}

// knownPrice says whether a shape's price was named by somebody: the pool
// (a fixed shape's price, a flexible range's per-unit prices) or the
// provider's catalog. An unpriced shape is ranked by the scheduling
// package with a price derived from its size (one per cpu, a quarter per
// GiB): that orders shapes, it is no amount of money, so it goes on no
// claim, into no cost metric and no PRICE/H column. A catalog price equal
// to that rank by chance is taken for one.
func knownPrice(pool *v1alpha1.NodePool, shape scheduling.Shape) bool {
	if f := pool.Spec.Shapes.Flexible; f != nil {
		return f.PricePerCPU != "" || f.PricePerGiB != ""
	}
	for _, fixed := range pool.Spec.Shapes.Fixed {
		if fixed.Name == shape.Name && fixed.Price != "" {
			return true
		}
	}
	rank := shapecatalog.DefaultSizePrice(shape.CPU, shape.Memory)
	return math.Abs(shape.Price-rank) > 1e-9*max(1, rank)
}

// InUse counts the claims that are not being deleted and totals their
// capacity (the shape's, until the machine reports its own). A claim whose
// machine sleeps holds no capacity: it counts against no limit and is none
// of the pool's nodes until it is woken, when it counts like a new node.
func InUse(claims []v1alpha1.NodeClaim) (int, corev1.ResourceList) {
	pointers := make([]*v1alpha1.NodeClaim, len(claims))
	for i := range claims {
		pointers[i] = &claims[i]
	}
	return InUseOf(pointers)
}

// InUseOf is InUse of claims held by pointer, such as the cache's own.
func InUseOf(claims []*v1alpha1.NodeClaim) (int, corev1.ResourceList) {
	cpu, memory := resource.Quantity{}, resource.Quantity{}
	nodes := 0
	for _, claim := range claims {
		if !claim.DeletionTimestamp.IsZero() || claim.Asleep() {
			continue
		}
		nodes++
		if capacity, ok := claim.Status.Capacity[corev1.ResourceCPU]; ok {
			cpu.Add(capacity)
		} else {
			cpu.Add(claim.Spec.Shape.CPU)
		}
		if capacity, ok := claim.Status.Capacity[corev1.ResourceMemory]; ok {
			memory.Add(capacity)
		} else {
			memory.Add(claim.Spec.Shape.Memory)
		}
	}
	return nodes, corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory}
}
