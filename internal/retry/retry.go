// Package retry remembers, per object, that something failed and when to
// try it again: an exponential backoff that a new generation of the object
// (someone fixed it) resets at once. Provisioning, the status controllers
// and the provider resolver use it so that a broken pool, claim or provider
// is retried slowly and never in a hot loop, while every other object goes
// on at full speed.
package retry

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of a Backoff whose fields are zero.
const (
	DefaultInitial = time.Second
	DefaultMax     = 5 * time.Minute
)

// Backoff is a per-key exponential backoff. The zero value is ready to use
// (real clock, 1 s doubling to 5 min).
type Backoff struct {
	Clock   clock.PassiveClock
	Initial time.Duration
	Max     time.Duration

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	generation int64
	failures   int
	retryAt    time.Time
	err        error
}

// Failed records a failure of key at generation and returns how long the
// key now waits. A failure at another generation than the one remembered
// starts the backoff over.
func (b *Backoff) Failed(key string, generation int64, err error) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries == nil {
		b.entries = map[string]*entry{}
	}
	e, ok := b.entries[key]
	if !ok || e.generation != generation {
		e = &entry{generation: generation}
		b.entries[key] = e
	}
	wait := b.initial()
	for i := 0; i < e.failures && wait < b.max(); i++ {
		wait *= 2
	}
	wait = min(wait, b.max())
	e.failures++
	e.retryAt = b.now().Add(wait)
	e.err = err
	return wait
}

// Waiting returns the remembered error while key at generation is backed
// off, else nil. An entry of another generation does not hold the key back.
func (b *Backoff) Waiting(key string, generation int64) (error, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || e.generation != generation {
		return nil, 0
	}
	left := e.retryAt.Sub(b.now())
	if left <= 0 {
		return nil, 0
	}
	return e.err, left
}

// Succeeded forgets key's failures.
func (b *Backoff) Succeeded(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

func (b *Backoff) now() time.Time {
	if b.Clock == nil {
		return time.Now()
	}
	return b.Clock.Now()
}

func (b *Backoff) initial() time.Duration {
	if b.Initial > 0 {
		return b.Initial
	}
	return DefaultInitial
}

func (b *Backoff) max() time.Duration {
	if b.Max > 0 {
		return b.Max
	}
	return DefaultMax
}
