package disruption

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// The claims a round starts from are the cache's, shared with every
// reader: a round that writes a condition must write it to a copy of its
// own, and later writes in the round, through whichever pointer, must
// build on that copy.
func TestStatusChangesCopyTheCachesClaimOnceAndLeaveItAsItWas(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4)
	s := f.state()
	cached := s.claims["a"]
	before := cached.DeepCopy()
	c := &writer{clock: clocktesting.NewFakeClock(f.now)}

	write, changed := c.statusChange(s, cached, func(claim *v1alpha1.NodeClaim) {
		c.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionTrue, "Empty", "empty")
	})
	if !changed || write.claim == cached {
		t.Fatalf("the Empty condition was not written to a copy: changed=%t, same object=%t", changed, write.claim == cached)
	}
	if write.stored.Status.Conditions[0].Type != before.Status.Conditions[0].Type || len(write.stored.Status.Conditions) != len(before.Status.Conditions) {
		t.Fatalf("the write's stored claim is not the claim as it was: %v", write.stored.Status.Conditions)
	}
	if s.claims["a"] != write.claim {
		t.Fatal("the round's claims do not show the round's own copy")
	}

	// Through the old pointer, as a candidate built before the first write
	// holds it: the second change builds on the first.
	second, changed := c.statusChange(s, cached, func(claim *v1alpha1.NodeClaim) {
		c.setCondition(claim, v1alpha1.ConditionConsolidatable, metav1.ConditionFalse, "Blocked", "blocked")
	})
	if !changed || second.claim != write.claim {
		t.Fatal("a second change did not land on the round's copy")
	}
	for _, conditionType := range []string{v1alpha1.ConditionEmpty, v1alpha1.ConditionConsolidatable} {
		if findCondition(second.claim, conditionType) == nil {
			t.Errorf("the round's copy lacks %s after both changes: %v", conditionType, second.claim.Status.Conditions)
		}
	}

	if _, changed := c.statusChange(s, s.claims["b"], func(claim *v1alpha1.NodeClaim) {
		c.setCondition(claim, v1alpha1.ConditionInitialized, metav1.ConditionTrue, "", "")
	}); changed || len(s.owned) != 1 {
		t.Fatalf("a change that changes nothing copied claim b (changed=%t, %d copies)", changed, len(s.owned))
	}

	if len(cached.Status.Conditions) != len(before.Status.Conditions) {
		t.Fatalf("the cache's claim was written to: %v", cached.Status.Conditions)
	}
	for i := range before.Status.Conditions {
		if cached.Status.Conditions[i] != before.Status.Conditions[i] {
			t.Fatalf("the cache's claim was written to: %v", cached.Status.Conditions)
		}
	}
}

func findCondition(claim *v1alpha1.NodeClaim, conditionType string) *metav1.Condition {
	for i := range claim.Status.Conditions {
		if claim.Status.Conditions[i].Type == conditionType {
			return &claim.Status.Conditions[i]
		}
	}
	return nil
}

// A deferred change waits for the round's end, unless a later write to the
// same claim carries it: that write starts from the claim as stored before
// both, so one patch holds the two.
func TestADeferredChangeGoesWithTheNextWriteOrAtTheRoundsEnd(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4)
	s := f.state()
	before := s.claims["a"].DeepCopy()
	c := &writer{clock: clocktesting.NewFakeClock(f.now)}
	empty := func(claim *v1alpha1.NodeClaim) {
		c.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionTrue, "Empty", "empty")
	}
	c.deferStatus(s, s.claims["a"], empty)
	c.deferStatus(s, s.claims["b"], empty)
	if findCondition(s.claims["a"], v1alpha1.ConditionEmpty) == nil {
		t.Fatal("the round does not see its deferred change")
	}

	mark, changed := c.statusChange(s, s.claims["a"], func(claim *v1alpha1.NodeClaim) {
		c.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionTrue, "Empty", "deleting")
	})
	if !changed || len(mark.stored.Status.Conditions) != len(before.Status.Conditions) || findCondition(mark.stored, v1alpha1.ConditionEmpty) != nil {
		t.Fatalf("the mark's write starts from %v, want the claim as stored before the deferred change", mark.stored.Status.Conditions)
	}
	if findCondition(mark.claim, v1alpha1.ConditionEmpty) == nil || findCondition(mark.claim, v1alpha1.ConditionDisrupting) == nil {
		t.Fatalf("the mark's write does not carry both changes: %v", mark.claim.Status.Conditions)
	}

	unsent := s.takeAllUnsent()
	if len(unsent) != 1 || unsent[0].claim.Name != "b" || findCondition(unsent[0].claim, v1alpha1.ConditionEmpty) == nil ||
		findCondition(unsent[0].stored, v1alpha1.ConditionEmpty) != nil {
		t.Fatalf("left for the round's end: %+v, want b's Empty alone", unsent)
	}
	if len(s.takeAllUnsent()) != 0 {
		t.Fatal("the deferred changes were handed out twice")
	}
}
