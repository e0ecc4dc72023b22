// Package capacity remembers which pool and shape a provider had no capacity
// or quota for, so provisioning tries another shape or pool instead of
// asking again at once: 5 minutes after the first failure, doubling with
// each further one up to 30 minutes.
package capacity

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

const (
	initialBackoff = 5 * time.Minute
	maxBackoff     = 30 * time.Minute
)

// Backoff is safe for concurrent use.
type Backoff struct {
	clock clock.Clock

	mu      sync.Mutex
	entries map[key]entry
}

type key struct{ pool, shape string }

type entry struct {
	until   time.Time
	backoff time.Duration
}

// NewBackoff returns an empty Backoff on the given clock.
func NewBackoff(clk clock.Clock) *Backoff {
	return &Backoff{clock: clk, entries: map[key]entry{}}
}

// Record notes a capacity failure for a pool and shape and returns how long
// they are now unavailable.
func (b *Backoff) Record(pool, shape string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := key{pool, shape}
	next := initialBackoff
	if previous, ok := b.entries[k]; ok {
		// A failure long after the last backoff ended starts over.
		if b.clock.Now().Before(previous.until.Add(previous.backoff)) {
			next = min(previous.backoff*2, maxBackoff)
		}
	}
	b.entries[k] = entry{until: b.clock.Now().Add(next), backoff: next}
	return next
}

// Unavailable reports whether the pool's shape is backed off now.
func (b *Backoff) Unavailable(pool, shape string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key{pool, shape}]
	return ok && b.clock.Now().Before(e.until)
}
