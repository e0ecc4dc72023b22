package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// A sleeping machine is counted as asleep, not as a launch that waits
// for its node (the alerts watch those), and costs nothing at its
// shape's price.
func TestObservePoolClaimsCountsSleepingMachinesApart(t *testing.T) {
	asleep := claim("small", "0.10", v1alpha1.ConditionLaunched, v1alpha1.ConditionSuspended)
	claims := []v1alpha1.NodeClaim{
		claim("small", "0.10", v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionReady),
		asleep,
		claim("small", "0.10", v1alpha1.ConditionLaunched, v1alpha1.ConditionSuspended),
	}
	ObservePoolClaims("sleep-test", claims)
	t.Cleanup(func() { ForgetPool("sleep-test") })

	if got := testutil.ToFloat64(NodePoolSleepingMachines.WithLabelValues("sleep-test")); got != 2 {
		t.Errorf("sleeping machines = %v, want 2", got)
	}
	for phase, want := range map[string]float64{PhaseAsleep: 2, PhaseLaunched: 0, PhaseReady: 1} {
		if got := testutil.ToFloat64(NodeClaimsByPhase.WithLabelValues("sleep-test", phase)); got != want {
			t.Errorf("phase %s = %v, want %v", phase, got, want)
		}
	}
	if got := testutil.ToFloat64(NodePoolHourlyCost.WithLabelValues("sleep-test", "small")); got != 0.1 {
		t.Errorf("small cost = %v, want 0.1 (the running machine only)", got)
	}
	ForgetPool("sleep-test")
	if n := testutil.CollectAndCount(NodePoolSleepingMachines, "claimscale_nodepool_sleeping_machines"); n != 0 {
		t.Errorf("sleeping series after pool deletion = %d, want 0", n)
	}
}
