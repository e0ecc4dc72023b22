package disruption

import (
	"context"
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
	f.filled(nodes, 10, "800m")
	s, r, _, _ := stableRound(f, newMemory(time.Hour))
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
	f.filled(3, 6, "800m")
	s, r, _, _ := stableRound(f, newMemory(time.Hour))
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
