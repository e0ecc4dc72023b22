package disruption

import (
	"context"
	"sort"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// refusal is a candidate a method would take but may not, with why.
type refusal struct {
	candidate *candidate
	// reason of the event: DisruptionBlocked (a safety rule holds it) or
	// Unconsolidatable (its pods would not fit).
	reason string
	note   string
	// condition, when set, is the reason of the Consolidatable=False
	// condition the claim gets for it.
	condition string
	// quiet refusals set the condition but make no event: a budget that
	// holds back hundreds of empty nodes is one fact, not hundreds.
	quiet bool
	// record, when set, is the decision reason (decisions.NodeReason…)
	// the refusal is recorded and counted under.
	record string
}

const (
	eventBlocked          = "DisruptionBlocked"
	eventUnconsolidatable = "Unconsolidatable"
	// eventInvalidBudget, on a pool: a budget cannot be read, so the pool
	// disrupts nothing.
	eventInvalidBudget = "InvalidDisruptionBudget"
)

// round is one pass of decisions over a state. It talks to no API server:
// the controller carries out the command it returns and reports the
// refusals.
type round struct {
	s *state
	// whatIf asks the scheduling simulator about s.
	whatIf whatIf
	ledger *ledger
	memory *memory

	// What each method may consider, classified once: eligible and not
	// blocked.
	expired, drifted, empty, under []*candidate

	refusals []refusal
	// held are candidates the disruption budget keeps this round.
	held []held
	// eligible counts, per pool and reason, the nodes that qualify before
	// safety rules, budgets and simulation.
	eligible map[string]map[v1alpha1.DisruptionReason]int

	settledReason *string
}

// newRound classifies the candidates: each method's file says what makes
// a node its candidate (consider…). stableSince is when each node's pods
// last changed (or it was initialized, if later).
//
// emptySince says when a node lost its last pod (stability.emptySince);
// nil when only the claims' Empty conditions count.
func newRound(s *state, candidates []*candidate, ledger *ledger, stableSince map[string]time.Time, emptySince func(node string) (time.Time, bool), memory *memory) *round {
	r := &round{s: s, whatIf: whatIf{s}, ledger: ledger, memory: memory, eligible: map[string]map[v1alpha1.DisruptionReason]int{}}
	for _, c := range candidates {
		blockReason, why := s.blocker(c)
		r.considerExpiration(c, blockReason, why)
		r.considerDrift(c, blockReason, why)
		if len(c.pods) == 0 {
			r.considerEmptiness(c, blockReason, why, emptySince)
			continue
		}
		r.considerConsolidation(c, blockReason, why, stableSince)
	}
	sort.SliceStable(r.expired, func(i, j int) bool {
		return r.expired[i].claim.CreationTimestamp.Before(&r.expired[j].claim.CreationTimestamp)
	})
	sortByDisruptionCost(r.drifted)
	sortByDisruptionCost(r.under)
	// The dearest empty nodes go first: what minNodes (or the budget)
	// keeps is the cheapest, warm capacity as provisioning would make it.
	sort.SliceStable(r.empty, func(i, j int) bool { return r.empty[i].price > r.empty[j].price })
	return r
}

// pinned notes a candidate a safety rule keeps before its
// consolidateAfter has passed: the rule outranks the wait, in the
// condition, the records and the events alike, as it will hold the node
// once the wait is over too.
func (r *round) pinned(c *candidate, blockReason, note string) {
	for _, refused := range r.refusals {
		if refused.candidate == c {
			return
		}
	}
	r.refusals = append(r.refusals, refusal{candidate: c, reason: eventBlocked, note: note, condition: blockReason})
}

func (r *round) classify(c *candidate, reason v1alpha1.DisruptionReason, into *[]*candidate, blockReason, blocked, what string) {
	pool := c.pool.pool.Name
	if r.eligible[pool] == nil {
		r.eligible[pool] = map[v1alpha1.DisruptionReason]int{}
	}
	r.eligible[pool][reason]++
	if blocked != "" {
		r.refusals = append(r.refusals, refusal{candidate: c, reason: eventBlocked, note: what + ", but " + blocked, condition: blockReason})
		return
	}
	*into = append(*into, c)
}

// decide tries the methods in order; the first that decides something
// wins the round. Which of its nodes sleep instead of being deleted is
// decided with it (chooseSleepers), so the records, events and plan say
// what the executor does.
func (r *round) decide(ctx context.Context) (*command, error) {
	for _, method := range []func(context.Context) (*command, error){r.expiration, r.drift, r.emptiness, r.multiNode, r.singleNode} {
		cmd, err := method(ctx)
		if err != nil || cmd != nil {
			chooseSleepers(cmd)
			return cmd, err
		}
	}
	return nil, nil
}

func (r *round) refuse(c *candidate, reason, record, note string) {
	r.refusals = append(r.refusals, refusal{candidate: c, reason: reason, note: note, record: record})
}

// settled caches state.unsettled for the round: true when pods may move.
func (r *round) settled(ctx context.Context) (bool, error) {
	if r.settledReason == nil {
		reason := r.whatIf.unsettled()
		r.settledReason = &reason
		if reason != "" {
			log.FromContext(ctx).V(1).Info("not disrupting while the cluster settles", "reason", reason)
		}
	}
	return *r.settledReason == "", nil
}

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

// eachVerdict tells verdict what the round made of each candidate it
// decided about, in the order the claim's condition, the decision records
// and simulate --scale-down rank them: the decision's candidates, then the
// refusals, then the holds. A candidate may come more than once; the
// first is its verdict.
func (r *round) eachVerdict(cmd *command, verdict func(cand *candidate, outcome, reason, message string)) {
	if cmd != nil {
		for _, cand := range cmd.candidates {
			verdict(cand, decisions.NodeDisrupting, string(cmd.reason), cmd.candidateMessage(cand.claim))
		}
	}
	for _, refused := range r.refusals {
		verdict(refused.candidate, decisions.NodeKept, refusalReason(refused), refusalMessage(refused))
	}
	for _, h := range r.held {
		verdict(h.candidate, decisions.NodeKept, h.reason, h.message)
	}
}
