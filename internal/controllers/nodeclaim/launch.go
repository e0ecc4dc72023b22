package nodeclaim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/pkg/provider"
)

const (
	// A transient provider error is retried soon; a terminal one (bad
	// credentials, invalid settings) waits for a person, so less often.
	maxRetryInterval         = time.Minute
	maxTerminalRetryInterval = 5 * time.Minute
	// A machine still being made is looked at again after this long when
	// its provider names no wait.
	inProgressRetry = 10 * time.Second
)

// launch makes (or adopts) the claim's machine.
type launch struct{ *Controller }

func (l *launch) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// A claim whose machine slept has that machine, whatever its Launched
	// says (False after a wake without capacity): one machine per claim.
	if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched) || slept(claim) {
		return reconcile.Result{}, nil
	}
	machines, err := l.providerOf(ctx, claim)
	if err != nil {
		l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, unavailableReason(err), err.Error())
		return reconcile.Result{RequeueAfter: l.retryAfter(claim, err, maxTerminalRetryInterval)}, nil
	}

	opts, err := l.createOptions(ctx, claim)
	if err != nil {
		l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, v1alpha1.ReasonBootstrapFailed, err.Error())
		l.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonBootstrapFailed, "Launch", "%v", err)
		return reconcile.Result{RequeueAfter: l.retryAfter(claim, err, maxTerminalRetryInterval)}, nil
	}
	started := time.Now()
	instance, err := machines.Create(ctx, claim, opts)
	metrics.ObserveProviderCall(providerLabel(claim), "create", started, resultOf(err))
	switch {
	case err == nil:
		l.forgetRetries(claim)
		l.launched(ctx, claim, instance)
		return reconcile.Result{}, nil

	case provider.IsInsufficientCapacity(err):
		// Another shape or pool may have room: back this one off and give
		// the pods back to provisioning by removing the claim.
		zone := claimZone(claim)
		wait := l.Capacity.Record(poolName(claim), claim.Spec.Shape.Name, zone)
		message := fmt.Sprintf("%v; pool %s shape %s%s backed off for %s", err, poolName(claim), claim.Spec.Shape.Name, inZone(zone), wait)
		l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, v1alpha1.ReasonInsufficientCapacity, message)
		l.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonInsufficientCapacity, "Launch", "%s", message)
		return l.giveUp(ctx, claim, v1alpha1.ReasonInsufficientCapacity, message)

	case provider.IsInProgress(err):
		// Nothing failed: the claim says what the provider waits for, with
		// one event when the wait starts rather than a warning per look.
		// The registration timeout still bounds the wait.
		wait := provider.RetryAfter(err)
		if wait <= 0 {
			wait = inProgressRetry
		}
		if launched := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionLaunched); launched == nil || launched.Reason != v1alpha1.ReasonLaunching {
			l.eventf(ctx, claim, nil, corev1.EventTypeNormal, v1alpha1.ReasonLaunching, "Launch", "%v", err)
		}
		l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, v1alpha1.ReasonLaunching, err.Error())
		return reconcile.Result{RequeueAfter: wait}, nil

	case provider.IsTerminal(err):
		l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, v1alpha1.ReasonLaunchFailed, err.Error())
		l.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonLaunchFailed, "Launch", "%v", err)
		return reconcile.Result{RequeueAfter: l.retryAfter(claim, err, maxTerminalRetryInterval)}, nil

	default:
		wait := l.retryAfter(claim, err, maxRetryInterval)
		l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, v1alpha1.ReasonLaunchFailed, fmt.Sprintf("%v (retrying in %s)", err, wait.Round(time.Second)))
		l.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonLaunchFailed, "Launch", "%v", err)
		log.FromContext(ctx).Info("launch failed, retrying", "error", err.Error(), "after", wait)
		return reconcile.Result{RequeueAfter: wait}, nil
	}
}

func (l *launch) launched(ctx context.Context, claim *v1alpha1.NodeClaim, instance *provider.Instance) {
	claim.Status.ProviderID = instance.ProviderID
	claim.Status.Capacity = instance.Capacity
	if len(claim.Status.Capacity) == 0 {
		claim.Status.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:    claim.Spec.Shape.CPU,
			corev1.ResourceMemory: claim.Spec.Shape.Memory,
		}
	}
	message := fmt.Sprintf("machine %s launched as %s", instance.Name, instance.ProviderID)
	l.setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionTrue, v1alpha1.ReasonLaunched, message)
	l.eventf(ctx, claim, nil, corev1.EventTypeNormal, v1alpha1.ReasonLaunched, "Launch", "%s", message)
	pool := poolName(claim)
	countAfterStatus(ctx, func() {
		if _, counted := l.launchesCounted.LoadOrStore(claim.UID, struct{}{}); !counted {
			metrics.NodeClaimsLaunched.WithLabelValues(pool).Inc()
		}
	})
	log.FromContext(ctx).Info("launched machine", "providerID", instance.ProviderID)
}

// providerLabel names the claim's provider for metrics.
func providerLabel(claim *v1alpha1.NodeClaim) string {
	if name := claim.Status.NodeProviderName; name != "" {
		return name
	}
	return "pool:" + poolName(claim)
}

// resultOf classifies a provider call's outcome for metrics.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "success"
	case provider.IsNotFound(err):
		return "not_found"
	case provider.IsInsufficientCapacity(err):
		return "insufficient_capacity"
	case provider.IsTerminal(err):
		return "terminal"
	case provider.IsInProgress(err):
		return "in_progress"
	}
	return "retryable"
}
