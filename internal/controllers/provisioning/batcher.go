package provisioning

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Batcher decides when to provision: a batch opens with the first trigger
// and closes after Idle without another trigger, or after Max at the most,
// so a burst of pending pods is decided together instead of pod by pod.
type Batcher struct {
	Idle  time.Duration
	Max   time.Duration
	Clock clock.WithTicker

	trigger chan struct{}
}

// NewBatcher returns a batcher with the given windows.
func NewBatcher(idle, maxWait time.Duration, clk clock.WithTicker) *Batcher {
	return &Batcher{Idle: idle, Max: maxWait, Clock: clk, trigger: make(chan struct{}, 1)}
}

// Trigger opens a batch or extends the open one. It never blocks.
func (b *Batcher) Trigger() {
	select {
	case b.trigger <- struct{}{}:
	default:
	}
}

// Wait blocks until a batch closes (true) or the context ends (false). A
// batch also opens by itself after every periodic interval, so claims for
// warm capacity and missed events are caught up.
func (b *Batcher) Wait(ctx context.Context, periodic time.Duration) bool {
	select {
	case <-b.trigger:
	default:
		if opened, done := b.awaitFirstTrigger(ctx, periodic); !opened {
			return done
		}
	}
	// One timer for both windows: each trigger restarts the idle window,
	// but never past the batch's maximum.
	started := b.Clock.Now()
	window := b.Clock.NewTimer(min(b.Idle, b.Max))
	defer window.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-window.C():
			return true
		case <-b.trigger:
			remaining := b.Max - b.Clock.Since(started)
			if remaining <= 0 {
				return true
			}
			if !window.Stop() {
				select {
				case <-window.C():
				default:
				}
			}
			window.Reset(min(b.Idle, remaining))
		}
	}
}

// awaitFirstTrigger waits for a trigger (opened) or the periodic interval
// (not opened, but a round is due: done is true) or the end of ctx (done is
// false).
func (b *Batcher) awaitFirstTrigger(ctx context.Context, periodic time.Duration) (opened, done bool) {
	periodicTimer := b.Clock.NewTimer(periodic)
	defer periodicTimer.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-periodicTimer.C():
		return false, true
	case <-b.trigger:
		return true, false
	}
}
