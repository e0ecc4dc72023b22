package disruption

import (
	"hash/fnv"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// memory remembers the decisions that found nothing to do for a claim
// (or, keyed by no claim, for the whole cluster), so they are not
// simulated again every round: only once the cluster has changed (its
// fingerprint) or the backoff has passed.
type memory struct {
	backoff time.Duration
	entries map[memoryKey]memoryEntry
	// remembered counts the decisions remembered so far.
	remembered int
}

type memoryKey struct {
	claim  types.UID
	reason v1alpha1.DisruptionReason
}

type memoryEntry struct {
	fingerprint uint64
	at          time.Time
}

func newMemory(backoff time.Duration) *memory {
	return &memory{backoff: backoff, entries: map[memoryKey]memoryEntry{}}
}

// skip says whether the decision was tried on this very cluster recently.
func (m *memory) skip(claim types.UID, reason v1alpha1.DisruptionReason, fingerprint uint64, now time.Time) bool {
	entry, ok := m.entries[memoryKey{claim, reason}]
	return ok && entry.fingerprint == fingerprint && now.Sub(entry.at) < m.backoff
}

func (m *memory) remember(claim types.UID, reason v1alpha1.DisruptionReason, fingerprint uint64, now time.Time) {
	m.entries[memoryKey{claim, reason}] = memoryEntry{fingerprint: fingerprint, at: now}
	m.remembered++
}

// prune forgets what is past its backoff.
func (m *memory) prune(now time.Time) {
	for key, entry := range m.entries {
		if now.Sub(entry.at) >= m.backoff {
			delete(m.entries, key)
		}
	}
}

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

// eventMemo keeps a refusal from becoming an event every round: the same
// note about the same claim (or pool) is repeated only after a while.
type eventMemo struct {
	repeat time.Duration
	last   map[string]time.Time
}

func newEventMemo(repeat time.Duration) *eventMemo {
	return &eventMemo{repeat: repeat, last: map[string]time.Time{}}
}

// due says whether the event should go out now, and notes that it does.
func (e *eventMemo) due(object types.UID, reason, note string, now time.Time) bool {
	key := string(object) + "\x00" + reason + "\x00" + note
	if last, ok := e.last[key]; ok && now.Sub(last) < e.repeat {
		return false
	}
	e.last[key] = now
	return true
}

func (e *eventMemo) prune(now time.Time) {
	for key, last := range e.last {
		if now.Sub(last) >= e.repeat {
			delete(e.last, key)
		}
	}
}
