package nodeclaim

import (
	"context"
	"fmt"
	"strings"
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

// failed says whether the claim gave up for good: nothing more is done
// for it, but deleting its machine, until it is deleted.
func failed(claim *v1alpha1.NodeClaim) bool {
	return meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionFailed)
}

// Tails of a kept Failed claim's message. The condition is the only record
// of how far giving up got that survives a restart: until it says the
// machine is deleted, every reconcile of the claim tries again.
const (
	deletingMachineNote = "deleting the machine, the claim stays until cluster-autoscaler deletes it"
	machineDeletedNote  = "the machine is deleted, the claim stays until cluster-autoscaler deletes it"
)

// giveUp ends a claim that failed for good. Natively the claim is deleted
// once its status says why (its pods go back to provisioning). With
// KeepFailedClaims, the mode where cluster-autoscaler decides, its machine
// is deleted and the claim stays, marked Failed: the autoscaler must see the
// failed instance to back the node group off, and deletes it itself
// (NodeGroupDeleteNodes). Deleting the claim there would look to it like a
// scale-up that succeeded, and it would buy again at once.
func (c *Controller) giveUp(ctx context.Context, claim *v1alpha1.NodeClaim, reason, message string) (reconcile.Result, error) {
	if !c.KeepFailedClaims {
		deleteAfterStatus(ctx)
		return reconcile.Result{}, nil
	}
	if claim.Status.ProviderID == "" {
		c.setCondition(claim, v1alpha1.ConditionFailed, metav1.ConditionTrue, reason, message+"; "+machineDeletedNote)
		c.eventf(ctx, claim, nil, corev1.EventTypeWarning, "Failed", "GiveUp", "%s; kept for cluster-autoscaler to see", message)
		return reconcile.Result{}, nil
	}
	// Failed is on the API server before the machine goes: garbage
	// collection takes a Launched claim whose machine is gone, and that is
	// not Failed, for an orphan and deletes it, which cluster-autoscaler
	// would read as a scale-up that succeeded.
	before := claim.DeepCopy()
	c.setCondition(claim, v1alpha1.ConditionFailed, metav1.ConditionTrue, reason, message+"; "+deletingMachineNote)
	if err := c.writeStatus(ctx, before, claim); err != nil {
		// Not Failed in memory either, so the reconcile's own status write
		// does not persist it: the next reconcile gives up from the start,
		// with its event and count.
		claim.Status.Conditions = before.Status.Conditions
		return reconcile.Result{}, fmt.Errorf("marking claim %s failed before deleting its machine: %w", claim.Name, err)
	}
	c.eventf(ctx, claim, nil, corev1.EventTypeWarning, "Failed", "GiveUp", "%s; kept for cluster-autoscaler to see", message)
	return c.deleteFailedMachine(ctx, claim), nil
}

// reconcileFailed finishes giving up on a claim already Failed: a machine
// whose deletion failed, or was cut short by a restart, would otherwise run
// (and be billed) until cluster-autoscaler deletes the claim, if ever.
func (c *Controller) reconcileFailed(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if failedMachineDeleted(claim) {
		return reconcile.Result{}, nil
	}
	stored := claim.DeepCopy()
	result := c.deleteFailedMachine(ctx, claim)
	if err := c.writeStatus(ctx, stored, claim); err != nil {
		return reconcile.Result{}, err
	}
	return result, nil
}

// failedMachineDeleted says whether a Failed claim has no machine left to
// delete. Only a message that says so counts: any other (a claim written
// by another version) costs one more, harmless, delete.
func failedMachineDeleted(claim *v1alpha1.NodeClaim) bool {
	if claim.Status.ProviderID == "" {
		return true
	}
	condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionFailed)
	return condition != nil && strings.HasSuffix(condition.Message, machineDeletedNote)
}

// deleteFailedMachine deletes a Failed claim's machine and, once it is
// gone, says so in the condition; a failure is retried with backoff.
func (c *Controller) deleteFailedMachine(ctx context.Context, claim *v1alpha1.NodeClaim) reconcile.Result {
	machines, err := c.providerOf(ctx, claim)
	if err != nil {
		wait := c.retryAfter(claim, err, maxRetryInterval)
		log.FromContext(ctx).Info("no provider to delete the machine of a failed claim, retrying", "error", err.Error(), "after", wait)
		return reconcile.Result{RequeueAfter: wait}
	}
	started := time.Now()
	err = machines.Delete(ctx, claim.Status.ProviderID)
	metrics.ObserveProviderCall(providerLabel(claim), "delete", started, resultOf(err))
	if err != nil && !provider.IsNotFound(err) {
		wait := c.retryAfter(claim, err, maxRetryInterval)
		log.FromContext(ctx).Info("deleting the machine of a failed claim, retrying", "error", err.Error(), "after", wait)
		return reconcile.Result{RequeueAfter: wait}
	}
	c.forgetRetries(claim)
	failedCondition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionFailed)
	message := strings.TrimSuffix(failedCondition.Message, "; "+deletingMachineNote) + "; " + machineDeletedNote
	c.setCondition(claim, v1alpha1.ConditionFailed, metav1.ConditionTrue, failedCondition.Reason, message)
	return reconcile.Result{}
}
