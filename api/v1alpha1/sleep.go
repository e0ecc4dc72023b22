package v1alpha1

import (
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A claim's machine is in one of four power states, read from the
// suspend annotation (what is wanted) and the Suspended condition (what
// the lifecycle has done):
//
//	running     no annotation, Suspended absent or False/Awake
//	suspending  annotation set, Suspended not True
//	asleep      annotation set, Suspended True
//	waking      annotation removed, Suspended True or False/Waking
//
// A suspending claim's node is leaving, an asleep claim is an offering
// provisioning may wake, and a waking claim is in flight like a launch.

// SleepRequested reports whether the claim's machine is to sleep.
func (in *NodeClaim) SleepRequested() bool {
	_, ok := in.Annotations[AnnotationSuspend]
	return ok
}

// Asleep reports whether the claim's machine is stopped, with no Node, and
// is to stay so.
func (in *NodeClaim) Asleep() bool {
	return in.SleepRequested() && meta.IsStatusConditionTrue(in.Status.Conditions, ConditionSuspended)
}

// Suspending reports whether the claim's node is being drained and its
// machine stopped.
func (in *NodeClaim) Suspending() bool {
	return in.SleepRequested() && !meta.IsStatusConditionTrue(in.Status.Conditions, ConditionSuspended)
}

// Waking reports whether the claim's machine slept, was asked to wake,
// and has no registered Node yet.
func (in *NodeClaim) Waking() bool {
	if in.SleepRequested() {
		return false
	}
	suspended := meta.FindStatusCondition(in.Status.Conditions, ConditionSuspended)
	return suspended != nil && (suspended.Status == metav1.ConditionTrue || suspended.Reason == ReasonWaking)
}

// AsleepSince is when the claim's machine went to sleep; zero unless it
// sleeps.
func (in *NodeClaim) AsleepSince() time.Time {
	if !in.Asleep() {
		return time.Time{}
	}
	return meta.FindStatusCondition(in.Status.Conditions, ConditionSuspended).LastTransitionTime.Time
}

// DefaultSleepDeleteAfter is how long a machine sleeps when the pool says
// nothing.
const DefaultSleepDeleteAfter = 24 * time.Hour

// SleepDeleteAfter is how long the pool's machines may sleep; zero when
// the pool lets none sleep.
func (in *NodePool) SleepDeleteAfter() time.Duration {
	sleep := in.Spec.Disruption.Sleep
	if sleep == nil {
		return 0
	}
	if sleep.DeleteAfter == nil {
		return DefaultSleepDeleteAfter
	}
	return sleep.DeleteAfter.Duration
}

// SleepsFor reports whether the pool puts a node removed for reason to
// sleep instead of deleting it. Drift, expiry and repair never do.
func (in *NodePool) SleepsFor(reason DisruptionReason) bool {
	sleep := in.Spec.Disruption.Sleep
	if sleep == nil || (reason != DisruptionReasonEmpty && reason != DisruptionReasonUnderutilized) {
		return false
	}
	if len(sleep.Reasons) == 0 {
		return true
	}
	for _, allowed := range sleep.Reasons {
		if allowed == reason {
			return true
		}
	}
	return false
}

// SleepingMachinesAllowed is how many of the pool's machines may sleep at
// once, given how many claims it has, sleeping ones included. A
// percentage rounds up, as the disruption budgets' do.
func (in *NodePool) SleepingMachinesAllowed(claims int) int {
	sleep := in.Spec.Disruption.Sleep
	if sleep == nil {
		return 0
	}
	if percent, ok := strings.CutSuffix(sleep.Machines, "%"); ok {
		p, err := strconv.Atoi(percent)
		if err != nil {
			return 0
		}
		return int(math.Ceil(float64(claims) * float64(p) / 100))
	}
	count, err := strconv.Atoi(sleep.Machines)
	if err != nil {
		return 0
	}
	return count
}
