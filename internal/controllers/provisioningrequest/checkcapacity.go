package provisioningrequest

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
)

// checkCapacity answers a check-capacity request: do its pods fit, after
// every booked pod, on the nodes there are and the claims booting? Nothing
// is bought. When they fit, their room is booked; when not, the request
// says why and is checked again.
func (c *Controller) checkCapacity(ctx context.Context, request *autoscalingv1.ProvisioningRequest, pods requestPods) (reconcile.Result, error) {
	if over, err := c.overQuota(ctx, request, pods); err != nil || over {
		return reconcile.Result{RequeueAfter: c.Recheck}, err
	}
	placed, err := c.place(ctx, request, pods, false)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := c.Clock.Now()
	if !placed.fits() {
		message := "capacity is not found on the nodes there are and those booting: " + describe(placed.unschedulable, len(pods.pods))
		if noRetry(request) {
			setCondition(request, autoscalingv1.ConditionFailed, metav1.ConditionTrue, autoscalingv1.ReasonCapacityIsNotFound, message, now)
			setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsNotFound, message, now)
			return reconcile.Result{}, nil
		}
		setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionFalse, autoscalingv1.ReasonCapacityIsNotFound,
			fmt.Sprintf("%s; checked again every %s", message, c.Recheck), now)
		return reconcile.Result{RequeueAfter: c.Recheck}, nil
	}
	c.bookPlacement(request, pods, placed, nil)
	setCondition(request, autoscalingv1.ConditionProvisioned, metav1.ConditionTrue, autoscalingv1.ReasonCapacityIsFound,
		fmt.Sprintf("the request's %d pods fit on the nodes there are and those booting; their room is booked for %s", len(pods.pods), c.BookingTime), now)
	c.changed()
	return reconcile.Result{RequeueAfter: min(c.BookingTime, c.Recheck)}, nil
}

// noRetry says whether the request asks to fail rather than wait for
// capacity (parameter noRetry: "true").
func noRetry(request *autoscalingv1.ProvisioningRequest) bool {
	return request.Spec.Parameters[autoscalingv1.ParameterNoRetry] == "true"
}
