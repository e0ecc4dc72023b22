package disruption

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// booting adds a claim launched a second ago whose machine has not
// registered: in flight, a phantom node in the snapshot.
func (f *fixture) booting(name string, shape scheduling.Shape) *fixture {
	second := metav1.NewTime(f.now.Add(-time.Second))
	f.claims = append(f.claims, v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: second,
			Labels: map[string]string{v1alpha1.LabelNodePool: f.pool.Name}},
		Spec: v1alpha1.NodeClaimSpec{NodePoolRef: v1alpha1.NodePoolReference{Name: f.pool.Name},
			Shape: v1alpha1.ClaimShape{Name: shape.Name, CPU: shape.CPU, Memory: shape.Memory}},
		Status: v1alpha1.NodeClaimStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: second},
		}},
	})
	return f
}

// registering adds a node whose claim is Registered but not Initialized
// yet (its node not Ready, or its startup taints still on).
func (f *fixture) registering(name string, shape scheduling.Shape) *fixture {
	f.node(name, shape)
	claim := f.claim(name)
	claim.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: metav1.NewTime(f.now)},
		{Type: v1alpha1.ConditionRegistered, Status: metav1.ConditionTrue, Reason: "Registered", LastTransitionTime: metav1.NewTime(f.now)},
	}
	return f
}

// registeredEarly adds a node whose claim the round still sees only
// launched: the node registered, the claim's registration not seen yet.
func (f *fixture) registeredEarly(name string, shape scheduling.Shape) *fixture {
	f.registering(name, shape)
	claim := f.claim(name)
	claim.Status.NodeName = ""
	claim.Status.Conditions = claim.Status.Conditions[:1]
	return f
}

// A disruption places the pods it displaces only on nodes that are
// registered and initialized: a claim still booting, or a node not
// initialized yet, is room only for the pending pods it was bought for.
func TestDisplacedPodsGoOnlyToInitializedNodes(t *testing.T) {
	// The scenario: a medium node runs two pods of 1 cpu, two pods
	// of 2.5 cpu wait, and the large claim bought for them boots.
	medium := func() *fixture {
		return newFixture(c4, c8).node("medium", c4).pod("a", "medium", "1").pod("b", "medium", "1").
			pod("w1", "", "2500m").pod("w2", "", "2500m")
	}
	tests := []struct {
		name    string
		fixture func() *fixture
		want    string
		refused string
		record  string
		// recent are nodes whose pods changed a moment ago.
		recent []string
	}{
		{
			name:    "pods that would fit only on a booting claim keep their node",
			fixture: func() *fixture { return medium().booting("large", c8) },
			refused: "its pods would fit only on large, not initialized yet: a node still booting is room only for the pending pods it was made for",
			record:  decisions.NodeReasonWouldNotFit,
		},
		{
			name:    "pods that would fit only on a node not initialized yet keep their node",
			fixture: func() *fixture { return medium().registering("large", c8) },
			refused: "its pods would fit only on large, not initialized yet",
			record:  decisions.NodeReasonWouldNotFit,
		},
		{
			name:    "pods that would fit only on a node whose claim is not seen registered yet keep their node",
			fixture: func() *fixture { return medium().registeredEarly("large", c8) },
			refused: "its pods would fit only on large, not initialized yet",
			record:  decisions.NodeReasonWouldNotFit,
		},
		{
			name: "once the large node is initialized and runs the pods it was made for, the medium one goes",
			fixture: func() *fixture {
				f := newFixture(c4, c8).node("medium", c4).pod("a", "medium", "1").pod("b", "medium", "1").
					node("large", c8).pod("w1", "large", "2500m").pod("w2", "large", "2500m")
				f.claim("large").CreationTimestamp = metav1.NewTime(f.now.Add(-time.Minute))
				return f
			},
			recent: []string{"large"},
			want:   "Underutilized delete medium",
		},
		{
			name: "pending pods whose room is a booting claim hold back no node",
			fixture: func() *fixture {
				return newFixture(c4, c8).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1").
					booting("large", c8).pod("w1", "", "3500m").pod("w2", "", "3500m")
			},
			want: "Underutilized delete a",
		},
		{
			name: "a drifted node whose pods would fit only on a booting claim gets a replacement",
			fixture: func() *fixture {
				f := newFixture(c4, c8).node("d", c4).pod("p", "d", "3").booting("large", c8).pod("w", "", "2")
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				withCondition(f.claim("d"), v1alpha1.ConditionDrifted, driftLabels, f.now)
				return f
			},
			want: "Drifted replace d -> c4",
		},
		{
			name: "an expired node whose pods would fit only on a node not initialized yet gets a replacement",
			fixture: func() *fixture {
				f := newFixture(c4).node("old", c4).pod("p", "old", "3").registering("new", c4)
				f.pool.Spec.Disruption.ExpireAfter = &metav1.Duration{Duration: 30 * time.Minute}
				return f
			},
			want: "Expired replace old -> c4",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fixture()
			s := f.state()
			stable := map[string]time.Time{}
			for _, node := range f.nodes {
				stable[node.Name] = f.now.Add(-time.Hour)
			}
			for _, node := range tt.recent {
				stable[node] = f.now
			}
			pools, total, disrupting := s.poolTotals()
			budgets, _ := newLedger(pools, total, disrupting, f.now)
			r := newRound(s, s.candidates(), budgets, stable, nil, newMemory(memoryBackoff))
			cmd, err := r.decide(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(cmd); got != tt.want {
				t.Fatalf("decided %q, want %q; refusals %v", got, tt.want, notes(r))
			}
			if tt.refused == "" {
				return
			}
			if !refusedWith(r, tt.refused) {
				t.Fatalf("no refusal says %q; refusals: %v", tt.refused, notes(r))
			}
			for _, refused := range r.refusals {
				if got := refusalReason(refused); got != tt.record {
					t.Errorf("refusal of %s recorded as %q, want %q", refused.candidate.claim.Name, got, tt.record)
				}
			}
		})
	}
}

