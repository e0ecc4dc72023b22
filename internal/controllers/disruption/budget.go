package disruption

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/cronwindow"
)

// AllowedDisruptions returns how many of a pool's nodes may be disrupting at
// once for a reason, now: the strictest budget that is active and applies
// to the reason. A percentage is of the pool's nodes, rounded up, so a
// budget above zero always lets at least one node go. No budget means no
// limit.
func AllowedDisruptions(pool *v1alpha1.NodePool, reason v1alpha1.DisruptionReason, totalNodes int, now time.Time) (int, error) {
	allowed := math.MaxInt
	for i, budget := range pool.Spec.Disruption.Budgets {
		if !appliesTo(budget, reason) {
			continue
		}
		active, err := activeAt(budget, now)
		if err != nil {
			return 0, fmt.Errorf("budget %d of pool %s: %w", i, pool.Name, err)
		}
		if !active {
			continue
		}
		nodes, err := budgetNodes(budget.Nodes, totalNodes)
		if err != nil {
			return 0, fmt.Errorf("budget %d of pool %s: %w", i, pool.Name, err)
		}
		allowed = min(allowed, nodes)
	}
	return allowed, nil
}

func appliesTo(budget v1alpha1.Budget, reason v1alpha1.DisruptionReason) bool {
	if len(budget.Reasons) == 0 {
		return true
	}
	for _, r := range budget.Reasons {
		if r == reason {
			return true
		}
	}
	return false
}

// activeAt reports whether a scheduled budget's window covers now (see
// cronwindow.ActiveAt). A budget whose window cannot be read is an error:
// the caller lets the pool disrupt nothing rather than guess. (A
// never-firing schedule once counted as always active.)
func activeAt(budget v1alpha1.Budget, now time.Time) (bool, error) {
	if budget.Schedule == nil || budget.Duration == nil {
		return true, nil
	}
	return cronwindow.ActiveAt(*budget.Schedule, budget.Duration.Duration, now)
}

// budgetNodes reads a budget's nodes: a count, or a percentage (0% to
// 100%) of totalNodes rounded up, so a budget above zero always lets at
// least one node go.
func budgetNodes(value string, totalNodes int) (int, error) {
	if percent, ok := strings.CutSuffix(value, "%"); ok {
		p, err := strconv.Atoi(percent)
		if err != nil || p < 0 || p > 100 {
			return 0, fmt.Errorf("nodes %q is not a percentage from 0%% to 100%%", value)
		}
		return (p*max(totalNodes, 0) + 99) / 100, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("nodes %q is not a count of nodes", value)
	}
	return n, nil
}

// ledger counts, for one round of decisions, how many more nodes each pool
// may start disrupting for each reason. Every disrupting node counts
// against every reason's budget: a budget caps how much of the pool is
// away at once, whatever took it.
type ledger struct {
	allowed    map[string]map[v1alpha1.DisruptionReason]int
	disrupting map[string]int
}

// budgetReasons are the reasons budgets apply to; expiration ignores them.
var budgetReasons = []v1alpha1.DisruptionReason{
	v1alpha1.DisruptionReasonEmpty, v1alpha1.DisruptionReasonUnderutilized, v1alpha1.DisruptionReasonDrifted,
}

// newLedger works out each pool's budgets now. total is each pool's
// claims, those being deleted included; disrupting those being deleted or
// chosen for removal. A pool whose budget cannot be read allows nothing;
// why is returned by pool name.
func newLedger(pools []*v1alpha1.NodePool, total, disrupting map[string]int, now time.Time) (*ledger, map[string]error) {
	l := &ledger{allowed: map[string]map[v1alpha1.DisruptionReason]int{}, disrupting: map[string]int{}}
	errs := map[string]error{}
	for _, pool := range pools {
		l.allowed[pool.Name] = map[v1alpha1.DisruptionReason]int{}
		l.disrupting[pool.Name] = disrupting[pool.Name]
		for _, reason := range budgetReasons {
			allowed, err := AllowedDisruptions(pool, reason, total[pool.Name], now)
			if err != nil {
				errs[pool.Name] = err
				allowed = 0
			}
			l.allowed[pool.Name][reason] = allowed
		}
	}
	return l, errs
}

// allowedNow is how many of the pool's nodes the budget for reason lets be
// disrupting at once.
func (l *ledger) allowedNow(pool string, reason v1alpha1.DisruptionReason) int {
	allowed, ok := l.allowed[pool][reason]
	if !ok {
		return 0
	}
	return allowed
}

// remaining is how many more of the pool's nodes may start going for
// reason.
func (l *ledger) remaining(pool string, reason v1alpha1.DisruptionReason) int {
	allowed, ok := l.allowed[pool][reason]
	if !ok {
		return 0
	}
	if allowed == math.MaxInt {
		return allowed
	}
	return max(0, allowed-l.disrupting[pool])
}

// take records that n of the pool's nodes start going.
func (l *ledger) take(pool string, n int) {
	l.disrupting[pool] += n
}

// budgetNote says that the candidate's pool budget for reason has none
// left: it allows none now, or the nodes already going take it all.
//
// The note names no number that moves while nodes go: it becomes the
// Consolidatable condition of every node the budget holds, and a note that
// changed each round (the budget's share of a shrinking pool) rewrote
// hundreds of claims each round of a large scale-down, taking the API
// server's time from the deletions.
func (r *round) budgetNote(c *candidate, reason v1alpha1.DisruptionReason) string {
	pool := c.pool.pool.Name
	if r.ledger.allowedNow(pool, reason) == 0 {
		return fmt.Sprintf("%s, but pool %s's disruption budget for %s allows 0 disruptions now", what(reason), pool, reason)
	}
	return fmt.Sprintf("%s, but pool %s's disruption budget for %s is taken by the nodes already going", what(reason), pool, reason)
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
