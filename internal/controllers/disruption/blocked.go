package disruption

import (
	"k8s.io/apimachinery/pkg/types"
)

// blockedNodes counts, per pool and Consolidatable reason, the nodes the
// round kept although they qualify for disruption: refused by a safety
// rule or the budget (the refusals that set Consolidatable=False). A node
// refused for two methods on one rule (expired and drifted, say) counts
// once. Nodes whose pods would not fit elsewhere are
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
	// The round's held nodes wait for their consolidateAfter (they do not
	// qualify yet) or for minNodes or headroom (the pool's own settings
	// keep them, not a rule or the budget): not blocked.
	return counts
}