// simulate --scale-down names a booting claim as no room for pods that
// would move.
func TestABootingClaimIsNoCandidateAndNoRoom(t *testing.T) {
	f := newFixture(c4, c8).booting("large", c8)
	s := f.state()
	if got := notCandidateNote(s, f.claim("large")); got != "not initialized yet: room only for the pending pods it was made for, not for the pods of a node that would go" {
		t.Fatalf("note %q", got)
	}
	if !(whatIf{s}).booting()["large"] {
		t.Fatalf("the booting claim is not among the booting nodes: %v", whatIf{s}.booting())
	}
	if _, err := (whatIf{s}).settledSimulator(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A node kept for a booting one is looked at again as soon as that one is
// initialized, not after the memory's backoff: initialization changes the
// cluster's fingerprint.
func TestAKeptNodeIsDecidedAgainOnceTheBootingOneIsInitialized(t *testing.T) {
	f := newFixture(c4, c8).node("medium", c4).pod("a", "medium", "1").pod("b", "medium", "1").
		registering("large", c8).pod("w1", "large", "2500m").pod("w2", "large", "2500m")
	memory := newMemory(memoryBackoff)
	decide := func() (*command, *round) {
		s := f.state()
		stable := map[string]time.Time{"medium": f.now.Add(-time.Hour), "large": f.now}
		pools, total, disrupting := s.poolTotals()
		budgets, _ := newLedger(pools, total, disrupting, f.now)
		r := newRound(s, s.candidates(), budgets, stable, nil, memory)
		cmd, err := r.decide(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return cmd, r
	}
	if cmd, r := decide(); cmd != nil || !refusedWith(r, "its pods would fit only on large") {
		t.Fatalf("decided %q while large is not initialized; refusals %v", describe(cmd), notes(r))
	}
	f.now = f.now.Add(time.Second)
	withCondition(f.claim("large"), v1alpha1.ConditionInitialized, "Initialized", f.now)
	if cmd, r := decide(); describe(cmd) != "Underutilized delete medium" {
		t.Fatalf("decided %q once large is initialized; refusals %v", describe(cmd), notes(r))
	}
}
