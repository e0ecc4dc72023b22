// Package nodepool keeps each NodePool's status current: how many nodes it
// holds, their resources in total, and whether its provider can make its
// shapes (ProviderReady, and from it Ready).
package nodepool

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/index"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Name of the controller in logs and metrics.
const Name = "nodepool.status"

// Shapes can change behind our back (a flavor retired), so they are looked
// at again now and then even when nothing in the cluster changed.
const shapesRefresh = 5 * time.Minute

// ProviderResolver finds a NodeProvider's provider.
type ProviderResolver interface {
	ForProviderName(ctx context.Context, name string) (provider.Provider, error)
}

// Controller reconciles NodePool status.
type Controller struct {
	Kube      client.Client
	Providers ProviderResolver
}

// SetupWithManager registers the controller; claims and providers wake
// their pools.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&v1alpha1.NodePool{}).
		Watches(&v1alpha1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*v1alpha1.NodeClaim).Spec.NodePoolRef.Name}}}
		})).
		Watches(&v1alpha1.NodeProvider{}, handler.EnqueueRequestsFromMapFunc(c.poolsOfProvider)).
		Complete(c)
}

func (c *Controller) poolsOfProvider(ctx context.Context, o client.Object) []reconcile.Request {
	var pools v1alpha1.NodePoolList
	if err := c.Kube.List(ctx, &pools); err != nil {
		return nil
	}
	var requests []reconcile.Request
	for _, pool := range pools.Items {
		if pool.Spec.ProviderRef.Name == o.GetName() {
			requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Name: pool.Name}})
		}
	}
	return requests
}

// Reconcile writes one pool's status.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pool := &v1alpha1.NodePool{}
	if err := c.Kube.Get(ctx, req.NamespacedName, pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := pool.DeepCopy()

	var claims v1alpha1.NodeClaimList
	if err := c.Kube.List(ctx, &claims, client.MatchingFields{index.NodeClaimNodePool: pool.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing claims of pool %s: %w", pool.Name, err)
	}
	nodes, resources := InUse(claims.Items)
	pool.Status.Nodes = int32(nodes)
	pool.Status.Resources = resources
	metrics.NodePoolNodes.WithLabelValues(pool.Name).Set(float64(nodes))

	status, reason, message := c.providerReadiness(ctx, pool)
	setCondition(pool, v1alpha1.ConditionProviderReady, status, reason, message)
	setCondition(pool, v1alpha1.ConditionReady, status, reason, message)

	if !equality.Semantic.DeepEqual(stored.Status, pool.Status) {
		// No lock: this controller is the status's only writer and
		// recomputes all of it each time, so a write from a stale copy is
		// corrected by the next reconcile instead of conflicting.
		if err := c.Kube.Status().Patch(ctx, pool, client.MergeFrom(stored)); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{RequeueAfter: shapesRefresh}, nil
}

func (c *Controller) providerReadiness(ctx context.Context, pool *v1alpha1.NodePool) (metav1.ConditionStatus, string, string) {
	machines, err := c.Providers.ForProviderName(ctx, pool.Spec.ProviderRef.Name)
	if err != nil {
		return metav1.ConditionFalse, "ProviderUnavailable", err.Error()
	}
	shapes, err := machines.Shapes(ctx, pool)
	if err != nil {
		return metav1.ConditionFalse, "ShapesUnavailable", err.Error()
	}
	if len(shapes) == 0 {
		return metav1.ConditionFalse, "NoShapes", "the provider offers none of the pool's shapes"
	}
	return metav1.ConditionTrue, "Ready", fmt.Sprintf("provider %s offers %d shapes", pool.Spec.ProviderRef.Name, len(shapes))
}

// InUse counts the claims that are not being deleted and totals their
// capacity (the shape's, until the machine reports its own).
func InUse(claims []v1alpha1.NodeClaim) (int, corev1.ResourceList) {
	cpu, memory := resource.Quantity{}, resource.Quantity{}
	nodes := 0
	for i := range claims {
		claim := &claims[i]
		if !claim.DeletionTimestamp.IsZero() {
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

func setCondition(pool *v1alpha1.NodePool, conditionType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: pool.Generation,
	})
}
