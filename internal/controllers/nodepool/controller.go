// Package nodepool keeps each NodePool's status current: how many nodes it
// holds, their resources in total, and whether its provider can make its
// shapes (ProviderReady, and from it Ready).
package nodepool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/poolusability"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/retry"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/statusapply"
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

// TemplateChecker finds what in a pool's template can never make a node.
type TemplateChecker interface {
	Check(ctx context.Context, pool *v1alpha1.NodePool, shapes scheduling.Shapes) error
}

// providerCallTimeout bounds each provider call of a status check.
const providerCallTimeout = 10 * time.Second

// Controller reconciles NodePool status.
type Controller struct {
	Kube      client.Client
	Providers ProviderResolver
	// Pools resolves the pool's shapes, shared with provisioning and the
	// externalgrpc shim; nil builds one for this controller from Providers
	// and Kube.
	Pools *poolusability.Pools
	// Templates checks the pool's template; nil skips the check.
	Templates TemplateChecker
	// Recorder tells, on the pool, when it stops or starts being Ready.
	Recorder events.EventRecorder

	failures retry.Backoff

	poolsOnce sync.Once
}

// usability is the Pools the controller reads the pools' shapes from.
func (c *Controller) usability() *poolusability.Pools {
	c.poolsOnce.Do(func() {
		if c.Pools == nil {
			c.Pools = &poolusability.Pools{Providers: c.Providers, Kube: c.Kube}
		}
	})
	return c.Pools
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
		if apierrors.IsNotFound(err) {
			metrics.ForgetPool(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := pool.DeepCopy()

	// Every change of a claim brings the pool here, and the claims are only
	// counted: the cache's own objects, not a copy of a thousand claims.
	var claims v1alpha1.NodeClaimList
	if err := c.Kube.List(ctx, &claims, client.MatchingFields{index.NodeClaimNodePool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing claims of pool %s: %w", pool.Name, err)
	}
	nodes, resources := poolclaims.InUse(claims.Items)
	pool.Status.Nodes = int32(nodes)
	pool.Status.Resources = resources
	metrics.NodePoolNodes.WithLabelValues(pool.Name).Set(float64(nodes))
	metrics.ObservePoolClaims(pool.Name, claims.Items)
	metrics.ObservePoolLimits(pool.Name, pool.Spec.Limits, nodes, resources)

	callCtx, cancel := context.WithTimeout(ctx, providerCallTimeout)
	defer cancel()
	status, reason, message, offer := c.providerReadiness(callCtx, pool)
	setCondition(pool, v1alpha1.ConditionProviderReady, status, reason, message)
	if status == metav1.ConditionTrue {
		status, reason, message = c.templateValidity(callCtx, pool, offer)
	}
	wasReady := meta.FindStatusCondition(stored.Status.Conditions, v1alpha1.ConditionReady)
	setCondition(pool, v1alpha1.ConditionReady, status, reason, message)

	if !equality.Semantic.DeepEqual(stored.Status, pool.Status) {
		if err := c.applyStatus(ctx, pool); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		c.tell(pool, wasReady, status, reason, message)
	}
	if status != metav1.ConditionTrue {
		// Looked at again on a backoff of its own, and at once when the
		// pool, its claims or its provider change.
		return reconcile.Result{RequeueAfter: c.failures.Failed(pool.Name, pool.Generation, nil)}, nil
	}
	c.failures.Succeeded(pool.Name)
	return reconcile.Result{RequeueAfter: shapesRefresh}, nil
}

// ownedConditions are the pool conditions this controller writes. Repair
// (RepairAllowed) and the external scaler's poller (ExternalHeadroom)
// write others into the same list.
var ownedConditions = map[string]bool{v1alpha1.ConditionReady: true, v1alpha1.ConditionProviderReady: true}

// applyStatus writes the status fields this controller owns (the counts
// and its conditions), leaving the other writers' conditions alone.
func (c *Controller) applyStatus(ctx context.Context, pool *v1alpha1.NodePool) error {
	owned := v1alpha1.NodePoolStatus{Nodes: pool.Status.Nodes, Resources: pool.Status.Resources}
	for _, condition := range pool.Status.Conditions {
		if ownedConditions[condition.Type] {
			owned.Conditions = append(owned.Conditions, condition)
		}
	}
	_, err := statusapply.Apply(ctx, c.Kube, "NodePool", pool.Name, &owned, Name)
	return err
}

// tell records an event when the pool's Ready condition changes reason.
func (c *Controller) tell(pool *v1alpha1.NodePool, was *metav1.Condition, status metav1.ConditionStatus, reason, message string) {
	if c.Recorder == nil || (was != nil && was.Status == status && was.Reason == reason) {
		return
	}
	if status == metav1.ConditionTrue {
		if was != nil {
			c.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, reason, "Check", "%s", message)
		}
		return
	}
	c.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, reason, "Check", "%s", message)
}

func (c *Controller) providerReadiness(ctx context.Context, pool *v1alpha1.NodePool) (metav1.ConditionStatus, string, string, poolusability.Offer) {
	offer, err := c.usability().Offer(ctx, pool, poolusability.Read{})
	var (
		notFound *providerresolver.ProviderNotFoundError
		failed   *poolusability.CallError
	)
	switch {
	case errors.As(err, &failed) && failed.Step == poolusability.ListingZones:
		// The zones are provisioning's; the shapes are what counts here.
	case errors.As(err, &failed) && failed.Step == poolusability.ResolvingProvider:
		switch {
		case errors.As(err, &notFound):
			return metav1.ConditionFalse, v1alpha1.ReasonProviderNotFound, err.Error(), offer
		case providerresolver.IsUnreachable(err):
			return metav1.ConditionFalse, v1alpha1.ReasonUnreachable, err.Error(), offer
		default:
			return metav1.ConditionFalse, v1alpha1.ReasonProviderUnavailable, err.Error(), offer
		}
	case errors.As(err, &failed) && providerresolver.IsUnreachable(err):
		return metav1.ConditionFalse, v1alpha1.ReasonUnreachable, err.Error(), offer
	case errors.As(err, &failed):
		return metav1.ConditionFalse, v1alpha1.ReasonShapesUnavailable, failed.Err.Error(), offer
	case err != nil:
		return metav1.ConditionFalse, v1alpha1.ReasonShapesUnavailable, err.Error(), offer
	}
	if len(offer.Offered) == 0 {
		return metav1.ConditionFalse, v1alpha1.ReasonNoShapes, "the provider offers none of the pool's shapes", offer
	}
	return metav1.ConditionTrue, v1alpha1.ReasonReady, fmt.Sprintf("provider %s offers %d shapes", pool.Spec.ProviderRef.Name, len(offer.Offered)), offer
}

// templateValidity says whether the pool's template can make nodes of the
// shapes its provider offers.
func (c *Controller) templateValidity(ctx context.Context, pool *v1alpha1.NodePool, offer poolusability.Offer) (metav1.ConditionStatus, string, string) {
	if message := c.unusedBootstrap(ctx, pool); message != "" {
		return metav1.ConditionFalse, v1alpha1.ReasonTemplateInvalid, message
	}
	err := offer.ShapesErr
	if err == nil && c.Templates != nil {
		err = c.Templates.Check(ctx, pool, offer.Shapes)
	}
	if err != nil {
		return metav1.ConditionFalse, v1alpha1.ReasonTemplateInvalid, err.Error()
	}
	return metav1.ConditionTrue, v1alpha1.ReasonReady, fmt.Sprintf("provider %s offers %d shapes", pool.Spec.ProviderRef.Name, len(offer.Offered))
}

// unusedBootstrap says why the pool's template.bootstrap would be ignored,
// if it would: a join the user wrote and that never runs is worse than a
// pool that says so.
func (c *Controller) unusedBootstrap(ctx context.Context, pool *v1alpha1.NodePool) string {
	if pool.Spec.Template.Bootstrap == nil {
		return ""
	}
	machines, err := c.Providers.ForProviderName(ctx, pool.Spec.ProviderRef.Name)
	if err != nil {
		return ""
	}
	joiner, ok := machines.(provider.OwnJoiner)
	if !ok || joiner.OwnJoin() == "" {
		return ""
	}
	return fmt.Sprintf("template.bootstrap is set, but the machines of NodeProvider %s join through %s; remove template.bootstrap and configure the join there", pool.Spec.ProviderRef.Name, joiner.OwnJoin())
}

func setCondition(pool *v1alpha1.NodePool, conditionType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: pool.Generation,
	})
}
