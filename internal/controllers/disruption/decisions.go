package disruption

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// held is a candidate a method would consider but that waits: its pool's
// disruption budget allows no more now, its consolidateAfter has not
// passed, or the pool keeps it for minNodes or headroom.
type held struct {
	candidate *candidate
	// reason is the decision reason (decisions.NodeReason…).
	reason  string
	message string
	// condition, when set, is the message of the claim's Consolidatable
	// condition, where message changes every round (a time left).
	condition string
}

// holdForBudget notes a candidate the budget keeps, once per round: a
// quiet refusal, so that one entry sets its claim's Consolidatable
// condition and its decision record (by its condition) and the node is
// counted once; a budget that holds back hundreds of nodes is one fact,
// not hundreds of events.
func (r *round) holdForBudget(c *candidate, reason v1alpha1.DisruptionReason) {
	for _, refused := range r.refusals {
		if refused.candidate == c {
			return
		}
	}
	r.refusals = append(r.refusals, refusal{candidate: c, reason: eventBlocked, quiet: true,
		note: r.budgetNote(c, reason), condition: v1alpha1.ConsolidatableReasonDisruptionBudget})
}

// hold notes a candidate that waits, once per round.
func (r *round) hold(c *candidate, reason, message string) {
	for _, h := range r.held {
		if h.candidate == c {
			return
		}
	}
	r.held = append(r.held, held{candidate: c, reason: reason, message: message})
}

// waitForConsolidateAfter notes a node that is not a candidate yet: it
// emptied out, or its pods changed, less than its pool's consolidateAfter
// ago. A zero since is a time the round does not know.
func (r *round) waitForConsolidateAfter(c *candidate, what string, since time.Time) {
	after := c.pool.consolidateAfter()
	if since.IsZero() {
		r.hold(c, decisions.NodeReasonConsolidateAfter, fmt.Sprintf("%s, for less than its pool's consolidateAfter of %s so far", what, after))
		return
	}
	stable := fmt.Sprintf("%s at %s, consolidateAfter of %s not yet passed", what, since.UTC().Format(time.RFC3339), after)
	r.hold(c, decisions.NodeReasonConsolidateAfter, fmt.Sprintf("%s (%s left)", stable, (after-r.s.now.Sub(since)).Round(time.Second)))
	if last := &r.held[len(r.held)-1]; last.candidate == c && last.reason == decisions.NodeReasonConsolidateAfter {
		last.condition = stable
	}
}

// emptySinceOf is when the node emptied (stability.emptySince), else when
// its claim's Empty condition became true, else zero.
func emptySinceOf(c *candidate, empty *metav1.Condition, emptySince func(node string) (time.Time, bool)) time.Time {
	if emptySince != nil {
		if since, ok := emptySince(c.node.Name); ok {
			return since
		}
	}
	if empty != nil && empty.Status == metav1.ConditionTrue {
		return empty.LastTransitionTime.Time
	}
	return time.Time{}
}

// budgetNote says that the candidate's pool budget for reason has none
// left: it allows none now, or the nodes already going take it all.
//
// The note names no number that moves while nodes go: it becomes the
// Consolidatable condition of every node the budget holds, and a note that
// changed each round (the budget's share of a shrinking pool) rewrote
// hundreds of claims each round of a large scale-down, taking the API
// server's time from the deletions.
func (r *round) budgetNote(c *candidate, reason v1alpha1.DisruptionReason) string {
	pool := c.pool.pool.Name
	if r.ledger.allowedNow(pool, reason) == 0 {
		return fmt.Sprintf("%s, but pool %s's disruption budget for %s allows 0 disruptions now", what(reason), pool, reason)
	}
	return fmt.Sprintf("%s, but pool %s's disruption budget for %s is taken by the nodes already going", what(reason), pool, reason)
}

