package providerresolver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/claimscale/claimscale/internal/retry"
)

// probeTimeout bounds the breaker's own call that checks whether an
// unreachable provider answers again.
const probeTimeout = 30 * time.Second

// breaker keeps callers off a provider whose API stopped answering: once a
// call fails as unreachable (no connection, or no answer in time), every
// call fails at once with that error, and the breaker itself asks the
// provider (a List, in the background, on a backoff) until it answers
// again. So a hung API costs one caller one timeout, not every caller
// every time.
type breaker struct {
	name string
	// probe asks the provider something cheap.
	probe func(ctx context.Context) error

	mu      sync.Mutex
	err     error
	backoff retry.Backoff
	timer   *time.Timer
}

// open returns the error callers get while the provider is unreachable,
// nil while it is not.
func (b *breaker) open() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// observe looks at a call's outcome: an unreachable provider opens the
// breaker; anything else means it answers.
func (b *breaker) observe(err error) {
	if !isUnreachable(err) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return
	}
	b.err = newRedactedError(fmt.Sprintf("NodeProvider %s is unreachable, not called until it answers again: %v", b.name, err), err)
	b.scheduleProbe()
}

// scheduleProbe runs the next probe after the backoff. Called with mu held.
func (b *breaker) scheduleProbe() {
	wait := b.backoff.Failed(b.name, 0, b.err)
	b.timer = time.AfterFunc(wait, func() {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		err := b.probe(ctx)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.timer == nil {
			return // stopped
		}
		if err == nil || !isUnreachable(err) {
			b.err = nil
			b.backoff.Succeeded(b.name)
			return
		}
		b.scheduleProbe()
	})
}

// stop ends the probes, for a provider that is being replaced.
func (b *breaker) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}
