package retry

import (
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestBackoffDoublesUpToItsMaximumAndANewGenerationStartsOver(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	b := &Backoff{Clock: clk, Initial: time.Second, Max: 5 * time.Second}
	failure := errors.New("broken")
	var waits []time.Duration
	for range 5 {
		waits = append(waits, b.Failed("pool", 1, failure))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits = %v, want %v", waits, want)
		}
	}
	if err, left := b.Waiting("pool", 1); !errors.Is(err, failure) || left != 5*time.Second {
		t.Fatalf("Waiting = %v, %s; want the failure for 5s", err, left)
	}
	if err, _ := b.Waiting("pool", 2); err != nil {
		t.Fatalf("a new generation is held back by the old one's failure: %v", err)
	}
	clk.SetTime(clk.Now().Add(5 * time.Second))
	if err, _ := b.Waiting("pool", 1); err != nil {
		t.Fatalf("still waiting after the backoff: %v", err)
	}
	if wait := b.Failed("pool", 2, failure); wait != time.Second {
		t.Fatalf("a failure of a new generation waits %s, want 1s", wait)
	}
	b.Succeeded("pool")
	if err, _ := b.Waiting("pool", 2); err != nil {
		t.Fatalf("waiting after success: %v", err)
	}
}
