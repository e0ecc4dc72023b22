package nodeclaim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/pkg/provider"
)

// wake starts the sleeping machine of a claim whose suspend annotation
// provisioning removed, and says Suspended=False/Waking once it runs:
// from then on registration waits for its Node (by providerID, as for a
// new machine) and liveness counts the registration timeout from the
// wake. Resume is idempotent, so a crash between the start and the status
// write only starts it again; the claim keeps its machine and is never
// launched anew. A suspension cancelled before the machine slept is
// undone here too.
type wake struct{ *Controller }

func (w *wake) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	suspended := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended)
	switch {
	case suspended == nil:
		return reconcile.Result{}, nil
	case suspended.Status == metav1.ConditionTrue:
		return w.resume(ctx, claim)
	case suspended.Reason == v1alpha1.ReasonSuspending || suspended.Reason == v1alpha1.ReasonSuspendFailed:
		return w.cancelSuspension(ctx, claim)
	}
	return reconcile.Result{}, nil
}

func (w *wake) resume(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	providerID := claim.Status.ProviderID
	machines, err := w.providerOf(ctx, claim)
	if err != nil {
		w.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended, fmt.Sprintf("waking machine %s: %v", providerID, err))
		w.eventf(ctx, claim, nil, corev1.EventTypeWarning, "WakeFailed", "Wake", "%v", err)
		return reconcile.Result{RequeueAfter: w.retryAfter(claim, err, maxTerminalRetryInterval)}, nil
	}
	power, ok := machines.(provider.PowerManager)
	if !ok || !provider.CanManagePower(ctx, machines) {
		return w.cannotWake(ctx, claim, metrics.SleepResultNotSupported,
			fmt.Sprintf("NodeProvider %s cannot start machines any more", claim.Status.NodeProviderName)), nil
	}
	started := time.Now()
	err = power.Resume(ctx, providerID)
	metrics.ObserveProviderCall(providerLabel(claim), "resume", started, resultOf(err))
	switch {
	case err == nil:
	case provider.IsInsufficientCapacity(err):
		// The machine cannot start where it is (a VM cannot take its
		// local disk to another host): another shape or pool may have
		// room, so this one backs off and provisioning makes a new
		// machine for the pods.
		zone := claimZone(claim)
		wait := w.Capacity.Record(poolName(claim), claim.Spec.Shape.Name, zone)
		message := fmt.Sprintf("starting machine %s: %v; pool %s shape %s%s backed off for %s", providerID, err, poolName(claim), claim.Spec.Shape.Name, inZone(zone), wait)
		w.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, v1alpha1.ReasonInsufficientCapacity, message)
		w.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonInsufficientCapacity, "Wake", "%s", message)
		countWake(ctx, claim, metrics.SleepResultInsufficientCapacity)
		return w.giveUp(ctx, claim, v1alpha1.ReasonInsufficientCapacity, message)
	case provider.IsNotSupported(err):
		return w.cannotWake(ctx, claim, metrics.SleepResultNotSupported, fmt.Sprintf("starting machine %s: %v", providerID, err)), nil
	case provider.IsNotFound(err):
		return w.cannotWake(ctx, claim, metrics.SleepResultMachineGone, fmt.Sprintf("starting machine %s: %v; the machine is gone", providerID, err)), nil
	default:
		maxWait := maxRetryInterval
		if provider.IsTerminal(err) {
			maxWait = maxTerminalRetryInterval
		}
		wait := w.retryAfter(claim, err, maxWait)
		// Still True: the machine is stopped, and its sleep began when it
		// went to sleep, not now.
		w.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended,
			fmt.Sprintf("starting machine %s: %v (retrying in %s)", providerID, err, wait.Round(time.Second)))
		w.eventf(ctx, claim, nil, corev1.EventTypeWarning, "WakeFailed", "Wake", "starting machine %s: %v", providerID, err)
		countWake(ctx, claim, metrics.SleepResultFailed)
		log.FromContext(ctx).Info("wake failed, retrying", "error", err.Error(), "after", wait)
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	w.forgetRetries(claim)
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched) {
		// An earlier start without capacity said otherwise, and the
		// claim's deletion did not follow: the machine runs after all.
		w.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionTrue, v1alpha1.ReasonLaunched, fmt.Sprintf("machine %s started from its sleep", providerID))
	}
	message := fmt.Sprintf("machine %s started, waiting for its node to register again", providerID)
	w.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionFalse, v1alpha1.ReasonWaking, message)
	w.eventf(ctx, claim, nil, corev1.EventTypeNormal, v1alpha1.ReasonWaking, "Wake", "%s", message)
	log.FromContext(ctx).Info("machine woken", "providerID", providerID)
	return reconcile.Result{}, nil
}

