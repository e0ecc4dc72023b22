package disruption

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// blockedNodes counts, per pool and Consolidatable reason, the nodes the
// round kept although they qualify for disruption: refused by a safety
// rule or the budget (the refusals that set Consolidatable=False), or held
// by the budget. A node refused for two methods on one rule (expired and
// drifted, say) counts once. Nodes whose pods would not fit elsewhere are
// not blocked, only not worth disrupting, and are left out.
func (r *round) blockedNodes() map[string]map[string]int {
	seen := map[types.UID]map[string]bool{}
	counts := map[string]map[string]int{}
	count := func(c *candidate, reason string) {
		if seen[c.claim.UID] == nil {
			seen[c.claim.UID] = map[string]bool{}
		}
		if seen[c.claim.UID][reason] {
			return
		}
		seen[c.claim.UID][reason] = true
		pool := c.pool.pool.Name
		if counts[pool] == nil {
			counts[pool] = map[string]int{}
		}
		counts[pool][reason]++
	}
	for _, refused := range r.refusals {
		if refused.condition != "" {
			count(refused.candidate, refused.condition)
		}
	}
	for _, h := range r.held {
		// The round also holds nodes waiting for their consolidateAfter
		// (which do not qualify yet) and for minNodes or headroom (which
		// the pool's own settings keep, not a rule or the budget).
		if h.reason == decisions.NodeReasonBudget {
			count(h.candidate, v1alpha1.ConsolidatableReasonDisruptionBudget)
		}
	}
	return counts
}
