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
	for i := range 1000 {
		name := fmt.Sprintf("node-%04d", i)
		f.node(name, c8)
		for j := range 10 {
			f.pod(fmt.Sprintf("pod-%04d-%d", i, j), name, "800m")
		}
	}
	memory := newMemory(time.Hour)
	pass := func() int {
		s := f.state()
		stable := map[string]time.Time{}
		for _, node := range f.nodes {
			stable[node.Name] = f.now.Add(-time.Hour)
		}
		candidates := s.candidates()
		pools, total, disrupting := s.poolTotals()
		budgets, _ := newLedger(pools, total, disrupting, f.now)
		r := newRound(s, candidates, budgets, stable, nil, memory)
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
