package provisioning

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// waitInBackground runs Wait and reports its answer on the returned channel.
func waitInBackground(ctx context.Context, b *Batcher) <-chan bool {
	done := make(chan bool, 1)
	go func() { done <- b.Wait(ctx, time.Hour) }()
	return done
}

func TestBatchClosesAfterIdleWindow(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	b := NewBatcher(time.Second, 10*time.Second, clk)
	b.Trigger()
	done := waitInBackground(context.Background(), b)
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(900 * time.Millisecond)
	g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive())
	clk.Step(200 * time.Millisecond)
	g.Eventually(done).Should(Receive(BeTrue()))
}

func TestTriggersExtendTheBatchUpToTheMaximum(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	b := NewBatcher(time.Second, 3*time.Second, clk)
	b.Trigger()
	done := waitInBackground(context.Background(), b)
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	// A new pod every 800ms keeps the idle window from closing…
	for range 3 {
		clk.Step(800 * time.Millisecond)
		b.Trigger()
		g.Consistently(done, 30*time.Millisecond).ShouldNot(Receive())
	}
	// …until the maximum window closes the batch regardless.
	clk.Step(800 * time.Millisecond)
	g.Eventually(done).Should(Receive(BeTrue()))
}

func TestWaitEndsWithTheContext(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	b := NewBatcher(time.Second, 10*time.Second, clocktesting.NewFakeClock(time.Now()))
	done := waitInBackground(ctx, b)
	cancel()
	g.Eventually(done).Should(Receive(BeFalse()))
}

// With no pending pod at all, a round still runs every periodic interval,
// so pools below minNodes are topped up.
func TestARoundRunsEveryPeriodWithoutTriggers(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	b := NewBatcher(time.Second, 10*time.Second, clk)
	done := make(chan bool, 1)
	go func() { done <- b.Wait(context.Background(), 30*time.Second) }()
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(29 * time.Second)
	g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive())
	clk.Step(time.Second)
	g.Eventually(done).Should(Receive(BeTrue()))
}
