// Package provisioningrequest serves autoscaling.x-k8s.io/v1
// ProvisioningRequests of the two classes the API defines:
// check-capacity (do the request's pods fit on the nodes there are and
// those booting, buying nothing) and best-effort-atomic-scale-up (buy every
// node the pods need, or none). Both simulate the request's pods on the
// cluster picture provisioning decides on (clusterstate) with the same
// scheduling package; once provisioned, the room is booked (Bookings) until
// the request's pods arrive or the booking time passes.
package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/metrics"
)

// Name of the controller in logs, metrics and events.
const Name = "provisioningrequest"

// Defaults of the controller's timing.
const (
	// DefaultBookingTime is how long provisioned capacity is kept for a
	// request's pods, as cluster-autoscaler keeps it.
	DefaultBookingTime = 10 * time.Minute
	// DefaultRecheck is how soon a request that waits (for room, for its
	// nodes, for its pods) is looked at again without an event.
	DefaultRecheck = 30 * time.Second
)

// Rounds is provisioning's: the pools as a round resolves them, and the
// lock that keeps a round from deciding while a request buys.
type Rounds interface {
	clusterstate.PoolUsability
	Exclusively(decide func() error) error
}

// Controller reconciles ProvisioningRequests of the classes it serves; a
// request of another class is left to whoever serves it.
type Controller struct {
	Kube client.Client
	// Objects gives the pods and nodes without listing them (the
	// provisioner's); nil lists them through Kube.
	Objects clusterstate.ObjectSource
	// Writes are the controller's claims the cache may not show yet.
	Writes *clusterstate.Writes
	Rounds Rounds
	// Bookings keep the requests' room; provisioning and disruption read
	// them.
	Bookings *Bookings
	Recorder events.EventRecorder
	// Clock times the bookings and the conditions.
	Clock clock.PassiveClock
	// BookingTime is how long provisioned capacity is kept for the pods
	// (default DefaultBookingTime).
	BookingTime time.Duration
	// Recheck is how soon a waiting request is looked at again (default
	// DefaultRecheck).
	Recheck time.Duration
	// Changed is told when the room the bookings keep changed, so that
	// provisioning and disruption decide again; nil tells nobody.
	Changed func()
}

// SetupWithManager registers the controller: requests, their claims,
// PodTemplates (a missing one may appear) and the pods that consume
// requests.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.BookingTime <= 0 {
		c.BookingTime = DefaultBookingTime
	}
	if c.Recheck <= 0 {
		c.Recheck = DefaultRecheck
	}
	consumers := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && consumed(pod) != ""
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&autoscalingv1.ProvisioningRequest{}).
		Watches(&v1alpha1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(requestOfClaim)).
		Watches(&corev1.PodTemplate{}, handler.EnqueueRequestsFromMapFunc(c.requestsInNamespace)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(requestOfPod), builder.WithPredicates(consumers)).
		Complete(c)
}

func requestOfClaim(_ context.Context, o client.Object) []reconcile.Request {
	namespace, name, ok := splitKey(o.GetAnnotations()[v1alpha1.AnnotationProvisioningRequest])
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}}
}

func requestOfPod(_ context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok || consumed(pod) == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: consumed(pod)}}}
}

func (c *Controller) requestsInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list autoscalingv1.ProvisioningRequestList
	if err := c.Kube.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing ProvisioningRequests for a PodTemplate", "namespace", o.GetNamespace())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		for _, podSet := range list.Items[i].Spec.PodSets {
			if podSet.PodTemplateRef.Name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				break
			}
		}
	}
	return out
}

// Serves says whether claimscale serves a provisioning class.
func Serves(class string) bool {
	return class == autoscalingv1.ClassCheckCapacity || class == autoscalingv1.ClassBestEffortAtomicScaleUp
}

// Reconcile brings one request a step further and writes its status.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var request autoscalingv1.ProvisioningRequest
	if err := c.Kube.Get(ctx, req.NamespacedName, &request); err != nil {
		if apierrors.IsNotFound(err) {
			// A request deleted is a booking let go; its nodes are
			// ordinary nodes now, removed when nobody needs them.
			c.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if !Serves(request.Spec.ProvisioningClassName) {
		return reconcile.Result{}, nil
	}
	if !request.DeletionTimestamp.IsZero() {
		c.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("provisioningRequest", req.NamespacedName.String(), "class", request.Spec.ProvisioningClassName))
	updated := request.DeepCopy()
	result, err := c.reconcile(ctx, updated)
	if !equality.Semantic.DeepEqual(request.Status, updated.Status) {
		if patchErr := c.Kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(&request, client.MergeFromWithOptimisticLock{})); patchErr != nil {
			return reconcile.Result{}, errors.Join(err, fmt.Errorf("writing the status of ProvisioningRequest %s: %w", req.NamespacedName, patchErr))
		}
		c.observe(ctx, &request, updated)
	}
	return result, err
}

