package nodeclaim

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/pkg/provider"
)

// sleep puts the machine of a claim annotated claimscale.io/suspend to
// sleep, in an order that survives a crash at any step: cordon and drain
// the node as termination does, stop the machine, delete the Node, and
// only then say Suspended=True. Each step is idempotent, so a reconcile
// after a crash simply goes through them again. An asleep claim is kept
// until its pool's sleep.deleteAfter, then deleted.
type sleep struct{ *Controller }

// sleepLimitNote ends the Suspended message of a claim deleted because
// it may sleep no longer: the termination counter reads it for its
// reason.
const sleepLimitNote = "deleting the claim and its machine, which may sleep no longer"

func (s *sleep) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if claim.Asleep() {
		return s.keepAsleep(ctx, claim)
	}
	return s.suspend(ctx, claim)
}

func (s *sleep) suspend(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// A machine that slept before registering would still hold a valid
	// join token; a sleeping machine never does.
	if err := s.revokeBootstrapToken(ctx, claim); err != nil {
		return reconcile.Result{}, err
	}
	machines, err := s.providerOf(ctx, claim)
	if err != nil {
		s.setSuspending(claim, v1alpha1.ReasonSuspendFailed, err.Error())
		s.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonSuspendFailed, "Suspend", "%v", err)
		return reconcile.Result{RequeueAfter: s.retryAfter(claim, err, maxTerminalRetryInterval)}, nil
	}
	power, ok := machines.(provider.PowerManager)
	if !ok || !provider.CanManagePower(ctx, machines) {
		// Nothing is drained first: termination drains the node as it
		// would have.
		return s.suspendNotSupported(ctx, claim, fmt.Sprintf("NodeProvider %s cannot stop and start machines", claim.Status.NodeProviderName)), nil
	}

	node, err := s.nodeFor(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node != nil {
		s.setSuspending(claim, v1alpha1.ReasonSuspending, "draining node "+node.Name)
		left, err := s.cordonAndDrain(ctx, claim, node, suspendingSince(claim))
		if err != nil {
			return reconcile.Result{}, err
		}
		if left != "" {
			s.setSuspending(claim, v1alpha1.ReasonSuspending, left)
			return reconcile.Result{RequeueAfter: drainPoll}, nil
		}
	}

	providerID := claim.Status.ProviderID
	s.setSuspending(claim, v1alpha1.ReasonSuspending, "stopping machine "+providerID)
	started := time.Now()
	err = power.Suspend(ctx, providerID)
	metrics.ObserveProviderCall(providerLabel(claim), "suspend", started, resultOf(err))
	switch {
	case err == nil:
	case provider.IsNotSupported(err):
		return s.suspendNotSupported(ctx, claim, err.Error()), nil
	case provider.IsNotFound(err):
		message := fmt.Sprintf("stopping machine %s: %v; the machine is gone, deleting the claim", providerID, err)
		s.setSuspending(claim, v1alpha1.ReasonSuspendFailed, message)
		s.eventf(ctx, claim, nil, corev1.EventTypeWarning, "MachineGone", "Suspend", "%s", message)
		s.countSuspend(ctx, claim, metrics.SleepResultMachineGone)
		deleteAfterStatus(ctx)
		return reconcile.Result{}, nil
	default:
		maxWait := maxRetryInterval
		if provider.IsTerminal(err) {
			maxWait = maxTerminalRetryInterval
		}
		wait := s.retryAfter(claim, err, maxWait)
		s.setSuspending(claim, v1alpha1.ReasonSuspendFailed, fmt.Sprintf("stopping machine %s: %v (retrying in %s)", providerID, err, wait.Round(time.Second)))
		s.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonSuspendFailed, "Suspend", "stopping machine %s: %v", providerID, err)
		s.countSuspend(ctx, claim, metrics.SleepResultFailed)
		log.FromContext(ctx).Info("suspend failed, retrying", "error", err.Error(), "after", wait)
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.forgetRetries(claim)

	// The Node goes only once its machine is stopped: a sleeping machine
	// must not show as a NotReady node, nor be repaired.
	message := fmt.Sprintf("machine %s stopped", providerID)
	if node != nil {
		if err := s.releaseNode(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
		message += ", node " + node.Name + " deleted"
	}
	s.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended, message)
	// Not Registered, not Initialized, and so not Ready, for the reason
	// that says it is on purpose: no reader takes the claim for a node
	// that failed to join.
	s.setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionFalse, v1alpha1.ReasonSuspended, "the machine sleeps and has no node")
	s.setCondition(claim, v1alpha1.ConditionInitialized, metav1.ConditionFalse, v1alpha1.ReasonSuspended, "the machine sleeps and has no node")
	claim.Status.NodeName = ""
	s.eventf(ctx, claim, nil, corev1.EventTypeNormal, v1alpha1.ReasonSuspended, "Suspend", "%s", message)
	s.countSuspend(ctx, claim, metrics.SleepResultSuccess)
	log.FromContext(ctx).Info("machine asleep", "providerID", providerID)
	return reconcile.Result{}, nil
}

