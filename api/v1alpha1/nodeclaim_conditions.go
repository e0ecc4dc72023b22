package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition sets one of the claim's conditions. The transition time is
// now when the status changes and kept when only the reason or message
// does; now comes from the caller's clock, so timeouts measured from
// transitions follow an injected clock in tests.
func (in *NodeClaim) SetCondition(conditionType string, status metav1.ConditionStatus, reason, message string, now time.Time) {
	existing := meta.FindStatusCondition(in.Status.Conditions, conditionType)
	if existing != nil && existing.Status == status && existing.Reason == reason && existing.Message == message {
		return
	}
	condition := metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: in.Generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	if existing != nil && existing.Status == status {
		condition.LastTransitionTime = existing.LastTransitionTime
	}
	meta.SetStatusCondition(&in.Status.Conditions, condition)
}
