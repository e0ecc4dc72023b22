package disruption

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// considerEmptiness takes a node that runs no workload pods as
// emptiness's candidate once it has been empty for its pool's
// consolidateAfter: by its claim's Empty condition, or by when a round saw
// it empty out (emptySince; nil when only the condition counts).
func (r *round) considerEmptiness(c *candidate, blockReason, why string, emptySince func(node string) (time.Time, bool)) {
	empty := meta.FindStatusCondition(c.claim.Status.Conditions, v1alpha1.ConditionEmpty)
	emptyLongEnough := empty != nil && empty.Status == metav1.ConditionTrue && r.s.now.Sub(empty.LastTransitionTime.Time) >= c.pool.consolidateAfter()
	if emptySince != nil && c.claim.Annotations[AnnotationReplaces] == "" {
		// Not waiting for the condition's write, which may be
		// behind a thousand others.
		if since, ok := emptySince(c.node.Name); ok && r.s.now.Sub(since) >= c.pool.consolidateAfter() {
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
		why, err := r.whatIf.headroomViolation(ctx, with)
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
	pending, err := r.whatIf.pendingWithRoom(ctx)
	if err != nil || len(pending) == 0 {
		return "", err
	}
	removal, err := r.whatIf.simulateRemoval(ctx, candidates, pending...)
	if err != nil {
		return "", err
	}
	return r.whatIf.leavesPendingPodsOut(ctx, candidates, removal, pending)
}
