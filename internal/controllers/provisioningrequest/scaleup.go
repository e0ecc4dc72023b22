package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
)

// scaleUp serves a best-effort-atomic-scale-up request: it simulates all
// the request's pods together and buys every new node they need at once,
// within the pools' limits, or none. Once bought, it follows the claims:
// all Ready is Provisioned; one that cannot launch or does not register
// fails the request and takes the others with it.
func (c *Controller) scaleUp(ctx context.Context, request *autoscalingv1.ProvisioningRequest, pods requestPods) (reconcile.Result, error) {
	claims, err := c.claimsOf(ctx, request)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(claims) > 0 {
		return c.followClaims(ctx, request, claims)
	}
	if over, err := c.overQuota(ctx, request, pods); err != nil || over {
		return reconcile.Result{RequeueAfter: c.Recheck}, err
	}
	var (
		placed placement
		bought []string
	)
	// No provisioning round decides between this simulation and the
	// claims it buys: the round would not see them yet, and a pool's
	// limits would hold for each of the two alone.
	err = c.Rounds.Exclusively(func() error {
		var err error
		if placed, err = c.place(ctx, request, pods, true); err != nil || !placed.fits() {
			return err
		}
		claimOf, err := c.buy(ctx, request, placed)
		if err != nil {
			return err
		}
		for _, name := range claimOf {
			bought = append(bought, name)
		}
		c.bookPlacement(request, pods, placed, claimOf)
		return nil
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	now := c.Clock.Now()
	if !placed.fits() {
		return c.notFound(ctx, request, pods, placed)
	}
	c.changed()
	if len(bought) == 0 {
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionTrue, autoscalingv1.ReasonCapacityIsFound,
			fmt.Sprintf("the request's %d pods fit on the nodes there are and those booting, so no node was bought; their room is booked for %s", len(pods.pods), c.BookingTime), now)
		return reconcile.Result{RequeueAfter: min(c.BookingTime, c.Recheck)}, nil
	}
	sort.Strings(bought)
	setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsBeingProvisioned,
		fmt.Sprintf("bought %d nodes for the request (claims %s); waiting for them to be Ready", len(bought), strings.Join(bought, ", ")), now)
	return reconcile.Result{RequeueAfter: c.Recheck}, nil
}

// notFound records that the request's pods do not all fit: Failed when
// they could not fit even in empty pools (the request is larger than any
// pool may grow) or the request says noRetry, else Provisioned=False and
// tried again.
func (c *Controller) notFound(ctx context.Context, request *autoscalingv1.ProvisioningRequest, pods requestPods, placed placement) (reconcile.Result, error) {
	now := c.Clock.Now()
	never, err := c.fitsEmptyPools(ctx, request, pods, placed.picture)
	if err != nil {
		return reconcile.Result{}, err
	}
	if never != "" {
		message := "the request is larger than the pools can hold even when empty: " + never + "; nothing was bought"
		setCondition(request, autoscalingv1.ConditionFailed, metav1.ConditionTrue, autoscalingv1.ReasonCapacityIsNotFound, message, now)
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsNotFound, message, now)
		return reconcile.Result{}, nil
	}
	message := "capacity is not found: " + describe(placed.unschedulable, len(pods.pods)) + "; nothing was bought"
	if noRetry(request) {
		setCondition(request, autoscalingv1.ConditionFailed, metav1.ConditionTrue, autoscalingv1.ReasonCapacityIsNotFound, message, now)
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsNotFound, message, now)
		return reconcile.Result{}, nil
	}
	setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsNotFound,
		fmt.Sprintf("%s; tried again every %s", message, c.Recheck), now)
	return reconcile.Result{RequeueAfter: c.Recheck}, nil
}

// buy writes a claim for every new node of the placement, each naming the
// request and how many were bought together. A claim refused takes back
// those written before it: all or none.
func (c *Controller) buy(ctx context.Context, request *autoscalingv1.ProvisioningRequest, placed placement) (map[string]string, error) {
	claimOf := map[string]string{}
	var made []*v1alpha1.NodeClaim
	undo := func(cause error) error {
		for _, claim := range made {
			if err := c.Kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
				cause = errors.Join(cause, fmt.Errorf("taking back claim %s: %w", claim.Name, err))
			} else {
				c.Writes.Deleted(claim)
			}
		}
		return cause
	}
	for _, node := range placed.newNodes {
		pool, ok := placed.picture.Open[node.Pool]
		if !ok {
			return nil, undo(fmt.Errorf("pool %s closed during the round", node.Pool))
		}
		claim := poolclaims.New(pool, node.Shape, node.TotalRequests(), node.Requirements)
		claim.Annotations[v1alpha1.AnnotationProvisioningRequest] = request.Namespace + "/" + request.Name
		claim.Annotations[v1alpha1.AnnotationProvisioningRequestUID] = string(request.UID)
		claim.Annotations[v1alpha1.AnnotationProvisioningRequestClaims] = strconv.Itoa(len(placed.newNodes))
		if err := c.Kube.Create(ctx, claim); err != nil {
			return nil, undo(fmt.Errorf("creating a claim of pool %s shape %s for the request: %w", pool.Name, node.Shape.Name, err))
		}
		c.Writes.Created(claim)
		made = append(made, claim)
		metrics.NodeClaimsCreated.WithLabelValues(pool.Name, metrics.ReasonProvisioningRequest).Inc()
		claimOf[node.Name] = claim.Name
		log.FromContext(ctx).Info("created claim for provisioning request", "nodeClaim", claim.Name, "nodePool", pool.Name, "shape", node.Shape.Name, "pods", len(node.Pods))
	}
	return claimOf, nil
}