// reconcile is the request's next step on its status: terminal
// conditions first, then the booking of a provisioned request, then the
// class's own work.
func (c *Controller) reconcile(ctx context.Context, request *autoscalingv1.ProvisioningRequest) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(request)
	switch {
	case isTrue(request, autoscalingv1.ConditionFailed):
		c.forget(key)
		// Whatever kept the claims of a failed request before (a
		// restart, a refused delete), they go now.
		return reconcile.Result{}, c.removeClaims(ctx, request)
	case isTrue(request, autoscalingv1.ConditionBookingExpired), isTrue(request, autoscalingv1.ConditionCapacityRevoked):
		c.forget(key)
		return reconcile.Result{}, nil
	case isTrue(request, autoscalingv1.ConditionProvisioned):
		return c.keepBooking(ctx, request)
	}
	pods, err := podsOf(ctx, c.Kube, request)
	var missing *missingTemplateError
	if errors.As(err, &missing) {
		// Nothing can be bought for pods nobody described; the request
		// is looked at again when its template appears.
		c.forget(key)
		now := c.Clock.Now()
		message := missing.Error() + ": nothing is provisioned until it does"
		setCondition(request, autoscalingv1.ConditionAccepted, metav1.ConditionFalse, autoscalingv1.ReasonPodTemplateNotFound, message, now)
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonPodTemplateNotFound, message, now)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	setCondition(request, autoscalingv1.ConditionAccepted, metav1.ConditionTrue, autoscalingv1.ReasonAccepted, "claimscale serves the request", c.Clock.Now())
	if request.Spec.ProvisioningClassName == autoscalingv1.ClassCheckCapacity {
		return c.checkCapacity(ctx, request, pods)
	}
	return c.scaleUp(ctx, request, pods)
}

// overQuota says, and records on the request, when the namespace's quota
// has no room for its pods.
func (c *Controller) overQuota(ctx context.Context, request *autoscalingv1.ProvisioningRequest, pods requestPods) (bool, error) {
	why, err := quotaRoom(ctx, c.Kube, request.Namespace, pods.pods)
	if err != nil || why == "" {
		return false, err
	}
	setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonQuotaExceeded,
		why+": the pods could not be made, so nothing is provisioned", c.Clock.Now())
	return true, nil
}

// forget lets a request's room go and tells provisioning and disruption.
func (c *Controller) forget(key types.NamespacedName) {
	if c.Bookings.forget(key) {
		c.changed()
	}
}

func (c *Controller) changed() {
	if c.Changed != nil {
		c.Changed()
	}
}

// observe counts and tells the conditions the status write changed.
func (c *Controller) observe(ctx context.Context, before, after *autoscalingv1.ProvisioningRequest) {
	class := after.Spec.ProvisioningClassName
	for _, condition := range after.Status.Conditions {
		old := meta.FindStatusCondition(before.Status.Conditions, condition.Type)
		if old != nil && old.Status == condition.Status && old.Reason == condition.Reason {
			continue
		}
		outcome := ""
		switch {
		case condition.Type == autoscalingv1.ConditionAccepted && condition.Status == metav1.ConditionFalse:
			outcome = metrics.OutcomeNotAccepted
		case condition.Type == autoscalingv1.ConditionProvisioned && condition.Status == metav1.ConditionFalse && condition.Reason != autoscalingv1.ReasonCapacityIsBeingProvisioned:
			outcome = metrics.OutcomeWaiting
		case condition.Type != autoscalingv1.ConditionAccepted && condition.Status == metav1.ConditionTrue:
			outcome = condition.Type
		}
		if outcome == "" {
			continue
		}
		metrics.ProvisioningRequestOutcomes.WithLabelValues(class, outcome, condition.Reason).Inc()
		eventType := corev1.EventTypeNormal
		if outcome != autoscalingv1.ConditionProvisioned && outcome != autoscalingv1.ConditionBookingExpired {
			eventType = corev1.EventTypeWarning
		}
		if condition.Type == autoscalingv1.ConditionProvisioned && condition.Status == metav1.ConditionTrue {
			metrics.ProvisioningRequestSeconds.WithLabelValues(class).Observe(condition.LastTransitionTime.Sub(after.CreationTimestamp.Time).Seconds())
		}
		if c.Recorder != nil {
			c.Recorder.Eventf(after, nil, eventType, condition.Reason, "Provision", "%s", condition.Message)
		}
		log.FromContext(ctx).Info("provisioning request "+outcome, "reason", condition.Reason, "message", condition.Message)
	}
}

func splitKey(value string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(value, "/")
	return namespace, name, ok && namespace != "" && name != ""
}
