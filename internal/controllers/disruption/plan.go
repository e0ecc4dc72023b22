package disruption

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/decisions"
)

// Plan is what a disruption round would decide now, taken without writing
// anything: the round's one decision, if any, and a verdict on every claim.
type Plan struct {
	Now time.Time
	// Settling says why the round would move no pods now (pods of nodes
	// being drained, pending pods about to land), if so.
	Settling string
	// InFlight lists replacements being made for nodes already chosen.
	InFlight []string
	// Decision is the round's decision; nil when it would take nothing.
	Decision *PlannedDecision
	// Nodes has one verdict per claim, by node name.
	Nodes []Verdict
}

// PlannedDecision is a decision the round would carry out.
type PlannedDecision struct {
	// Reason: Empty, Underutilized, Drifted or Expired.
	Reason v1alpha1.DisruptionReason
	// Action: delete, replace, or suspend (every node's machine is put to
	// sleep; where only some are, delete, and their verdicts say which).
	Action  string
	Message string
	// Replacements are made first, when the action is replace.
	Replacements []PlannedNode
	// Price per hour of the nodes that go, and Saving per hour once the
	// replacements are running.
	Price, Saving float64
}

// PlannedNode is a new node a decision would make.
type PlannedNode struct {
	Pool, Shape, Zone string
	Price             float64
}

// Verdict says what the round would do with one claim's node and why.
type Verdict struct {
	Node, NodeClaim, Pool string
	// Outcome: Disrupting, Kept, or Candidate (eligible but not decided
	// in this round: one decision per round, and the next round looks
	// again), or NotCandidate.
	Outcome string
	// Reason is a decisions.NodeReason… for a kept node, the decision's
	// reason for a node that goes.
	Reason  string
	Message string
	// Price per hour of the node.
	Price float64
}

// Outcomes a plan gives beyond the decision records'.
const (
	OutcomeCandidate    = "Candidate"
	OutcomeNotCandidate = "NotCandidate"
)

// PlanScaleDown gathers the cluster through kube as a round does and
// decides as a round does, with clk's time, but writes nothing and acts on
// nothing: kube is only read, and usable says which pools can provision.
//
// What lives in the controller's memory is read from the objects instead:
// since when a node is empty comes from its claim's Empty condition, since
// when its pods are unchanged from their binding times, and the memory of
// decisions that found nothing is empty, so every candidate is simulated.
func PlanScaleDown(ctx context.Context, kube client.Client, usable clusterstate.PoolUsability, clk clock.WithTicker) (*Plan, error) {
	in := &reader{kube: kube, pools: usable, clock: clk}
	s, err := in.gather(ctx)
	if err != nil {
		return nil, err
	}
	for _, info := range s.pools {
		info.power = recordedPower(info.pool)
	}
	stableSince := newStability().observeRound(s)
	plan := &Plan{Now: s.now}
	for _, group := range s.groups {
		plan.InFlight = append(plan.InFlight, fmt.Sprintf("%s replacing %s (%s)", strings.Join(claimNames(group.replacements), ", "), strings.Join(group.olds, ", "), group.reason))
	}
	candidates := s.candidates()
	pools, total, disrupting := s.poolTotals()
	budgets, errs := newLedger(pools, total, disrupting, s.now)
	r := newRound(s, candidates, budgets, stableSince, nil, newMemory(memoryBackoff))
	cmd, err := r.decide(ctx)
	if err != nil {
		return nil, err
	}
	if r.settledReason != nil {
		plan.Settling = *r.settledReason
	}
	if cmd != nil {
		plan.Decision = plannedDecision(cmd)
	}
	plan.Nodes = verdicts(s, r, cmd, candidates, errs, plan.Settling)
	return plan, nil
}

// plannedDecision is what a plan says of the round's decision.
func plannedDecision(cmd *command) *PlannedDecision {
	decision := &PlannedDecision{Reason: cmd.reason, Action: cmd.action(), Message: cmd.message, Price: totalPrice(cmd.candidates)}
	if len(cmd.sleeps) == len(cmd.candidates) {
		decision.Action = actionSuspend
	}
	decision.Saving = decision.Price
	for _, n := range cmd.replacements {
		decision.Replacements = append(decision.Replacements, PlannedNode{Pool: n.Pool, Shape: n.Shape.Name, Zone: n.Zone, Price: n.Shape.Price})
		decision.Saving -= n.Shape.Price
	}
	return decision
}

