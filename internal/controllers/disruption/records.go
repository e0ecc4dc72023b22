package disruption

import (
	"strings"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// recordDecisions keeps the round's decision about each node it looked at:
// the nodes the command takes, the nodes refused and why, the nodes the
// budget keeps.
func (rep *reporter) recordDecisions(s *state, r *round, cmd *command) {
	if rep.store == nil {
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
		rep.store.RecordNode(decisions.NodeRecord{
			Node: name, NodeClaim: cand.claim.Name, Pool: cand.pool.pool.Name, Time: s.now,
			Outcome: outcome, Reason: reason, Message: message,
		})
	}
	r.eachVerdict(cmd, record)
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