// cannotWake deletes a claim whose sleeping machine cannot be started at
// all; provisioning makes a new one for its pods.
func (w *wake) cannotWake(ctx context.Context, claim *v1alpha1.NodeClaim, result, why string) reconcile.Result {
	message := why + "; deleting the claim"
	w.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended, message)
	w.eventf(ctx, claim, nil, corev1.EventTypeWarning, "WakeFailed", "Wake", "%s", message)
	countWake(ctx, claim, result)
	deleteAfterStatus(ctx)
	return reconcile.Result{}
}

// cancelSuspension undoes a suspension whose annotation went before the
// machine slept: it starts the machine, which a crash between Suspend and
// the Node's deletion may have left stopped (a running machine is
// success), and uncordons the node.
func (w *wake) cancelSuspension(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	machines, err := w.providerOf(ctx, claim)
	if err != nil {
		return reconcile.Result{RequeueAfter: w.retryAfter(claim, err, maxTerminalRetryInterval)}, nil
	}
	if power, ok := machines.(provider.PowerManager); ok && provider.CanManagePower(ctx, machines) {
		started := time.Now()
		err := power.Resume(ctx, claim.Status.ProviderID)
		metrics.ObserveProviderCall(providerLabel(claim), "resume", started, resultOf(err))
		if err != nil && !provider.IsNotFound(err) {
			wait := w.retryAfter(claim, err, maxRetryInterval)
			w.eventf(ctx, claim, nil, corev1.EventTypeWarning, "WakeFailed", "Wake", "starting machine %s after its sleep was cancelled: %v", claim.Status.ProviderID, err)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	w.forgetRetries(claim)
	node, err := w.nodeFor(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node != nil {
		if err := w.uncordon(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	w.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionFalse, v1alpha1.ReasonAwake, "the sleep was cancelled before the machine slept")
	return reconcile.Result{}, nil
}

// uncordon removes the taint cordon put on the node.
func (w *wake) uncordon(ctx context.Context, node *corev1.Node) error {
	disrupted := corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule}
	if !hasTaint(node.Spec.Taints, disrupted) {
		return nil
	}
	patch := client.StrategicMergeFrom(node.DeepCopy())
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == disrupted.Key && t.Effect == disrupted.Effect })
	if err := w.Kube.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("uncordoning node %s: %w", node.Name, err)
	}
	return nil
}

func countWake(ctx context.Context, claim *v1alpha1.NodeClaim, result string) {
	pool := poolName(claim)
	countAfterStatus(ctx, func() { metrics.NodeClaimWakes.WithLabelValues(pool, result).Inc() })
}

// awake says Suspended=False/Awake once a woken machine's Node has
// registered again; from here the node initializes as a new one would.
type awake struct{ *Controller }

func (a *awake) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	wokeAt := wokenAt(claim)
	if wokeAt.IsZero() || !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
		return reconcile.Result{}, nil
	}
	took := a.Clock.Since(wokeAt)
	message := fmt.Sprintf("node %s registered again %s after its machine was started", claim.Status.NodeName, took.Round(time.Second))
	a.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionFalse, v1alpha1.ReasonAwake, message)
	a.eventf(ctx, claim, nil, corev1.EventTypeNormal, v1alpha1.ReasonAwake, "Wake", "%s", message)
	pool := poolName(claim)
	countAfterStatus(ctx, func() {
		metrics.WakeToRegisteredSeconds.WithLabelValues(pool).Observe(took.Seconds())
		metrics.NodeClaimWakes.WithLabelValues(pool, metrics.SleepResultSuccess).Inc()
	})
	return reconcile.Result{}, nil
}

// wokenAt is when the claim's machine was started from its sleep, while
// its Node has not registered again; zero otherwise.
func wokenAt(claim *v1alpha1.NodeClaim) time.Time {
	condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended)
	if condition == nil || condition.Status != metav1.ConditionFalse || condition.Reason != v1alpha1.ReasonWaking {
		return time.Time{}
	}
	return condition.LastTransitionTime.Time
}