// followClaims waits for the request's claims to be Ready; one that
// cannot launch, whose node does not register, or that is gone fails the
// request, and every claim of it is removed.
func (c *Controller) followClaims(ctx context.Context, request *autoscalingv1.ProvisioningRequest, claims []*v1alpha1.NodeClaim) (reconcile.Result, error) {
	now := c.Clock.Now()
	key := client.ObjectKeyFromObject(request)
	if why := failure(claims); why != "" {
		// The reason is written before any claim is removed: were the
		// claims removed first and the status write lost (a stale copy of
		// the request conflicts), the next look would find only deleted
		// claims and could no longer say which one failed. A request that
		// is Failed has its claims removed on the next look.
		message := why + "; every claim bought for the request is removed"
		setCondition(request, autoscalingv1.ConditionFailed, metav1.ConditionTrue, autoscalingv1.ReasonLaunchFailed, message, now)
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonLaunchFailed, message, now)
		c.forget(key)
		return reconcile.Result{Requeue: true}, nil
	}
	if !c.Bookings.has(key, request.UID) {
		if err := c.rebook(ctx, request); err != nil {
			return reconcile.Result{}, err
		}
	}
	var ready, waiting []string
	for _, claim := range claims {
		if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady) {
			ready = append(ready, claim.Status.NodeName)
		} else {
			waiting = append(waiting, claim.Name)
		}
	}
	sort.Strings(ready)
	sort.Strings(waiting)
	if len(waiting) == 0 {
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionTrue, autoscalingv1.ReasonCapacityIsProvisioned,
			fmt.Sprintf("the %d nodes bought for the request are Ready (%s); their room is booked for %s", len(ready), strings.Join(ready, ", "), c.BookingTime), now)
		c.changed()
		return reconcile.Result{RequeueAfter: min(c.BookingTime, c.Recheck)}, nil
	}
	setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsBeingProvisioned,
		fmt.Sprintf("%d of the %d nodes bought for the request are Ready; waiting for claims %s", len(ready), len(claims), strings.Join(waiting, ", ")), now)
	return reconcile.Result{RequeueAfter: c.Recheck}, nil
}

// failure says why the request's claims cannot all become nodes, "" while
// they still may. A claim that could not launch or register is named
// before one that is merely being deleted, which may be a consequence.
func failure(claims []*v1alpha1.NodeClaim) string {
	expected, _ := strconv.Atoi(claims[0].Annotations[v1alpha1.AnnotationProvisioningRequestClaims])
	for _, claim := range claims {
		launched := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionLaunched)
		registered := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionRegistered)
		switch {
		case launched != nil && launched.Status == metav1.ConditionFalse && launched.Reason != v1alpha1.ReasonLaunching:
			return fmt.Sprintf("claim %s could not be launched (%s: %s)", claim.Name, launched.Reason, launched.Message)
		case registered != nil && registered.Status == metav1.ConditionFalse && registered.Reason == v1alpha1.ReasonRegistrationTimeout:
			return fmt.Sprintf("the node of claim %s did not register (%s)", claim.Name, registered.Message)
		}
	}
	for _, claim := range claims {
		if !claim.DeletionTimestamp.IsZero() {
			return fmt.Sprintf("claim %s was deleted before its node was Ready", claim.Name)
		}
	}
	if len(claims) < expected {
		return fmt.Sprintf("%d of the %d claims bought for the request are gone before their nodes were Ready", expected-len(claims), expected)
	}
	return ""
}

// revoked says which of a provisioned request's claims is gone or going,
// "" when none is.
func revoked(claims []*v1alpha1.NodeClaim) string {
	if len(claims) == 0 {
		return ""
	}
	expected, _ := strconv.Atoi(claims[0].Annotations[v1alpha1.AnnotationProvisioningRequestClaims])
	for _, claim := range claims {
		if !claim.DeletionTimestamp.IsZero() {
			return fmt.Sprintf("the node of claim %s is being removed", claim.Status.NodeName)
		}
	}
	if len(claims) < expected {
		return fmt.Sprintf("%d of the %d nodes bought for the request are gone", expected-len(claims), expected)
	}
	return ""
}

// claimsOf lists the claims bought for the request (this one: by UID),
// with the controller's own writes the cache does not show yet.
func (c *Controller) claimsOf(ctx context.Context, request *autoscalingv1.ProvisioningRequest) ([]*v1alpha1.NodeClaim, error) {
	all, err := (&clusterstate.Cluster{Kube: c.Kube, Writes: c.Writes}).Claims(ctx)
	if err != nil {
		return nil, err
	}
	var claims []*v1alpha1.NodeClaim
	for i := range all {
		if all[i].Annotations[v1alpha1.AnnotationProvisioningRequestUID] == string(request.UID) {
			claims = append(claims, &all[i])
		}
	}
	return claims, nil
}

// removeClaims deletes every claim bought for the request.
func (c *Controller) removeClaims(ctx context.Context, request *autoscalingv1.ProvisioningRequest) error {
	if request.Spec.ProvisioningClassName != autoscalingv1.ClassBestEffortAtomicScaleUp {
		return nil
	}
	claims, err := c.claimsOf(ctx, request)
	if err != nil {
		return err
	}
	var errs []error
	for _, claim := range claims {
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		if err := c.Kube.Delete(ctx, claim); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing claim %s of the failed request: %w", claim.Name, err))
			continue
		}
		c.Writes.Deleted(claim)
		log.FromContext(ctx).Info("removed claim of failed provisioning request", "nodeClaim", claim.Name)
	}
	return errors.Join(errs...)
}
