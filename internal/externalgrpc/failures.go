package externalgrpc

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
)

// Instance error classes cluster-autoscaler knows.
const (
	errorClassOutOfResources = 1
	errorClassOther          = 99
)

// Error codes of failed instances, stable for alerts and for
// cluster-autoscaler's events and metrics, which name them.
const (
	ErrorCodeRegistrationTimeout  = "registration-timeout"
	ErrorCodeInsufficientCapacity = "insufficient-capacity"
	ErrorCodeLaunchFailed         = "launch-failed"
	ErrorCodeProviderUnavailable  = "provider-unavailable"
	ErrorCodeNeverReady           = "node-never-ready"
)

// DefaultReadyTimeout is how long a registered node may stay not Ready
// before it is reported as a failed instance, when its pool sets no
// registrationTimeout: cluster-autoscaler's --max-node-provision-time.
const DefaultReadyTimeout = 15 * time.Minute

// neverReady is the failure of a claim whose node registered and has not
// become Ready (Initialized) within the timeout since: cluster-autoscaler
// counts such a node as upcoming for good otherwise, and never backs the
// group off nor replaces it.
func neverReady(claim *v1alpha1.NodeClaim, now time.Time, timeout time.Duration) *protos.InstanceErrorInfo {
	registeredAt := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionRegistered)
	if registeredAt == nil || registeredAt.Status != metav1.ConditionTrue || !claim.DeletionTimestamp.IsZero() ||
		meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
		return nil
	}
	if now.Sub(registeredAt.LastTransitionTime.Time) < timeout {
		return nil
	}
	message := fmt.Sprintf("node %s registered %s ago and has not become Ready (limit %s)", claim.Status.NodeName, now.Sub(registeredAt.LastTransitionTime.Time).Round(time.Second), timeout)
	if initialized := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionInitialized); initialized != nil && initialized.Message != "" {
		message += ": " + initialized.Message
	}
	return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeNeverReady, ErrorMessage: message, InstanceErrorClass: errorClassOther}
}

// instanceError is the failure a claim reports to cluster-autoscaler, if
// any. In externalgrpc mode a claim that failed for good stays, Failed,
// with its machine deleted, until cluster-autoscaler deletes it; a launch
// that keeps failing is retried and reported meanwhile. Any of these is a
// failed creation to cluster-autoscaler, which backs the group off and
// deletes the instance; no capacity is class 1 (out of resources), the
// rest class 99. A machine the provider is still making (Launching) is no
// error: cluster-autoscaler would back the group off and delete a slow
// clone.
func instanceError(claim *v1alpha1.NodeClaim) *protos.InstanceErrorInfo {
	if failed := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionFailed); failed != nil && failed.Status == metav1.ConditionTrue {
		switch failed.Reason {
		case v1alpha1.ReasonInsufficientCapacity:
			return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeInsufficientCapacity, ErrorMessage: failed.Message, InstanceErrorClass: errorClassOutOfResources}
		case v1alpha1.ReasonRegistrationTimeout:
			return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeRegistrationTimeout, ErrorMessage: failed.Message, InstanceErrorClass: errorClassOther}
		}
		return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeLaunchFailed, ErrorMessage: failed.Message, InstanceErrorClass: errorClassOther}
	}
	launched := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionLaunched)
	if launched == nil || launched.Status == metav1.ConditionTrue {
		return nil
	}
	switch launched.Reason {
	case "InsufficientCapacity":
		return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeInsufficientCapacity, ErrorMessage: launched.Message, InstanceErrorClass: errorClassOutOfResources}
	case "LaunchFailed":
		return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeLaunchFailed, ErrorMessage: launched.Message, InstanceErrorClass: errorClassOther}
	case "ProviderUnavailable":
		return &protos.InstanceErrorInfo{ErrorCode: ErrorCodeProviderUnavailable, ErrorMessage: launched.Message, InstanceErrorClass: errorClassOther}
	}
	return nil
}
