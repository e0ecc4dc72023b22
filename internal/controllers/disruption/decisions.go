package disruption

import (
	"fmt"
	"strings"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// held is a candidate a method would consider but that waits: its pool's
// disruption budget allows no more now.
type held struct {
	candidate *candidate
	message   string
}

// holdForBudget notes a candidate the budget keeps, once per round.
func (r *round) holdForBudget(c *candidate, reason v1alpha1.DisruptionReason) {
	for _, h := range r.held {
		if h.candidate == c {
			return
		}
	}
	r.held = append(r.held, held{candidate: c, message: r.budgetNote(c, reason)})
}

// budgetNote says that the candidate's pool budget for reason has none
// left, with the budget's number.
func (r *round) budgetNote(c *candidate, reason v1alpha1.DisruptionReason) string {
	pool := c.pool.pool.Name
	return fmt.Sprintf("%s, but pool %s's disruption budget for %s allows %d disruptions now and none is left",
		what(reason), pool, reason, r.ledger.allowedNow(pool, reason))
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
	record := func(cand *candidate, outcome, reason, message string) {
		name := cand.claim.Status.NodeName
		if cand.node != nil {
			name = cand.node.Name
		}
		c.Decisions.RecordNode(decisions.NodeRecord{
			Node: name, NodeClaim: cand.claim.Name, Pool: cand.pool.pool.Name, Time: s.now,
			Outcome: outcome, Reason: reason, Message: message,
		})
	}
	for _, refused := range r.refusals {
		record(refused.candidate, decisions.NodeKept, refusalReason(refused), refused.note)
	}
	for _, h := range r.held {
		record(h.candidate, decisions.NodeKept, decisions.NodeReasonBudget, h.message)
	}
	if cmd != nil {
		for _, cand := range cmd.candidates {
			record(cand, decisions.NodeDisrupting, string(cmd.reason), cmd.message)
		}
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
// Consolidatable reason the safety rules set, else what consolidation's
// note says.
func refusalReason(refused refusal) string {
	if reason, ok := conditionDecisions[refused.condition]; ok {
		return reason
	}
	switch {
	case strings.Contains(refused.note, "is not cheaper"):
		return decisions.NodeReasonNotCheaper
	case refused.reason == eventUnconsolidatable:
		return decisions.NodeReasonWouldNotFit
	}
	return decisions.NodeReasonOther
}
