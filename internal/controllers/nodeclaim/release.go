package nodeclaim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/providerresolver"
)

// machineOwnerGone says whether err means the claim's pool or NodeProvider
// no longer exists, so its machine cannot be deleted for now.
func machineOwnerGone(err error) bool {
	var poolGone *providerresolver.PoolNotFoundError
	var providerGone *providerresolver.ProviderNotFoundError
	return errors.As(err, &poolGone) || errors.As(err, &providerGone)
}

// releaseRequested says whether an administrator asked for the claim to be
// let go without deleting its machine.
func releaseRequested(claim *v1alpha1.NodeClaim) bool {
	return claim.Annotations[v1alpha1.AnnotationReleaseMachine] == "true"
}

// neverLaunched says whether no provider was ever found for the claim: no
// NodeProvider recorded, no machine. Should a crash have lost the record
// of a Create, garbage collection still removes the machine its claim
// left behind.
func neverLaunched(claim *v1alpha1.NodeClaim) bool {
	return claim.Status.NodeProviderName == "" && claim.Status.ProviderID == ""
}

// waitForMachineOwner says, on the claim and in an event, what its
// deletion waits for and how to let it go, and looks again on the claim's
// backoff: the NodeProvider may come back.
func (c *Controller) waitForMachineOwner(ctx context.Context, claim *v1alpha1.NodeClaim, err error) reconcile.Result {
	reason := v1alpha1.ReasonWaitingForNodeProvider
	if unavailableReason(err) == v1alpha1.ReasonNodePoolNotFound {
		reason = v1alpha1.ReasonWaitingForNodePool
	}
	message := fmt.Sprintf("%v, so the machine cannot be deleted; recreate it, or annotate the claim %s=true to release the claim and leave the machine to garbage collection",
		err, v1alpha1.AnnotationReleaseMachine)
	c.setCondition(claim, v1alpha1.ConditionTerminating, metav1.ConditionTrue, reason, message)
	c.eventf(ctx, claim, nil, corev1.EventTypeWarning, reason, "Terminate", "%s", message)
	return reconcile.Result{RequeueAfter: c.retryAfter(claim, err, maxTerminalRetryInterval)}
}
