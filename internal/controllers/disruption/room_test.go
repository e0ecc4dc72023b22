package disruption

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/claimscale/claimscale/internal/decisions"
)

// After a scale-up a thousand full nodes become consolidation candidates
// at once. Their pods outgrow the free room of all the others together, so
// one round tells every one of them, without building a snapshot; and
// their refusals say what the simulation would have said.
func TestFullNodesAreToldFromTheirFreeRoomWithoutASimulation(t *testing.T) {
	f := newFixture(c8)
	const nodes = 50
	for i := range nodes {
		name := fmt.Sprintf("node-%02d", i)
		f.node(name, c8)
		for j := range 10 {
			f.pod(fmt.Sprintf("pod-%02d-%d", i, j), name, "800m")
		}
	}
	s := f.state()
	stable := map[string]time.Time{}
	for _, node := range f.nodes {
		stable[node.Name] = f.now.Add(-time.Hour)
	}
	candidates := s.candidates()
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	r := newRound(s, candidates, budgets, stable, nil, newMemory(time.Hour))
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cmd != nil {
		t.Fatalf("full nodes: decided %s", describe(cmd))
	}
	if s.simulations != 0 || s.sim != nil {
		t.Fatalf("%d simulations (snapshot built: %t); the free room tells", s.simulations, s.sim != nil)
	}
	refused := map[string]string{}
	for _, refusal := range r.refusals {
		refused[refusal.candidate.node.Name] = refusal.record
	}
	if len(refused) != nodes {
		t.Fatalf("%d of %d nodes told in one round: %v", len(refused), nodes, refused)
	}
	for node, record := range refused {
		if record != decisions.NodeReasonNotCheaper {
			t.Errorf("node %s refused as %s, want %s", node, record, decisions.NodeReasonNotCheaper)
		}
	}
}

// Where the free room may hold the pods, the simulation decides: one
// node's pods spread over the room the others have left.
func TestFreeRoomDefersToTheSimulationWhereThePodsMightFit(t *testing.T) {
	f := newFixture(c8)
	for i := range 3 {
		name := fmt.Sprintf("node-%d", i)
		f.node(name, c8)
		for j := range 6 {
			f.pod(fmt.Sprintf("pod-%d-%d", i, j), name, "800m")
		}
	}
	s := f.state()
	stable := map[string]time.Time{}
	for _, node := range f.nodes {
		stable[node.Name] = f.now.Add(-time.Hour)
	}
	candidates := s.candidates()
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	r := newRound(s, candidates, budgets, stable, nil, newMemory(time.Hour))
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cmd == nil || len(cmd.candidates) != 1 || len(cmd.replacements) != 0 {
		t.Fatalf("want one node deleted, its six pods in the room the other two have; got %v", cmd)
	}
	if s.simulations == 0 {
		t.Fatal("decided without simulating")
	}
}
