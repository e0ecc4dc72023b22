// Package capacitybackoff remembers which pool, shape and zone a provider had no
// capacity or quota for, so provisioning tries another zone, shape or pool
// instead of asking again at once: 5 minutes after the first failure,
// doubling with each further one up to 30 minutes.
package capacitybackoff

import (
	"slices"
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

// key is one pool, shape and zone; zone "" stands for a machine made
// without a zone, and backs the shape off in every zone.
type key struct{ pool, shape, zone string }

type entry struct {
	until   time.Time
	backoff time.Duration
}

// NewBackoff returns an empty Backoff on the given clock.
func NewBackoff(clk clock.Clock) *Backoff {
	return &Backoff{clock: clk, entries: map[key]entry{}}
}

// Record notes a capacity failure for a pool's shape in a zone ("" when the
// machine was asked for without one) and returns how long that shape is now
// unavailable there.
func (b *Backoff) Record(pool, shape, zone string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := key{pool, shape, zone}
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

// Unavailable reports whether the pool's shape is backed off in the zone
// now, by a failure there or one recorded without a zone.
func (b *Backoff) Unavailable(pool, shape, zone string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.activeLocked(key{pool, shape, zone}) || zone != "" && b.activeLocked(key{pool, shape, ""})
}

func (b *Backoff) activeLocked(k key) bool {
	e, ok := b.entries[k]
	return ok && b.clock.Now().Before(e.until)
}

// Narrow says where a pool may open new nodes now, given the zones its
// provider offers (none for a provider without zones) and its shapes:
// zones in which every shape is backed off are left out; a shape backed
// off in every zone that remains is unavailable; a shape backed off only
// in some of them is unavailable there only (unavailableIn, by zone), so
// the other zones still offer it. When every zone is out, the zones are
// returned as they are with every shape unavailable, so the pool reports
// its backoff.
func (b *Backoff) Narrow(pool string, zones, shapes []string) (available, unavailable []string, unavailableIn map[string][]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	candidates := zones
	if len(candidates) == 0 {
		candidates = []string{""}
	}
	out := func(shape, zone string) bool {
		return b.activeLocked(key{pool, shape, zone}) || zone != "" && b.activeLocked(key{pool, shape, ""})
	}
	var kept []string
	for _, zone := range candidates {
		if !slices.ContainsFunc(shapes, func(shape string) bool { return !out(shape, zone) }) {
			continue
		}
		kept = append(kept, zone)
	}
	if len(kept) == 0 {
		return zones, slices.Clone(shapes), nil
	}
	for _, shape := range shapes {
		outIn := slices.DeleteFunc(slices.Clone(kept), func(zone string) bool { return !out(shape, zone) })
		switch {
		case len(outIn) == len(kept):
			unavailable = append(unavailable, shape)
		case len(outIn) > 0:
			if unavailableIn == nil {
				unavailableIn = map[string][]string{}
			}
			for _, zone := range outIn {
				unavailableIn[zone] = append(unavailableIn[zone], shape)
			}
		}
	}
	if len(zones) == 0 {
		return zones, unavailable, unavailableIn
	}
	return kept, unavailable, unavailableIn
}
