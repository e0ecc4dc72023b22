package disruption

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// Every node a round leaves in place for one of the reasons gets a
// record that says which, with the bounded reason the metric counts.
func TestRoundRecordsWhyEachNodeStays(t *testing.T) {
	tests := []struct {
		name string
		// fixture, and since when each node's pods are unchanged (default
		// an hour ago).
		fixture func() *fixture
		stable  map[string]time.Duration
		node    string
		reason  string
		says    string
	}{{
		name: "an empty node within consolidateAfter, by its Empty condition",
		fixture: func() *fixture {
			f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "1")
			withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-4*time.Second))
			return f
		},
		node:   "a",
		reason: decisions.NodeReasonConsolidateAfter,
		says:   "empty at 2026-11-23T09:59:56Z, consolidateAfter of 10s not yet passed (6s left)",
	}, {
		name: "an underused node whose pods changed within consolidateAfter",
		fixture: func() *fixture {
			return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
		},
		stable: map[string]time.Duration{"a": 3 * time.Second},
		node:   "a",
		reason: decisions.NodeReasonConsolidateAfter,
		says:   "its pods last changed at 2026-11-23T09:59:57Z, consolidateAfter of 10s not yet passed (7s left)",
	}, {
		name: "an empty node the pool keeps for minNodes",
		fixture: func() *fixture {
			f := newFixture(c4).node("a", c4)
			f.pool.Spec.MinNodes = 1
			withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
			return f
		},
		node:   "a",
		reason: decisions.NodeReasonMinNodes,
		says:   "empty, but pool pool keeps its minNodes of 1 (1 nodes not going)",
	}, {
		name: "an underused node whose removal would go below minNodes",
		fixture: func() *fixture {
			f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
			f.pool.Spec.MinNodes = 2
			return f
		},
		node:   "a",
		reason: decisions.NodeReasonMinNodes,
		says:   "pool pool would go below its minNodes of 2",
	}, {
		name: "a node no replacement is cheaper than",
		fixture: func() *fixture {
			return newFixture(c4, c2).node("a", c2).pod("p", "a", "1500m")
		},
		node:   "a",
		reason: decisions.NodeReasonNotCheaper,
		says:   "is not cheaper than 0.2/h",
	}, {
		name: "a node whose pods would fit nowhere",
		fixture: func() *fixture {
			// A cheaper shape exists, so the answer is not only that no
			// replacement could be cheaper.
			return newFixture(c4, c2).node("a", c4).node("b", c4).pod("q", "b", "1").pod("p", "a", "1", func(pod *corev1.Pod) {
				pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "a"}
			})
		},
		node:   "a",
		reason: decisions.NodeReasonWouldNotFit,
		says:   "its pods would not fit elsewhere",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fixture()
			s := f.state()
			stable := map[string]time.Time{}
			for _, node := range f.nodes {
				stable[node.Name] = f.now.Add(-time.Hour)
			}
			for node, ago := range tt.stable {
				stable[node] = f.now.Add(-ago)
			}
			pools, total, disrupting := s.poolTotals()
			budgets, _ := newLedger(pools, total, disrupting, f.now)
			r := newRound(s, s.candidates(), budgets, stable, nil, newMemory(memoryBackoff))
			cmd, err := r.decide(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			store := decisions.NewStore(false)
			counted := testutil.ToFloat64(decisions.NodeDecisions.WithLabelValues(decisions.NodeKept, tt.reason, "false"))
			(&reporter{store: store}).recordDecisions(s, r, cmd)
			record, ok := store.Node(tt.node)
			if !ok {
				t.Fatalf("no record of node %s (decided %q)", tt.node, describe(cmd))
			}
			if record.Outcome != decisions.NodeKept || record.Reason != tt.reason || !strings.Contains(record.Message, tt.says) {
				t.Errorf("record %s %s %q, want Kept %s saying %q", record.Outcome, record.Reason, record.Message, tt.reason, tt.says)
			}
			want := 0
			for _, r := range store.Nodes() {
				if r.Reason == tt.reason {
					want++
				}
			}
			if got := testutil.ToFloat64(decisions.NodeDecisions.WithLabelValues(decisions.NodeKept, tt.reason, "false")) - counted; got != float64(want) {
				t.Errorf("the metric counted %v decisions with reason %s, want %d, one per node recorded", got, tt.reason, want)
			}
		})
	}
}

// An empty node whose emptying a round saw counts from then, not from
// its condition, and says so.
func TestConsolidateAfterRecordPrefersTheRoundsOwnClock(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "1")
	withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now)
	s := f.state()
	tracker := newStability()
	tracker.observe("a", []*corev1.Pod{{}}, f.now.Add(-time.Hour), f.now.Add(-9*time.Second))
	tracker.observe("a", nil, f.now.Add(-time.Hour), f.now.Add(-8*time.Second))
	pools, total, disrupting := s.poolTotals()
	budgets, _ := newLedger(pools, total, disrupting, f.now)
	r := newRound(s, s.candidates(), budgets, nil, tracker.emptySince, newMemory(memoryBackoff))
	if _, err := r.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, h := range r.held {
		if h.candidate.claim.Name == "a" {
			if want := "empty at 2026-11-23T09:59:52Z, consolidateAfter of 10s not yet passed (2s left)"; h.message != want || h.reason != decisions.NodeReasonConsolidateAfter {
				t.Fatalf("held %s %q, want %s %q", h.reason, h.message, decisions.NodeReasonConsolidateAfter, want)
			}
			return
		}
	}
	t.Fatalf("node a, empty for 8s of 10s, is not held: %+v", r.held)
}

// The claim's Consolidatable condition names minNodes, not pods that do
// not fit, when the pool's minNodes is what keeps an underused node.
func TestMinNodesIsTheConsolidatableReasonOfTheNodesItKeeps(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
	f.pool.Spec.MinNodes = 2
	r := f.round(f.state())
	if _, err := r.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.refusals) == 0 {
		t.Fatal("no refusal")
	}
	for _, refused := range r.refusals {
		if got := unconsolidatableCondition(refused); got != v1alpha1.ConsolidatableReasonMinNodes {
			t.Errorf("node %s: Consolidatable reason %q, want %q (%s)", refused.candidate.claim.Name, got, v1alpha1.ConsolidatableReasonMinNodes, refused.note)
		}
	}
}
