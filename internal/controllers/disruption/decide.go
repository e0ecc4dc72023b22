package disruption

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

const (
	// At most this many nodes go in one multi-node consolidation.
	maxMultiNodeCandidates = 100
	// At most this many single nodes are simulated in one round, so one
	// round stays short in a large cluster; the rest wait for the next.
	maxSingleNodeEvaluations = 10
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
	s      *state
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

// newRound classifies the candidates. stableSince is when each node's pods
// last changed (or it was initialized, if later).
//
// emptySince says when a node lost its last pod (stability.emptySince);
// nil when only the claims' Empty conditions count.
func newRound(s *state, candidates []*candidate, ledger *ledger, stableSince map[string]time.Time, emptySince func(node string) (time.Time, bool), memory *memory) *round {
	r := &round{s: s, ledger: ledger, memory: memory, eligible: map[string]map[v1alpha1.DisruptionReason]int{}}
	for _, c := range candidates {
		blockReason, why := s.blocker(c)
		if expireAfter := c.pool.pool.Spec.Disruption.ExpireAfter; expireAfter != nil && expireAfter.Duration > 0 &&
			s.now.Sub(c.claim.CreationTimestamp.Time) >= expireAfter.Duration {
			r.classify(c, reasonExpired, &r.expired, blockReason, why, "expired")
		}
		if meta.IsStatusConditionTrue(c.claim.Status.Conditions, v1alpha1.ConditionDrifted) {
			r.classify(c, v1alpha1.DisruptionReasonDrifted, &r.drifted, blockReason, why, "drifted")
		}
		if len(c.pods) == 0 {
			empty := meta.FindStatusCondition(c.claim.Status.Conditions, v1alpha1.ConditionEmpty)
			emptyLongEnough := empty != nil && empty.Status == metav1.ConditionTrue && s.now.Sub(empty.LastTransitionTime.Time) >= c.pool.consolidateAfter()
			if emptySince != nil && c.claim.Annotations[AnnotationReplaces] == "" {
				// Not waiting for the condition's write, which may be
				// behind a thousand others.
				if since, ok := emptySince(c.node.Name); ok && s.now.Sub(since) >= c.pool.consolidateAfter() {
					emptyLongEnough = true
				}
			}
			switch {
			case emptyLongEnough:
				r.classify(c, v1alpha1.DisruptionReasonEmpty, &r.empty, blockReason, why, "empty")
			case why != "":
				r.pinned(c, blockReason, "empty, but "+why)
			default:
				r.waitForConsolidateAfter(c, "empty", emptySinceOf(c, empty, emptySince))
			}
			continue
		}
		if c.pool.pool.Spec.Disruption.ConsolidationPolicy != v1alpha1.ConsolidationWhenEmptyOrUnderutilized {
			continue
		}
		since, ok := stableSince[c.node.Name]
		switch {
		case ok && s.now.Sub(since) >= c.pool.consolidateAfter():
			r.classify(c, v1alpha1.DisruptionReasonUnderutilized, &r.under, blockReason, why, "a consolidation candidate")
		case why != "":
			r.pinned(c, blockReason, "runs pods, but "+why)
		case ok:
			r.waitForConsolidateAfter(c, "its pods last changed", since)
		}
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
// wins the round.
func (r *round) decide(ctx context.Context) (*command, error) {
	for _, method := range []func(context.Context) (*command, error){r.expiration, r.drift, r.emptiness, r.multiNode, r.singleNode} {
		cmd, err := method(ctx)
		if err != nil || cmd != nil {
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
		reason := r.s.unsettled()
		r.settledReason = &reason
		if reason != "" {
			log.FromContext(ctx).V(1).Info("not disrupting while the cluster settles", "reason", reason)
		}
	}
	return *r.settledReason == "", nil
}

// expiration replaces nodes older than their pool's expireAfter, whatever
// the budgets, oldest first; never leaving their pods without a place.
func (r *round) expiration(ctx context.Context) (*command, error) {
	for _, c := range r.expired {
		if r.memory.skip(c.claim.UID, reasonExpired, r.s.fingerprint, r.s.now) {
			continue
		}
		if settled, err := r.settled(ctx); err != nil || !settled {
			return nil, err
		}
		why := fmt.Sprintf("node %s expired: claim %s is older than the pool's expireAfter of %s",
			c.node.Name, c.claim.Name, c.pool.pool.Spec.Disruption.ExpireAfter.Duration)
		cmd, refused, err := r.s.replacement(ctx, reasonExpired, c, why)
		if err != nil || cmd != nil {
			return cmd, err
		}
		r.memory.remember(c.claim.UID, reasonExpired, r.s.fingerprint, r.s.now)
		r.refuse(c, eventBlocked, refused.record, "expired, but "+refused.note)
	}
	return nil, nil
}

// drift replaces nodes whose claim is Drifted, within the Drifted budget,
// cheapest to disrupt first.
func (r *round) drift(ctx context.Context) (*command, error) {
	for _, c := range r.drifted {
		if r.ledger.remaining(c.pool.pool.Name, v1alpha1.DisruptionReasonDrifted) <= 0 ||
			r.memory.skip(c.claim.UID, v1alpha1.DisruptionReasonDrifted, r.s.fingerprint, r.s.now) {
			continue
		}
		if settled, err := r.settled(ctx); err != nil || !settled {
			return nil, err
		}
		condition := meta.FindStatusCondition(c.claim.Status.Conditions, v1alpha1.ConditionDrifted)
		cmd, refused, err := r.s.replacement(ctx, v1alpha1.DisruptionReasonDrifted, c, "node "+c.node.Name+" drifted: "+condition.Message)
		if err != nil {
			return nil, err
		}
		if cmd != nil {
			r.ledger.take(c.pool.pool.Name, 1)
			return cmd, nil
		}
		r.memory.remember(c.claim.UID, v1alpha1.DisruptionReasonDrifted, r.s.fingerprint, r.s.now)
		r.refuse(c, eventBlocked, refused.record, "drifted, but "+refused.note)
	}
	return nil, nil
}

// emptiness deletes nodes that have run nothing but DaemonSet pods for
// their pool's consolidateAfter, as many at once as budgets and minNodes
// allow.
func (r *round) emptiness(ctx context.Context) (*command, error) {
	cmd := &command{reason: v1alpha1.DisruptionReasonEmpty}
	aboveMinNodes := map[string]int{}
	for _, c := range r.empty {
		pool := c.pool.pool.Name
		if _, ok := aboveMinNodes[pool]; !ok {
			aboveMinNodes[pool] = c.pool.live - c.pool.marked - int(c.pool.target.MinNodes)
		}
		if aboveMinNodes[pool] <= 0 {
			// Warm capacity stays; the pool may lower minNodes later.
			r.hold(c, decisions.NodeReasonMinNodes, fmt.Sprintf("empty, but pool %s keeps its minNodes of %d (%d nodes not going)",
				pool, c.pool.target.MinNodes, c.pool.live-c.pool.marked))
			continue
		}
		if r.ledger.remaining(pool, v1alpha1.DisruptionReasonEmpty) <= 0 {
			log.FromContext(ctx).V(1).Info("empty node waits for the disruption budget", "nodeClaim", c.claim.Name,
				"allowed", r.ledger.allowedNow(pool, v1alpha1.DisruptionReasonEmpty))
			r.holdForBudget(c, v1alpha1.DisruptionReasonEmpty)
			continue
		}
		// No settling here, unlike the methods that move pods: an empty
		// node moves none, and the pods a drain is about to evict keep
		// the room they have, as pending pods do. At a scale-down, empty
		// nodes need not wait for a consolidation's drain to finish.
		with := append(cmd.candidates[:len(cmd.candidates):len(cmd.candidates)], c)
		if left, err := r.leavesPendingPodsOut(ctx, with); err != nil {
			return nil, err
		} else if left != "" {
			// A pending pod (or one of a node being drained) is about to
			// be placed on it, or needs the room it leaves on others.
			r.refusals = append(r.refusals, refusal{candidate: c, reason: eventBlocked, note: left, condition: v1alpha1.ConsolidatableReasonPendingPods})
			continue
		}
		why, err := r.s.headroomViolation(ctx, with)
		if err != nil {
			return nil, err
		}
		if why != "" {
			// The pool's headroom lives on this node.
			log.FromContext(ctx).V(1).Info("empty node kept for headroom", "nodeClaim", c.claim.Name, "reason", why)
			r.hold(c, decisions.NodeReasonHeadroom, "empty, but "+why)
			continue
		}
		aboveMinNodes[pool]--
		r.ledger.take(pool, 1)
		cmd.candidates = append(cmd.candidates, c)
	}
	switch len(cmd.candidates) {
	case 0:
		return nil, nil
	case 1:
		c := cmd.candidates[0]
		cmd.message = fmt.Sprintf("node %s has been empty for %s", c.node.Name, c.pool.consolidateAfter())
	default:
		cmd.message = fmt.Sprintf("%d nodes have been empty for their pools' consolidateAfter", len(cmd.candidates))
	}
	return cmd, nil
}

// leavesPendingPodsOut says, when removing the candidates would leave a
// pending pod without the room it has now, why they stay.
func (r *round) leavesPendingPodsOut(ctx context.Context, candidates []*candidate) (string, error) {
	pending, err := r.s.pendingWithRoom(ctx)
	if err != nil || len(pending) == 0 {
		return "", err
	}
	removal, err := r.s.simulateRemoval(ctx, candidates, pending...)
	if err != nil {
		return "", err
	}
	return r.s.leavesPendingPodsOut(ctx, candidates, removal, pending)
}

// multiNode looks for the longest run of the cheapest-to-disrupt nodes
// that can go at once, deleted or replaced by one cheaper node, within
// each pool's Underutilized budget. The search halves the run, as
// Karpenter's does: fitting is not strictly monotone, but close.
func (r *round) multiNode(ctx context.Context) (*command, error) {
	taken := map[string]int{}
	var cands []*candidate
	for _, c := range r.under {
		pool := c.pool.pool.Name
		if taken[pool] >= r.ledger.remaining(pool, v1alpha1.DisruptionReasonUnderutilized) {
			if r.ledger.remaining(pool, v1alpha1.DisruptionReasonUnderutilized) <= 0 {
				r.holdForBudget(c, v1alpha1.DisruptionReasonUnderutilized)
			}
			continue
		}
		taken[pool]++
		cands = append(cands, c)
		if len(cands) == maxMultiNodeCandidates {
			break
		}
	}
	if len(cands) < 2 || r.memory.skip("", multiNodeKey, r.s.fingerprint, r.s.now) {
		return nil, nil
	}
	if settled, err := r.settled(ctx); err != nil || !settled {
		return nil, err
	}
	var best *command
	low, high := 2, len(cands)
	for low <= high {
		mid := (low + high) / 2
		cmd, _, err := r.s.consolidation(ctx, cands[:mid])
		if err != nil {
			return nil, err
		}
		if cmd != nil {
			best, low = cmd, mid+1
		} else {
			high = mid - 1
		}
	}
	if best == nil {
		r.memory.remember("", multiNodeKey, r.s.fingerprint, r.s.now)
		return nil, nil
	}
	if k := len(best.candidates); len(best.replacements) > 0 {
		// Replacing k nodes by one saves no more than deleting k-1 of
		// them when that leaves the cluster no dearer, and that moves
		// fewer pods and makes no machine.
		fewer, _, err := r.s.consolidation(ctx, cands[:k-1])
		if err != nil {
			return nil, err
		}
		if fewer != nil && len(fewer.replacements) == 0 && totalPrice(fewer.candidates) >= totalPrice(best.candidates)-best.replacements[0].Shape.Price {
			best = fewer
		}
	}
	for _, c := range best.candidates {
		r.ledger.take(c.pool.pool.Name, 1)
	}
	return best, nil
}

// multiNodeKey keys the memory of a multi-node search that found nothing.
const multiNodeKey v1alpha1.DisruptionReason = "MultiNode"

// singleNode takes the cheapest-to-disrupt node whose pods fit elsewhere,
// or on one cheaper node. A node that does not fit is remembered and not
// simulated again until the cluster changes or the memory's backoff
// passes.
func (r *round) singleNode(ctx context.Context) (*command, error) {
	evaluated := 0
	for _, c := range r.under {
		if evaluated == maxSingleNodeEvaluations {
			break
		}
		if r.ledger.remaining(c.pool.pool.Name, v1alpha1.DisruptionReasonUnderutilized) <= 0 ||
			r.memory.skip(c.claim.UID, v1alpha1.DisruptionReasonUnderutilized, r.s.fingerprint, r.s.now) {
			continue
		}
		if settled, err := r.settled(ctx); err != nil || !settled {
			return nil, err
		}
		simulated := r.s.simulations
		cmd, why, err := r.s.consolidation(ctx, []*candidate{c})
		if err != nil {
			return nil, err
		}
		if r.s.simulations != simulated {
			// Only simulations count: after a scale-up a thousand full
			// nodes are told from their free room alone in one round.
			evaluated++
		}
		if cmd != nil {
			r.ledger.take(c.pool.pool.Name, 1)
			return cmd, nil
		}
		r.memory.remember(c.claim.UID, v1alpha1.DisruptionReasonUnderutilized, r.s.fingerprint, r.s.now)
		r.refuse(c, eventUnconsolidatable, why.record, unconsolidatablePrefix+why.note)
	}
	return nil, nil
}
