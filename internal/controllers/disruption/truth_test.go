package disruption

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// reportingController is a controller whose report can run without an
// API server: its writes are left in the round's state (deferStatus).
func reportingController(now time.Time) *Controller {
	c := &Controller{Clock: clocktesting.NewFakeClock(now), Recorder: events.NewFakeRecorder(100), Decisions: decisions.NewStore(false)}
	c.wire()
	return c
}

// reportRound decides a round on the fixture with the controller's memory
// and reports it, returning the Consolidatable condition the round would
// write to the named claim, if any.
func reportRound(t *testing.T, c *Controller, f *fixture, claim string) (*round, string) {
	t.Helper()
	s := f.state()
	stable := map[string]time.Time{}
	for _, node := range f.nodes {
		stable[node.Name] = f.now.Add(-time.Hour)
	}
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	r := newRound(s, s.candidates(), budgets, stable, nil, c.memory)
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.reporter.report(s, r, cmd, budgets, total)
	c.reporter.recordDecisions(s, r, cmd)
	for _, w := range s.takeAllUnsent() {
		if w.claim.Name == claim {
			if condition := meta.FindStatusCondition(w.claim.Status.Conditions, v1alpha1.ConditionConsolidatable); condition != nil {
				return r, condition.Reason + ": " + condition.Message
			}
		}
	}
	return r, ""
}

// The Consolidatable condition is written in the round that decides, and
// again in every later round until it is on the claim: a write that failed
// is not left for the event's ten-minute de-duplication, nor lost when the
// decision is remembered and not simulated again.
func TestConsolidatableIsWrittenEveryRoundUntilItIsOnTheClaim(t *testing.T) {
	f := newFixture(c4, c2).node("a", c2).pod("p", "a", "1500m")
	c := reportingController(f.now)
	want := v1alpha1.ConsolidatableReasonPodsDoNotFit + ": its pods fit only on a new node, and the cheapest (c2 of pool pool at 0.2/h) is not cheaper than 0.2/h"
	if _, got := reportRound(t, c, f, "a"); got != want {
		t.Fatalf("first round writes %q, want %q", got, want)
	}
	// The write failed: the claim carries no condition. A second later
	// the event is not due and the decision is remembered.
	f.now = f.now.Add(time.Second)
	r, got := reportRound(t, c, f, "a")
	if len(r.refusals) != 0 {
		t.Fatalf("the second round simulated again: %v", notes(r))
	}
	if got != want {
		t.Fatalf("second round writes %q, want the first round's verdict %q again", got, want)
	}
	record, _ := c.Decisions.Node("a")
	if record.Reason != decisions.NodeReasonNotCheaper || v1alpha1.ConsolidatableReasonPodsDoNotFit+": "+record.Message != want {
		t.Errorf("record %s %q, want the condition's message", record.Reason, record.Message)
	}
}

// A node pinned by do-not-disrupt says so while its consolidateAfter has
// not passed, in its record and its condition alike, not "consolidateAfter,
// 27s left".
func TestDoNotDisruptOutranksConsolidateAfter(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1", doNotDisrupt).pod("q", "b", "3")
	c := reportingController(f.now)
	s := f.state()
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	// a's pods changed 3s ago, less than the pool's consolidateAfter.
	stable := map[string]time.Time{"a": f.now.Add(-3 * time.Second), "b": f.now.Add(-3 * time.Second)}
	r := newRound(s, s.candidates(), budgets, stable, nil, c.memory)
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.reporter.report(s, r, cmd, budgets, total)
	c.reporter.recordDecisions(s, r, cmd)
	record, _ := c.Decisions.Node("a")
	if record.Reason != decisions.NodeReasonDoNotDisrupt || record.Message != "runs pods, but pod default/p is annotated claimscale.io/do-not-disrupt" {
		t.Errorf("record of the pinned node: %s %q", record.Reason, record.Message)
	}
	var condition string
	for _, w := range s.takeAllUnsent() {
		if w.claim.Name == "a" {
			if found := meta.FindStatusCondition(w.claim.Status.Conditions, v1alpha1.ConditionConsolidatable); found != nil {
				condition = found.Reason + ": " + found.Message
			}
		}
	}
	if condition != "DoNotDisrupt: runs pods, but pod default/p is annotated claimscale.io/do-not-disrupt" {
		t.Errorf("condition of the pinned node: %q", condition)
	}
	if other, _ := c.Decisions.Node("b"); other.Reason != decisions.NodeReasonConsolidateAfter {
		t.Errorf("the node nothing pins waits for consolidateAfter: %s %q", other.Reason, other.Message)
	}
}
