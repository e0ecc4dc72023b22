package provisioningrequest

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
)

// bookPlacement keeps the room a simulation found for the request's pods:
// each pod on the node or booting claim it was placed on, or on the claim
// bought for the new node that holds it (claims, by the new node's name).
// Pods placed nowhere keep no room.
func (c *Controller) bookPlacement(request *autoscalingv1.ProvisioningRequest, pods requestPods, placed placement, claims map[string]string) {
	bk := &booking{uid: request.UID, class: request.Spec.ProvisioningClassName, pods: make([]bookedPod, 0, len(pods.pods))}
	onNew := map[string]string{}
	for _, node := range placed.newNodes {
		for _, pod := range node.Pods {
			if isRequestPod(request, pod) {
				onNew[string(pod.UID)] = claims[node.Name]
			}
		}
	}
	for i, pod := range pods.pods {
		booked := bookedPod{template: pods.templates[i]}
		switch on := placed.on[i]; {
		case on != "" && placed.inFlight(on):
			booked.claim = on
		case on != "":
			booked.node = on
		case onNew[string(pod.UID)] != "":
			booked.claim = onNew[string(pod.UID)]
		default:
			continue
		}
		bk.pods = append(bk.pods, booked)
	}
	c.Bookings.book(client.ObjectKeyFromObject(request), bk)
}

// keepBooking keeps a provisioned request's room until its pods are all
// bound (BookingExpired, CapacityBookingConsumed), the booking time since
// Provisioned passes (BookingExpired, CapacityReservationTimeExpired), or
// a node bought for it goes (CapacityRevoked). After a restart it books
// the room again where the pods fit now.
func (c *Controller) keepBooking(ctx context.Context, request *autoscalingv1.ProvisioningRequest) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(request)
	total := 0
	for _, podSet := range request.Spec.PodSets {
		total += int(podSet.Count)
	}
	arrived, err := consumers(ctx, c.Kube, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	bound := arrived.bound()
	now := c.Clock.Now()
	if bound >= total {
		setCondition(request, autoscalingv1.ConditionBookingExpired, metav1.ConditionTrue, autoscalingv1.ReasonCapacityBookingConsumed,
			fmt.Sprintf("all %d pods of the request are bound; the booking ends", total), now)
		c.forget(key)
		return reconcile.Result{}, nil
	}
	provisioned := meta.FindStatusCondition(request.Status.Conditions, autoscalingv1.ConditionProvisioned)
	expires := provisioned.LastTransitionTime.Add(c.BookingTime)
	if !now.Before(expires) {
		setCondition(request, autoscalingv1.ConditionBookingExpired, metav1.ConditionTrue, autoscalingv1.ReasonCapacityReservationTimeExpired,
			fmt.Sprintf("the capacity was booked for %s and %d of the request's %d pods are bound; it is no longer kept", c.BookingTime, bound, total), now)
		c.forget(key)
		return reconcile.Result{}, nil
	}
	if request.Spec.ProvisioningClassName == autoscalingv1.ClassBestEffortAtomicScaleUp {
		claims, err := c.claimsOf(ctx, request)
		if err != nil {
			return reconcile.Result{}, err
		}
		if gone := revoked(claims); gone != "" {
			setCondition(request, autoscalingv1.ConditionCapacityRevoked, metav1.ConditionTrue, autoscalingv1.ReasonNodeRemoved, gone+" before the request's pods arrived", now)
			c.forget(key)
			return reconcile.Result{}, nil
		}
	}
	if !c.Bookings.has(key, request.UID) {
		if err := c.rebook(ctx, request); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: min(expires.Sub(now), c.Recheck)}, nil
}

// rebook books a request's room where its pods fit now, with no new node:
// after a restart, the room provisioned for it before.
func (c *Controller) rebook(ctx context.Context, request *autoscalingv1.ProvisioningRequest) error {
	pods, err := podsOf(ctx, c.Kube, request)
	var missing *missingTemplateError
	if errors.As(err, &missing) {
		// The pods' description is gone: there is nothing to keep room
		// for, and the booking runs out.
		return nil
	}
	if err != nil {
		return err
	}
	placed, err := c.place(ctx, request, pods, false)
	if err != nil {
		return err
	}
	c.bookPlacement(request, pods, placed, nil)
	c.changed()
	return nil
}
