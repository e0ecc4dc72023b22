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

// Reasons of the Failed condition; the externalgrpc shim turns each into
// the stable error code cluster-autoscaler sees.
const (
	FailedRegistrationTimeout  = "RegistrationTimeout"
	FailedInsufficientCapacity = "InsufficientCapacity"
)

// failed says whether the claim gave up for good: nothing more is done
// for it until it is deleted.
func failed(claim *v1alpha1.NodeClaim) bool {
	return meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionFailed)
}

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
	if claim.Status.ProviderID != "" {
		machines, err := c.providerOf(ctx, claim)
		if err != nil {
			return reconcile.Result{RequeueAfter: c.retryAfter(claim, err, maxRetryInterval)}, nil
		}
		started := time.Now()
		err = machines.Delete(ctx, claim.Status.ProviderID)
		metrics.ObserveProviderCall(providerLabel(claim), "delete", started, resultOf(err))
		if err != nil && !provider.IsNotFound(err) {
			wait := c.retryAfter(claim, err, maxRetryInterval)
			log.FromContext(ctx).Info("deleting the machine of a failed claim, retrying", "error", err.Error(), "after", wait)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		c.forgetRetries(claim)
	}
	c.setCondition(claim, v1alpha1.ConditionFailed, metav1.ConditionTrue, reason,
		fmt.Sprintf("%s; the machine is deleted, the claim stays until cluster-autoscaler deletes it", message))
	c.eventf(ctx, claim, nil, corev1.EventTypeWarning, "Failed", "GiveUp", "%s; kept for cluster-autoscaler to see", message)
	return reconcile.Result{}, nil
}
