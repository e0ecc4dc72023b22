package scheduling

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/onsi/gomega"
)

// A controller builds simulators all day on one long-lived context; none
// may leave a goroutine behind.
func TestBuildingSimulatorsLeavesNoGoroutineBehind(t *testing.T) {
	g := gomega.NewWithT(t)
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
	g.Eventually(runtime.NumGoroutine).WithTimeout(10*time.Second).WithPolling(10*time.Millisecond).
		Should(gomega.BeNumerically("<=", before+5), "goroutines left running by 50 simulators (%d before)", before)
}
