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
	periodicTimer := b.Clock.NewTimer(periodic)
	defer periodicTimer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-b.trigger:
	case <-periodicTimer.C():
		return true
	}
	idle := b.Clock.NewTimer(b.Idle)
	defer idle.Stop()
	deadline := b.Clock.NewTimer(b.Max)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-b.trigger:
			if !idle.Stop() {
				select {
				case <-idle.C():
				default:
				}
			}
			idle.Reset(b.Idle)
		case <-idle.C():
			return true
		case <-deadline.C():
			return true
		}
	}
}
