package disruption

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// defaultResync is the longest a controller following the cluster's
// changes waits without one: a safety net for what no event says (drift
// that only the provider knows of, a missed event).
const defaultResync = 5 * time.Minute

// wakeAt is the earliest time after the round's at which a decision could
// come out differently on an unchanged cluster: a node's consolidateAfter
// or a claim's expireAfter running out, a remembered decision's backoff
// ending, a stale mark to release, a
// budget or capacity schedule turning. The zero time when there is none.
func wakeAt(s *state, candidates []*candidate, stableSince map[string]time.Time, emptySince func(node string) (time.Time, bool), memory *memory) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if t.After(s.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range candidates {
		after := c.pool.consolidateAfter()
		if expireAfter := c.pool.pool.Spec.Disruption.ExpireAfter; expireAfter != nil && expireAfter.Duration > 0 {
			at(c.claim.CreationTimestamp.Add(expireAfter.Duration))
		}
		if len(c.pods) == 0 {
			if empty := meta.FindStatusCondition(c.claim.Status.Conditions, v1alpha1.ConditionEmpty); empty != nil && empty.Status == metav1.ConditionTrue {
				at(empty.LastTransitionTime.Add(after))
			}
			if emptySince != nil {
				if since, ok := emptySince(c.node.Name); ok {
					at(since.Add(after))
				}
			}
			continue
		}
		if since, ok := stableSince[c.node.Name]; ok {
			at(since.Add(after))
		}
	}
	for _, entry := range memory.entries {
		at(entry.at.Add(memory.backoff))
	}
	for _, claim := range s.claims {
		if marked := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting); marked != nil && marked.Status == metav1.ConditionTrue &&
			!claim.SleepRequested() {
			at(marked.LastTransitionTime.Add(staleMark))
		}
		// A sleeping machine past its pool's expireAfter is deleted
		// (deleteStaleSleepers).
		if info, ok := s.pools[claim.Spec.NodePoolRef.Name]; ok && claim.Asleep() {
			if expireAfter := info.pool.Spec.Disruption.ExpireAfter; expireAfter != nil && expireAfter.Duration > 0 {
				at(claim.CreationTimestamp.Add(expireAfter.Duration))
			}
		}
	}
	for _, info := range s.pools {
		if scheduled(info.pool) {
			// Cron schedules turn on the minute.
			at(s.now.Truncate(time.Minute).Add(time.Minute))
			break
		}
	}
	return next
}

// scheduled says whether the pool's budgets or warm capacity follow a
// schedule.
func scheduled(pool *v1alpha1.NodePool) bool {
	if len(pool.Spec.CapacitySchedules) > 0 {
		return true
	}
	for _, budget := range pool.Spec.Disruption.Budgets {
		if budget.Schedule != nil {
			return true
		}
	}
	return false
}
