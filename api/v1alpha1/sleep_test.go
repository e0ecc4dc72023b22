package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestASleepPolicyAllowsWhatItSays(t *testing.T) {
	pool := func(sleep *Sleep) *NodePool {
		return &NodePool{Spec: NodePoolSpec{Disruption: Disruption{Sleep: sleep}}}
	}
	for _, tc := range []struct {
		name        string
		sleep       *Sleep
		claims      int
		wantAllowed int
		sleepsFor   map[DisruptionReason]bool
		deleteAfter time.Duration
	}{
		{"no policy lets nothing sleep", nil, 10, 0,
			map[DisruptionReason]bool{DisruptionReasonEmpty: false, DisruptionReasonUnderutilized: false}, 0},
		{"a count, both reasons by default", &Sleep{Machines: "3"}, 10, 3,
			map[DisruptionReason]bool{DisruptionReasonEmpty: true, DisruptionReasonUnderutilized: true, DisruptionReasonDrifted: false, DisruptionReasonExpired: false}, DefaultSleepDeleteAfter},
		{"a percentage rounds up", &Sleep{Machines: "50%", DeleteAfter: &metav1.Duration{Duration: time.Hour}}, 3, 2,
			map[DisruptionReason]bool{DisruptionReasonEmpty: true}, time.Hour},
		{"only the reasons named", &Sleep{Machines: "100%", Reasons: []DisruptionReason{DisruptionReasonEmpty}}, 4, 4,
			map[DisruptionReason]bool{DisruptionReasonEmpty: true, DisruptionReasonUnderutilized: false}, DefaultSleepDeleteAfter},
		{"drift is never a sleep reason, even if stored", &Sleep{Machines: "1", Reasons: []DisruptionReason{DisruptionReasonDrifted}}, 4, 1,
			map[DisruptionReason]bool{DisruptionReasonDrifted: false}, DefaultSleepDeleteAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool(tc.sleep)
			if got := p.SleepingMachinesAllowed(tc.claims); got != tc.wantAllowed {
				t.Errorf("SleepingMachinesAllowed(%d) = %d, want %d", tc.claims, got, tc.wantAllowed)
			}
			for reason, want := range tc.sleepsFor {
				if got := p.SleepsFor(reason); got != want {
					t.Errorf("SleepsFor(%s) = %v, want %v", reason, got, want)
				}
			}
			if got := p.SleepDeleteAfter(); got != tc.deleteAfter {
				t.Errorf("SleepDeleteAfter() = %v, want %v", got, tc.deleteAfter)
			}
		})
	}
}

func TestAClaimsPowerStateFollowsItsAnnotationAndCondition(t *testing.T) {
	claim := func(annotated bool, status metav1.ConditionStatus, reason string) *NodeClaim {
		c := &NodeClaim{}
		if annotated {
			c.Annotations = map[string]string{AnnotationSuspend: string(DisruptionReasonEmpty)}
		}
		if status != "" {
			c.Status.Conditions = []metav1.Condition{{Type: ConditionSuspended, Status: status, Reason: reason}}
		}
		return c
	}
	for _, tc := range []struct {
		name                       string
		claim                      *NodeClaim
		suspending, asleep, waking bool
	}{
		{"running", claim(false, "", ""), false, false, false},
		{"awake again", claim(false, metav1.ConditionFalse, ReasonAwake), false, false, false},
		{"suspending", claim(true, metav1.ConditionFalse, ReasonSuspending), true, false, false},
		{"asleep", claim(true, metav1.ConditionTrue, ReasonSuspended), false, true, false},
		{"asked to wake", claim(false, metav1.ConditionTrue, ReasonSuspended), false, false, true},
		{"waking", claim(false, metav1.ConditionFalse, ReasonWaking), false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.claim.Suspending(); got != tc.suspending {
				t.Errorf("Suspending() = %v, want %v", got, tc.suspending)
			}
			if got := tc.claim.Asleep(); got != tc.asleep {
				t.Errorf("Asleep() = %v, want %v", got, tc.asleep)
			}
			if got := tc.claim.Waking(); got != tc.waking {
				t.Errorf("Waking() = %v, want %v", got, tc.waking)
			}
		})
	}
}
