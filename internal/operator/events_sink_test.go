package operator

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
)

// gatedSink holds every write until open is closed, counting how many wait.
type gatedSink struct {
	open              chan struct{}
	inFlight, maximum atomic.Int32
	written           atomic.Int32
}

func (s *gatedSink) write(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	now := s.inFlight.Add(1)
	for {
		most := s.maximum.Load()
		if now <= most || s.maximum.CompareAndSwap(most, now) {
			break
		}
	}
	defer s.inFlight.Add(-1)
	select {
	case <-s.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.written.Add(1)
	return event, nil
}

func (s *gatedSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, event)
}

func (s *gatedSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, event)
}

func (s *gatedSink) Patch(ctx context.Context, event *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	return s.write(ctx, event)
}

// A burst of events (the broadcaster writes each from a goroutine of its
// own) reaches the API server a few at a time, and every one is written.
func TestEventWritesWaitForAFreeSlot(t *testing.T) {
	next := &gatedSink{open: make(chan struct{})}
	sink := newBoundedEventSink(next, 4)
	var wg sync.WaitGroup
	for i := range 90 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			event := &eventsv1.Event{}
			var err error
			switch i % 3 {
			case 0:
				_, err = sink.Create(context.Background(), event)
			case 1:
				_, err = sink.Update(context.Background(), event)
			default:
				_, err = sink.Patch(context.Background(), event, nil)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	g := NewWithT(t)
	g.Eventually(next.inFlight.Load).WithTimeout(10*time.Second).Should(BeEquivalentTo(4),
		"writes in flight while the API server holds them")
	close(next.open)
	wg.Wait()
	if got := next.maximum.Load(); got != 4 {
		t.Errorf("at most %d writes were in flight at once, want 4", got)
	}
	if got := next.written.Load(); got != 90 {
		t.Errorf("%d events written, want 90", got)
	}
}

// A write still waiting for a slot gives up with its context.
func TestEventWriteWaitingForASlotEndsWithItsContext(t *testing.T) {
	next := &gatedSink{open: make(chan struct{})}
	defer close(next.open)
	sink := newBoundedEventSink(next, 1)
	go func() { _, _ = sink.Create(context.Background(), &eventsv1.Event{}) }()
	NewWithT(t).Eventually(next.inFlight.Load).WithTimeout(10 * time.Second).Should(BeEquivalentTo(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sink.Create(ctx, &eventsv1.Event{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a write with its context ended returned %v, want %v", err, context.Canceled)
	}
}