func what(reason v1alpha1.DisruptionReason) string {
	switch reason {
	case v1alpha1.DisruptionReasonEmpty:
		return "empty"
	case v1alpha1.DisruptionReasonUnderutilized:
		return "a consolidation candidate"
	}
	return strings.ToLower(string(reason))
}

// recordDecisions keeps the round's decision about each node it looked at:
// the nodes the command takes, the nodes refused and why, the nodes the
// budget keeps.
func (c *Controller) recordDecisions(s *state, r *round, cmd *command) {
	if c.Decisions == nil {
		return
	}
	// One record per node and round, ranked as the claim's condition
	// (report) and simulate --scale-down (PlanScaleDown) rank them: the
	// decision, then the first refusal, then the first hold.
	recorded := map[string]bool{}
	record := func(cand *candidate, outcome, reason, message string) {
		if recorded[cand.claim.Name] {
			return
		}
		recorded[cand.claim.Name] = true
		name := cand.claim.Status.NodeName
		if cand.node != nil {
			name = cand.node.Name
		}
		c.Decisions.RecordNode(decisions.NodeRecord{
			Node: name, NodeClaim: cand.claim.Name, Pool: cand.pool.pool.Name, Time: s.now,
			Outcome: outcome, Reason: reason, Message: message,
		})
	}
	if cmd != nil {
		for _, cand := range cmd.candidates {
			record(cand, decisions.NodeDisrupting, string(cmd.reason), cmd.message)
		}
	}
	for _, refused := range r.refusals {
		record(refused.candidate, decisions.NodeKept, refusalReason(refused), refusalMessage(refused))
	}
	for _, h := range r.held {
		record(h.candidate, decisions.NodeKept, h.reason, h.message)
	}
}

// conditionDecisions maps the Consolidatable reason a refusal carries to
// the bounded reasons of the records and metrics.
var conditionDecisions = map[string]string{
	v1alpha1.ConsolidatableReasonDoNotDisrupt:         decisions.NodeReasonDoNotDisrupt,
	v1alpha1.ConsolidatableReasonPodDisruptionBudget:  decisions.NodeReasonPDB,
	v1alpha1.ConsolidatableReasonPodWithoutController: decisions.NodeReasonNoController,
	v1alpha1.ConsolidatableReasonDisruptionBudget:     decisions.NodeReasonBudget,
	v1alpha1.ConsolidatableReasonPendingPods:          decisions.NodeReasonPendingPods,
}

// refusalReason gives a refusal's reason in the records and metrics: the
// Consolidatable reason the safety rules set, else the reason the method
// that refused gave.
func refusalReason(refused refusal) string {
	if reason, ok := conditionDecisions[refused.condition]; ok {
		return reason
	}
	if refused.record != "" {
		return refused.record
	}
	if refused.reason == eventUnconsolidatable {
		return decisions.NodeReasonWouldNotFit
	}
	return decisions.NodeReasonOther
}

// refusalMessage is what a refusal says in the claim's condition, its
// record and simulate --scale-down: its note, without the prefix its
// event carries.
func refusalMessage(refused refusal) string {
	return strings.TrimPrefix(refused.note, unconsolidatablePrefix)
}

// unconsolidatablePrefix starts the note of a consolidation refused
// because of where its pods would go.
const unconsolidatablePrefix = "Consolidatable=False: "

// unconsolidatableCondition is the Consolidatable reason of a node whose
// consolidation was refused: the pool's minNodes or headroom, or pending
// pods that need its room, when those held it, else its pods fit nowhere
// cheaper.
func unconsolidatableCondition(refused refusal) string {
	switch refused.record {
	case decisions.NodeReasonPendingPods:
		return v1alpha1.ConsolidatableReasonPendingPods
	case decisions.NodeReasonMinNodes:
		return v1alpha1.ConsolidatableReasonMinNodes
	case decisions.NodeReasonHeadroom:
		return v1alpha1.ConsolidatableReasonHeadroom
	}
	return v1alpha1.ConsolidatableReasonPodsDoNotFit
}
