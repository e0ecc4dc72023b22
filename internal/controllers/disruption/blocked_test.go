package disruption

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// The blocked-nodes gauge counts each kept node once, by the reason on
// its Consolidatable condition, writes 0 for the reasons nothing blocks,
// and drops a deleted pool's series.
func TestRoundPublishesBlockedNodesByReason(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).node("c", c4).node("d", c4).
		pod("p", "c", "1", doNotDisrupt).
		pod("q", "d", "1", func(pod *corev1.Pod) { pod.Labels = map[string]string{"app": "guarded"} })
	f.pool.Name = "blocked-metrics"
	f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
	f.budgets = []policyv1.PodDisruptionBudget{{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}}
	for i := range f.claims {
		f.claims[i].Spec.NodePoolRef.Name = f.pool.Name
	}
	withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
	withCondition(f.claim("b"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
	s := f.state()
	r := f.round(s)
	if _, err := r.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &reporter{metricPools: map[string]bool{}}
	_, total, _ := s.poolTotals()
	c.setMetrics(s, r, r.ledger, total)

	for reason, want := range map[string]float64{
		v1alpha1.ConsolidatableReasonDisruptionBudget:     1, // b: empty, but a took the budget of one
		v1alpha1.ConsolidatableReasonDoNotDisrupt:         1, // c
		v1alpha1.ConsolidatableReasonPodDisruptionBudget:  1, // d
		v1alpha1.ConsolidatableReasonPodWithoutController: 0,
	} {
		if got := testutil.ToFloat64(metrics.DisruptionBlockedNodes.WithLabelValues(f.pool.Name, reason)); got != want {
			t.Errorf("blocked nodes for %s = %v, want %v", reason, got, want)
		}
	}

	c.setMetrics(newState(f.now, objects{}), r, r.ledger, nil)
	if n := testutil.CollectAndCount(metrics.DisruptionBlockedNodes, "claimscale_disruption_blocked_nodes"); n != 0 {
		t.Errorf("%d blocked-node series left after the pool's deletion", n)
	}
}

// Nodes the round holds for their consolidateAfter or their pool's
// minNodes are no budget's: the blocked count leaves them out.
func TestBlockedNodesLeaveOutWhatConsolidateAfterAndMinNodesHold(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "1")
	f.pool.Spec.MinNodes = 2
	withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
	s := f.state()
	stable := map[string]time.Time{"a": f.now.Add(-time.Hour), "b": f.now.Add(-time.Second)}
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	r := newRound(s, s.candidates(), budgets, stable, nil, newMemory(memoryBackoff))
	if _, err := r.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.held) != 2 {
		t.Fatalf("held %d nodes, want a for minNodes and b for consolidateAfter", len(r.held))
	}
	if blocked := r.blockedNodes(); len(blocked) != 0 {
		t.Errorf("blocked %v, want nothing", blocked)
	}
}