// suspendNotSupported deletes, as before sleep existed, the claim whose
// provider cannot stop its machine.
func (s *sleep) suspendNotSupported(ctx context.Context, claim *v1alpha1.NodeClaim, why string) reconcile.Result {
	message := why + "; deleting the claim instead"
	s.setSuspending(claim, v1alpha1.ReasonSuspendNotSupported, message)
	s.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonSuspendNotSupported, "Suspend", "%s", message)
	s.countSuspend(ctx, claim, metrics.SleepResultNotSupported)
	deleteAfterStatus(ctx)
	return reconcile.Result{}
}

// keepAsleep waits for the end of the claim's sleep: its pool's
// sleep.deleteAfter, counted from when it went to sleep; then it is
// deleted. A claim whose pool is gone, or no longer lets machines sleep,
// is deleted at once.
func (s *sleep) keepAsleep(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	var why string
	switch err := s.Kube.Get(ctx, client.ObjectKey{Name: poolName(claim)}, &pool); {
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("pool %s is gone", poolName(claim))
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("getting pool %s: %w", poolName(claim), err)
	case pool.SleepDeleteAfter() == 0:
		why = fmt.Sprintf("pool %s no longer lets machines sleep", pool.Name)
	default:
		deleteAfter := pool.SleepDeleteAfter()
		slept := s.Clock.Since(claim.AsleepSince())
		if slept < deleteAfter {
			return reconcile.Result{RequeueAfter: deleteAfter - slept}, nil
		}
		why = fmt.Sprintf("slept %s, pool %s's sleep.deleteAfter is %s", slept.Round(time.Second), pool.Name, deleteAfter)
	}
	if sleptTooLong(claim) {
		deleteAfterStatus(ctx) // said and told before; the deletion did not happen
		return reconcile.Result{}, nil
	}
	suspended := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended)
	message := why + "; " + sleepLimitNote
	s.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionTrue, suspended.Reason, message)
	s.eventf(ctx, claim, nil, corev1.EventTypeNormal, metrics.ReasonSleepLimit, "Sleep", "%s", message)
	log.FromContext(ctx).Info("sleep limit reached, deleting the claim", "why", why)
	deleteAfterStatus(ctx)
	return reconcile.Result{}, nil
}

// setSuspending says how the claim's suspension goes (Suspended=False
// with reason). Its transition time is when the suspension began, which
// bounds the drain: a claim that slept and woke before has
// Suspended=False already, so that condition is started afresh.
func (s *sleep) setSuspending(claim *v1alpha1.NodeClaim, reason, message string) {
	if current := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended); current != nil && !suspendingReason(current.Reason) {
		meta.RemoveStatusCondition(&claim.Status.Conditions, v1alpha1.ConditionSuspended)
	}
	s.setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionFalse, reason, message)
}

func (s *sleep) countSuspend(ctx context.Context, claim *v1alpha1.NodeClaim, result string) {
	pool := poolName(claim)
	countAfterStatus(ctx, func() { metrics.NodeClaimSuspends.WithLabelValues(pool, result).Inc() })
}

// suspendingReason says whether a Suspended=False reason is that of a
// suspension under way.
func suspendingReason(reason string) bool {
	return reason == v1alpha1.ReasonSuspending || reason == v1alpha1.ReasonSuspendFailed || reason == v1alpha1.ReasonSuspendNotSupported
}

// suspendingSince is when the claim's suspension began.
func suspendingSince(claim *v1alpha1.NodeClaim) time.Time {
	if condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended); condition != nil {
		return condition.LastTransitionTime.Time
	}
	return time.Time{}
}

// machineStopped says whether the claim's machine sleeps, or slept and
// has not been started again: it has no Node, and any Node with its
// providerID is not its own.
func machineStopped(claim *v1alpha1.NodeClaim) bool {
	return meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionSuspended)
}

// slept says whether the claim's machine ever slept, or was asked to: the
// claim has its machine, and is never launched again.
func slept(claim *v1alpha1.NodeClaim) bool {
	return meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended) != nil
}

// sleptTooLong says whether the claim is deleted for having slept as long
// as it may.
func sleptTooLong(claim *v1alpha1.NodeClaim) bool {
	condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended)
	return condition != nil && condition.Status == metav1.ConditionTrue && strings.HasSuffix(condition.Message, sleepLimitNote)
}
