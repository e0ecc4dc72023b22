package metrics

import (
	"regexp"
	"testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// The reason labels of the claim counters are written in one style, the
// disruption and condition reasons' they sit beside: a query by reason
// never has to know which controller counted.
func TestClaimReasonLabelsShareOneStyle(t *testing.T) {
	style := regexp.MustCompile(`^[A-Z][A-Za-z]*$`)
	for _, reason := range []string{
		ReasonProvisioning, ReasonMinNodes, ReasonHeadroom, ReasonReplacement, ReasonRepair, ReasonExternalGRPC,
		ReasonDeleted, ReasonRegistrationTimeout, ReasonInsufficientCapacity, ReasonMachineGone, ReasonGarbageCollectedMachine, ReasonSleepLimit,
		string(v1alpha1.DisruptionReasonEmpty), string(v1alpha1.DisruptionReasonUnderutilized),
		string(v1alpha1.DisruptionReasonDrifted), string(v1alpha1.DisruptionReasonUnhealthy),
	} {
		if !style.MatchString(reason) {
			t.Errorf("reason label %q is not in the style of the others (CamelCase)", reason)
		}
	}
}
