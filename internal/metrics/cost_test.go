package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func claim(shape, price string, conditions ...string) v1alpha1.NodeClaim {
	c := v1alpha1.NodeClaim{}
	c.Spec.Shape = v1alpha1.ClaimShape{Name: shape, Price: price}
	for _, t := range conditions {
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue})
	}
	return c
}

func TestObservePoolClaimsSetsCostAndPhases(t *testing.T) {
	deleting := claim("large", "0.50", v1alpha1.ConditionLaunched, v1alpha1.ConditionReady)
	now := metav1.NewTime(time.Now())
	deleting.DeletionTimestamp = &now
	claims := []v1alpha1.NodeClaim{
		claim("small", "0.10", v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionReady),
		claim("small", "0.10", v1alpha1.ConditionLaunched),
		claim("large", ""),
		deleting,
	}
	ObservePoolClaims("cost-test", claims)

	if got := testutil.ToFloat64(NodePoolHourlyCost.WithLabelValues("cost-test", "small")); got != 0.2 {
		t.Errorf("small cost = %v, want 0.2", got)
	}
	// Unpriced and deleting claims cost nothing.
	if got := testutil.ToFloat64(NodePoolHourlyCost.WithLabelValues("cost-test", "large")); got != 0 {
		t.Errorf("large cost = %v, want 0", got)
	}
	want := map[string]float64{PhaseReady: 1, PhaseLaunched: 1, PhaseLaunching: 1, PhaseTerminating: 1, PhaseRegistered: 0, PhaseFailed: 0}
	for phase, n := range want {
		if got := testutil.ToFloat64(NodeClaimsByPhase.WithLabelValues("cost-test", phase)); got != n {
			t.Errorf("phase %s = %v, want %v", phase, got, n)
		}
	}

	// A shape whose claims are gone leaves the sum; a deleted pool
	// leaves every series.
	ObservePoolClaims("cost-test", claims[2:3])
	if n := testutil.CollectAndCount(NodePoolHourlyCost, "claimscale_nodepool_hourly_cost"); n != 1 {
		t.Errorf("cost series after scale-down = %d, want 1 (large only)", n)
	}
	ForgetPool("cost-test")
	if n := testutil.CollectAndCount(NodeClaimsByPhase, "claimscale_nodeclaims"); n != 0 {
		t.Errorf("phase series after pool deletion = %d, want 0", n)
	}
}

func TestObservePoolLimitsReportsShareOfEachLimit(t *testing.T) {
	three := int32(3)
	cpu := resource.MustParse("8")
	ObservePoolLimits("limit-test", &v1alpha1.Limits{Nodes: &three, CPU: &cpu}, 3, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")})
	if got := testutil.ToFloat64(NodePoolLimitUsage.WithLabelValues("limit-test", "nodes")); got != 1 {
		t.Errorf("nodes usage = %v, want 1", got)
	}
	if got := testutil.ToFloat64(NodePoolLimitUsage.WithLabelValues("limit-test", "cpu")); got != 0.5 {
		t.Errorf("cpu usage = %v, want 0.5", got)
	}
	ObservePoolLimits("limit-test", nil, 3, nil)
	if n := testutil.CollectAndCount(NodePoolLimitUsage, "claimscale_nodepool_limit_usage_ratio"); n != 0 {
		t.Errorf("series after limits removed = %d, want 0", n)
	}
}
