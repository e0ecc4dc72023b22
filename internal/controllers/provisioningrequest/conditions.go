package provisioningrequest

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
)

// setCondition sets one of the request's conditions; the transition time
// is now when the status changes, kept when only the reason or message
// does (the booking is timed from Provisioned's).
func setCondition(request *autoscalingv1.ProvisioningRequest, conditionType string, status metav1.ConditionStatus, reason, message string, now time.Time) {
	existing := meta.FindStatusCondition(request.Status.Conditions, conditionType)
	condition := metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: truncate(message),
		ObservedGeneration: request.Generation, LastTransitionTime: metav1.NewTime(now),
	}
	if existing != nil && existing.Status == status {
		condition.LastTransitionTime = existing.LastTransitionTime
	}
	meta.SetStatusCondition(&request.Status.Conditions, condition)
}

// truncate keeps a message within the API's 32768 characters.
func truncate(message string) string {
	const limit = 32768
	if len(message) <= limit {
		return message
	}
	return message[:limit-3] + "..."
}

func isTrue(request *autoscalingv1.ProvisioningRequest, conditionType string) bool {
	return meta.IsStatusConditionTrue(request.Status.Conditions, conditionType)
}
