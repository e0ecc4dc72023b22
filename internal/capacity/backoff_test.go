package capacity

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestBackoffDoublesUpToThirtyMinutes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	if b.Unavailable("general", "small") {
		t.Fatal("unavailable before any failure")
	}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Record("general", "small"))
	}
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", got, want)
		}
	}
	if !b.Unavailable("general", "small") {
		t.Fatal("available right after a failure")
	}
	if b.Unavailable("general", "large") || b.Unavailable("other", "small") {
		t.Fatal("backoff leaked to another shape or pool")
	}
	clk.Step(30*time.Minute + time.Second)
	if b.Unavailable("general", "small") {
		t.Fatal("still unavailable after the backoff ended")
	}
}

func TestBackoffStartsOverAfterAQuietPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	b.Record("general", "small")
	b.Record("general", "small")
	clk.Step(time.Hour)
	if got := b.Record("general", "small"); got != 5*time.Minute {
		t.Fatalf("backoff after a quiet hour = %v, want 5m", got)
	}
}