// verdicts gives every claim of the round one verdict, by node name,
// ranked as the claim's condition and the decision records rank them: the
// decision, then the first refusal, then the first hold, then pools whose
// budget cannot be read (errs), then what became of the other candidates.
func verdicts(s *state, r *round, cmd *command, candidates []*candidate, errs map[string]error, settling string) []Verdict {
	verdicts := map[string]*Verdict{}
	set := func(cand *candidate, outcome, reason, message string) {
		if _, ok := verdicts[cand.claim.Name]; ok {
			return
		}
		verdicts[cand.claim.Name] = &Verdict{Node: cand.node.Name, NodeClaim: cand.claim.Name, Pool: cand.pool.pool.Name,
			Outcome: outcome, Reason: reason, Message: message, Price: cand.price}
	}
	r.eachVerdict(cmd, set)
	for name, err := range errs {
		for _, cand := range candidates {
			if cand.pool.pool.Name == name {
				set(cand, decisions.NodeKept, decisions.NodeReasonBudget, "the pool disrupts nothing until its budget is fixed: "+err.Error())
			}
		}
	}
	for _, cand := range candidates {
		outcome, note := candidateVerdict(r, cand, settling)
		set(cand, outcome, "", note)
	}
	for _, name := range sortedNames(s.claims) {
		if _, ok := verdicts[name]; ok {
			continue
		}
		claim := s.claims[name]
		verdicts[name] = &Verdict{Node: claim.Status.NodeName, NodeClaim: name, Pool: claim.Spec.NodePoolRef.Name,
			Outcome: OutcomeNotCandidate, Message: notCandidateNote(s, claim)}
	}
	var nodes []Verdict
	for _, v := range verdicts {
		nodes = append(nodes, *v)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].Node != nodes[j].Node {
			return nodes[i].Node < nodes[j].Node
		}
		return nodes[i].NodeClaim < nodes[j].NodeClaim
	})
	return nodes
}

// candidateVerdict says what became of a claim the round's methods left
// without a verdict.
func candidateVerdict(r *round, c *candidate, settling string) (outcome, note string) {
	if len(c.pods) > 0 && c.pool.pool.Spec.Disruption.ConsolidationPolicy != v1alpha1.ConsolidationWhenEmptyOrUnderutilized {
		return OutcomeNotCandidate, fmt.Sprintf("runs %d pods, and pool %s consolidates only empty nodes (consolidationPolicy %s)",
			len(c.pods), c.pool.pool.Name, c.pool.pool.Spec.Disruption.ConsolidationPolicy)
	}
	if settling != "" {
		return OutcomeCandidate, "a candidate, but no pods move while the cluster settles: " + settling
	}
	return OutcomeCandidate, "a candidate, not decided on this round: a round takes one decision, and the next looks again"
}

// notCandidateNote says why a claim is no candidate at all.
func notCandidateNote(s *state, claim *v1alpha1.NodeClaim) string {
	switch {
	case !claim.DeletionTimestamp.IsZero():
		return "being deleted"
	case claim.Annotations[AnnotationReplaces] != "":
		return "a replacement for " + claim.Annotations[AnnotationReplaces]
	case claim.Asleep():
		return "its machine sleeps (" + sleepNotePrefix + "); provisioning may wake it"
	case claim.Suspending():
		return "its node is leaving: " + sleepNotePrefix
	case s.disrupting[claim.Name]:
		return "already chosen to go"
	case !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized):
		return "not initialized yet: room only for the pending pods it was made for, not for the pods of a node that would go"
	}
	if _, ok := s.pools[claim.Spec.NodePoolRef.Name]; !ok {
		return "its pool " + claim.Spec.NodePoolRef.Name + " is gone"
	}
	if !s.inSnapshot[claim.Status.NodeName] {
		return "its node is not in service"
	}
	return "not a candidate"
}
