package disruption

import (
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/metrics"
)

// defaultConsolidateAfter is the consolidateAfter of a pool that sets none
// (poolInfo.consolidateAfter): how long a node must have been empty, or
// its pods the same, before emptiness or consolidation take it.
const defaultConsolidateAfter = 30 * time.Second

// stability tracks since when each node has carried the pods it carries
// now: consolidation leaves a node alone until that has lasted its pool's
// consolidateAfter, so a node provisioning just made, or pods just moved
// to, are not taken away at once.
type stability struct {
	nodes map[string]podSet
	// departures, when set, tells when a pod last left a node by the
	// pod's own timestamps (clusterstate.Departures).
	departures departures
}

// departures is what stability needs of clusterstate.Departures.
type departures interface {
	LastLeft(node string, gone ...types.UID) (time.Time, bool)
}

type podSet struct {
	hash uint64
	// pods are the workload pods the round saw.
	pods  []types.UID
	since time.Time
	// witnessed: a round saw the pods change to these, so since is when
	// they did (to a round's interval), not a guess from timestamps.
	witnessed bool
	empty     bool
	// seen is when a round last looked.
	seen time.Time
}

func newStability() *stability { return &stability{nodes: map[string]podSet{}} }

// observeRound notes every claim's node's pods and returns since when
// each has carried them.
func (t *stability) observeRound(s *state) map[string]time.Time {
	since := map[string]time.Time{}
	seen := map[string]bool{}
	for _, claim := range s.claims {
		initialized := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionInitialized)
		if _, ok := s.nodes[claim.Status.NodeName]; !ok || initialized == nil || initialized.Status != metav1.ConditionTrue {
			continue
		}
		node := claim.Status.NodeName
		seen[node] = true
		since[node] = t.observe(node, workloadPods(s.podsByNode[node]), initialized.LastTransitionTime.Time, s.now)
	}
	t.prune(seen)
	return since
}

// observe records the node's pods and returns since when they have been
// these. A node seen for the first time (after a restart, say) counts from
// its initialization or its last pod's binding, whichever is later.
func (t *stability) observe(node string, pods []*corev1.Pod, initialized, now time.Time) time.Time {
	uids := make([]types.UID, 0, len(pods))
	for _, pod := range pods {
		uids = append(uids, pod.UID)
	}
	slices.Sort(uids)
	hasher := fnv.New64a()
	for _, uid := range uids {
		_, _ = hasher.Write([]byte(uid))
		_, _ = hasher.Write([]byte{0})
	}
	hash := hasher.Sum64()
	previous, seen := t.nodes[node]
	var since time.Time
	witnessed := false
	switch {
	case !seen:
		since = initialized
		for _, pod := range pods {
			if bound := boundAt(pod); bound.After(since) {
				since = bound
			}
		}
		if since.After(now) {
			since = now
		}
	case previous.hash != hash:
		since, witnessed = now, true
		if len(pods) == 0 {
			since = t.emptiedAt(node, previous, now)
		}
	default:
		since, witnessed = previous.since, previous.witnessed
	}
	t.nodes[node] = podSet{hash: hash, pods: uids, since: since, witnessed: witnessed, empty: len(pods) == 0, seen: now}
	return since
}

// emptiedAt is when a node a round saw busy and sees empty now lost its
// last pod, by the pods' own timestamps: the last departure from the node
// once each pod that round saw there has been seen to leave (however
// long before the look the cache was behind their deletions), else the
// last departure if it came after that look, else now. A departure before
// the look, with a pod the look saw not yet seen leaving, was not the
// last one.
func (t *stability) emptiedAt(node string, busy podSet, now time.Time) time.Time {
	if t.departures == nil {
		return now
	}
	if left, ok := t.departures.LastLeft(node, busy.pods...); ok && len(busy.pods) > 0 && !left.After(now) {
		return left
	}
	if left, ok := t.departures.LastLeft(node); ok && left.After(busy.seen) && !left.After(now) {
		return left
	}
	return now
}

// emptySince is when the node lost its last pod (by the pod's own
// timestamps when they are known, see emptiedAt), if a round saw it busy
// and then empty. The consolidateAfter clock of an empty node starts
// there, not when its claim's Empty condition is finally written, which
// in a large cluster may be many writes later.
func (t *stability) emptySince(node string) (time.Time, bool) {
	set, ok := t.nodes[node]
	if !ok || !set.empty || !set.witnessed {
		return time.Time{}, false
	}
	return set.since, true
}

// prune forgets nodes no longer seen.
func (t *stability) prune(seen map[string]bool) {
	for node := range t.nodes {
		if !seen[node] {
			delete(t.nodes, node)
		}
	}
}

// boundAt is when the pod was bound to its node (metrics.BoundAt), else
// when it was made.
func boundAt(pod *corev1.Pod) time.Time {
	if bound := metrics.BoundAt(pod); !bound.IsZero() {
		return bound
	}
	return pod.CreationTimestamp.Time
}

// waitForConsolidateAfter notes a node that is not a candidate yet: it
// emptied out, or its pods changed, less than its pool's consolidateAfter
// ago. A zero since is a time the round does not know.
func (r *round) waitForConsolidateAfter(c *candidate, what string, since time.Time) {
	after := c.pool.consolidateAfter()
	if since.IsZero() {
		r.hold(c, decisions.NodeReasonConsolidateAfter, fmt.Sprintf("%s, for less than its pool's consolidateAfter of %s so far", what, after))
		return
	}
	stable := fmt.Sprintf("%s at %s, consolidateAfter of %s not yet passed", what, since.UTC().Format(time.RFC3339), after)
	r.hold(c, decisions.NodeReasonConsolidateAfter, fmt.Sprintf("%s (%s left)", stable, (after-r.s.now.Sub(since)).Round(time.Second)))
	if last := &r.held[len(r.held)-1]; last.candidate == c && last.reason == decisions.NodeReasonConsolidateAfter {
		last.condition = stable
	}
}

// emptySinceOf is when the node emptied (stability.emptySince), else when
// its claim's Empty condition became true, else zero.
func emptySinceOf(c *candidate, empty *metav1.Condition, emptySince func(node string) (time.Time, bool)) time.Time {
	if emptySince != nil {
		if since, ok := emptySince(c.node.Name); ok {
			return since
		}
	}
	if empty != nil && empty.Status == metav1.ConditionTrue {
		return empty.LastTransitionTime.Time
	}
	return time.Time{}
}
