package nodeclaim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// liveness gives up on a claim whose node has not registered within the
// pool's registration timeout, counted from the claim's creation (or from
// its machine's wake): its deletion removes the machine, and provisioning
// tries again.
type liveness struct{ *Controller }

func (l *liveness) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// Only a node that never joined times out; one that joined and went
	// away is garbage collection's to judge.
	if registered := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionRegistered); registered != nil &&
		(registered.Status == metav1.ConditionTrue || registered.Reason == "NodeNotFound") {
		return reconcile.Result{}, nil
	}
	// A sleeping machine's missing Node is no lost machine: nothing times
	// out until it is started, and then from the start.
	if machineStopped(claim) {
		return reconcile.Result{}, nil
	}
	since, after := claim.CreationTimestamp.Time, ""
	if woken := wokenAt(claim); !woken.IsZero() {
		since, after = woken, " after its machine was woken"
	}
	timeout, err := l.registrationTimeout(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	waited := l.Clock.Since(since)
	if waited < timeout {
		return reconcile.Result{RequeueAfter: timeout - waited}, nil
	}
	message := fmt.Sprintf("no node registered within the registration timeout of %s%s", timeout, after)
	if after != "" {
		countWake(ctx, claim, metrics.SleepResultRegistrationTimeout)
	}
	if !l.KeepFailedClaims {
		message += "; deleting the machine and the claim"
	}
	l.setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionFalse, v1alpha1.ReasonRegistrationTimeout, message)
	l.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonRegistrationTimeout, "Register", "%s", message)
	log.FromContext(ctx).Info("registration timed out", "timeout", timeout)
	// Counted when the claim's termination finishes, by this reason.
	return l.giveUp(ctx, claim, v1alpha1.ReasonRegistrationTimeout, message)
}

func (l *liveness) registrationTimeout(ctx context.Context, claim *v1alpha1.NodeClaim) (time.Duration, error) {
	var pool v1alpha1.NodePool
	err := l.Kube.Get(ctx, client.ObjectKey{Name: poolName(claim)}, &pool)
	if err != nil {
		if client.IgnoreNotFound(err) == nil {
			return l.DefaultRegistrationTimeout, nil
		}
		return 0, fmt.Errorf("getting pool %s: %w", poolName(claim), err)
	}
	if pool.Spec.RegistrationTimeout != nil && pool.Spec.RegistrationTimeout.Duration > 0 {
		return pool.Spec.RegistrationTimeout.Duration, nil
	}
	return l.DefaultRegistrationTimeout, nil
}
