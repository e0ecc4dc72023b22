package disruption

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/internal/scheduling"
)

var c8 = scheduling.Shape{Name: "c8", CPU: resource.MustParse("8"), Memory: resource.MustParse("32Gi"), Price: 0.8}

// A disruption pass over `make scale`'s cluster once it is up and every
// decision about it is remembered: 1,000 nodes of 8 cpu, each running ten
// pods of 800m. It is what a round costs when a deadline or the safety
// resync wakes it on a cluster with nothing to do: reading the state,
// classifying the candidates and finding every decision remembered.
func BenchmarkIdlePassOn1000FullNodes(b *testing.B) {
	f := newFixture(c8)
	f.filled(1000, 10, "800m")
	memory := newMemory(time.Hour)
	pass := func() int {
		s, r, candidates, stable := stableRound(f, memory)
		before := memory.remembered
		cmd, err := r.decide(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if cmd != nil {
			b.Fatalf("full nodes: decided %s", describe(cmd))
		}
		_ = wakeAt(s, candidates, stable, nil, memory)
		return memory.remembered - before
	}
	// Every node is simulated once, ten a round, and then remembered.
	for pass() > 0 {
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n := pass(); n > 0 {
			b.Fatalf("an idle pass simulated %d decisions again", n)
		}
	}
}

// BenchmarkFirstLookAt1000FullNodes is the round after a scale-up, when
// every node's pods have just stayed for consolidateAfter: each full node
// is told from the free room of the others, all in this one round.
func BenchmarkFirstLookAt1000FullNodes(b *testing.B) {
	f := newFixture(c8)
	f.filled(1000, 10, "800m")
	b.ReportAllocs()
	for b.Loop() {
		s, r, _, _ := stableRound(f, newMemory(time.Hour))
		cmd, err := r.decide(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if cmd != nil || len(r.refusals) != 1000 || s.simulations != 0 {
			b.Fatalf("decided %v, told %d of 1000 nodes with %d simulations", cmd, len(r.refusals), s.simulations)
		}
	}
}

// stableRound is a round on the fixture's cluster in which every node's
// pods have stayed for an hour, with its candidates and their stability.
func stableRound(f *fixture, memory *memory) (*state, *round, []*candidate, map[string]time.Time) {
	s := f.state()
	stable := map[string]time.Time{}
	for _, node := range f.nodes {
		stable[node.Name] = f.now.Add(-time.Hour)
	}
	candidates := s.candidates()
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	return s, newRound(s, candidates, budgets, stable, nil, memory), candidates, stable
}

// filled adds nodes of shape c8, each with podsEach pods requesting cpu.
func (f *fixture) filled(nodes, podsEach int, cpu string) {
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		f.node(name, c8)
		for j := range podsEach {
			f.pod(fmt.Sprintf("pod-%04d-%d", i, j), name, cpu)
		}
	}
}
