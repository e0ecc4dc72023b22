package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
)

const (
	// At most this many nodes go in one multi-node consolidation.
	maxMultiNodeCandidates = 100
	// At most this many single nodes are simulated in one round, so one
	// round stays short in a large cluster; the rest wait for the next.
	maxSingleNodeEvaluations = 10
)

// considerConsolidation takes a node that runs pods, in a pool that
// consolidates underused nodes, as a consolidation candidate once its pods
// have been the same for the pool's consolidateAfter (stableSince).
func (r *round) considerConsolidation(c *candidate, blockReason, why string, stableSince map[string]time.Time) {
	if c.pool.pool.Spec.Disruption.ConsolidationPolicy != v1alpha1.ConsolidationWhenEmptyOrUnderutilized {
		return
	}
	since, ok := stableSince[c.node.Name]
	switch {
	case ok && r.s.now.Sub(since) >= c.pool.consolidateAfter():
		r.classify(c, v1alpha1.DisruptionReasonUnderutilized, &r.under, blockReason, why, "a consolidation candidate")
	case why != "":
		r.pinned(c, blockReason, "runs pods, but "+why)
	case ok:
		r.waitForConsolidateAfter(c, "its pods last changed", since)
	}
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
		cmd, _, err := r.whatIf.consolidation(ctx, cands[:mid])
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
		fewer, _, err := r.whatIf.consolidation(ctx, cands[:k-1])
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
		cmd, why, err := r.whatIf.consolidation(ctx, []*candidate{c})
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

// consolidation decides whether the candidates can go together: deleted,
// when their pods fit on the other nodes; else replaced by one new node
// that costs less than all of them. If not, it says why.
//
// Pending pods that have a place now keep it: a removal that would leave
// one of them without room is refused (as Karpenter simulates pending pods
// with the candidates' own), and only that removal, so one pod waiting for
// its node holds back no other node and no other pool.
func (s whatIf) consolidation(ctx context.Context, candidates []*candidate) (*command, verdict, error) {
	pending, err := s.pendingWithRoom(ctx)
	if err != nil {
		return nil, verdict{}, err
	}
	// Pods that outgrow the other nodes' free room fit there neither with
	// the pending pods nor without: no removal to simulate.
	fitsNowhere := s.outgrows(candidates, nil, room{})
	var removal scheduling.RemovalResult
	if !fitsNowhere {
		if removal, err = s.simulateRemoval(ctx, candidates, pending...); err != nil {
			return nil, verdict{}, err
		}
		if why, err := s.leavesPendingPodsOut(ctx, candidates, removal, pending); err != nil || why != "" {
			return nil, verdict{decisions.NodeReasonPendingPods, why}, err
		}
		if !removal.Fits() {
			// Room a booting node will have is no reason for a new one
			// either: the move waits until it is initialized.
			if why, err := s.fitsOnlyWhileBooting(ctx, candidates, pending); err != nil || why != "" {
				return nil, verdict{decisions.NodeReasonWouldNotFit, why}, err
			}
		}
	}
	cmd := &command{reason: v1alpha1.DisruptionReasonUnderutilized, candidates: candidates}
	if fitsNowhere || !removal.Fits() {
		replacements, refused, err := s.cheaperNode(ctx, candidates, pending)
		if err != nil || refused.note != "" {
			return nil, refused, err
		}
		cmd.replacements = replacements
	}
	if why := s.minNodesViolation(cmd); why != "" {
		return nil, verdict{decisions.NodeReasonMinNodes, why}, nil
	}
	if why, err := s.headroomViolation(ctx, candidates); err != nil || why != "" {
		return nil, verdict{decisions.NodeReasonHeadroom, why}, err
	}
	cmd.message = consolidationMessage(cmd)
	return cmd, verdict{}, nil
}

// cheaperNode finds, for candidates whose pods do not fit on the other
// nodes, the one new node that holds them (and the pending pods that have
// a place now) for less than the candidates cost, or says why there is
// none. No new node at all is needed when the pods fit after all.
func (s whatIf) cheaperNode(ctx context.Context, candidates []*candidate, pending []*corev1.Pod) ([]scheduling.NewNode, verdict, error) {
	if floor, ok := s.cheapestNewNode(); ok && floor.Shape.Price >= totalPrice(candidates) {
		// No replacement can be cheaper: spare building a snapshot
		// without the candidates, which at ten thousand pods is
		// most of an idle cluster's CPU.
		return nil, verdict{decisions.NodeReasonNotCheaper, fmt.Sprintf("its pods fit only on a new node, and the cheapest (%s of pool %s at %.6g/h) is not cheaper than %.6g/h",
			floor.Shape.Name, floor.Pool, floor.Shape.Price, totalPrice(candidates))}, nil
	}
	if largest, ok := s.largestNewNode(); ok && s.outgrows(candidates, pending, largest) {
		return nil, verdict{decisions.NodeReasonWouldNotFit, "its pods would need more than one new node"}, nil
	}
	result, err := s.solveWithout(ctx, candidates, pending...)
	if err != nil {
		return nil, verdict{}, err
	}
	switch {
	case len(result.Unschedulable) > 0:
		return nil, verdict{decisions.NodeReasonWouldNotFit, "its pods would not fit elsewhere: " + describeUnschedulable(result.Unschedulable)}, nil
	case len(result.NewNodes) > 1:
		return nil, verdict{decisions.NodeReasonWouldNotFit, fmt.Sprintf("its pods would need %d new nodes: %s", len(result.NewNodes), scheduling.DescribeNewNodes(result.NewNodes))}, nil
	case len(result.NewNodes) == 1:
		replacement := result.NewNodes[0]
		if price, total := replacement.Shape.Price, totalPrice(candidates); price >= total {
			return nil, verdict{decisions.NodeReasonNotCheaper, fmt.Sprintf("its pods fit only on a new node, and the cheapest (%s of pool %s at %.6g/h) is not cheaper than %.6g/h",
				replacement.Shape.Name, replacement.Pool, price, total)}, nil
		}
		return result.NewNodes, verdict{}, nil
	}
	return nil, verdict{}, nil
}

func consolidationMessage(cmd *command) string {
	subject := "its pods fit"
	if len(cmd.candidates) > 1 {
		subject = fmt.Sprintf("the pods of %d underused nodes (%s) fit", len(cmd.candidates), abbreviate(cmd.names(), 4))
	}
	if len(cmd.replacements) == 0 {
		return subject + " on the other nodes"
	}
	replacement := cmd.replacements[0]
	return fmt.Sprintf("%s on one cheaper node: %s of pool %s at %.6g/h instead of %.6g/h", subject,
		replacement.Shape.Name, replacement.Pool, replacement.Shape.Price, totalPrice(cmd.candidates))
}
