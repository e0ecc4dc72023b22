package disruption

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
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
