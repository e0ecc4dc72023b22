package scheduling

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// A controller builds simulators all day on one long-lived context; none
// may leave a goroutine behind.
func TestBuildingSimulatorsLeavesNoGoroutineBehind(t *testing.T) {
	c, _ := complementaryRandom(1)
	ctx := context.Background()
	// The first build starts what lives with the process.
	if _, err := New(ctx, c); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 50 {
		if _, err := New(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// Goroutines told to stop take a moment to end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := runtime.NumGoroutine()
		if after <= before+5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("50 simulators left %d goroutines running (%d before, %d after)", after-before, before, after)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}
