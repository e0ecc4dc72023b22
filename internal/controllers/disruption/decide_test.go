package disruption

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

func doNotDisrupt(pod *corev1.Pod) {
	pod.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
}

func withCondition(claim *v1alpha1.NodeClaim, conditionType, reason string, since time.Time) {
	claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{
		Type: conditionType, Status: metav1.ConditionTrue, Reason: reason, Message: reason, LastTransitionTime: metav1.NewTime(since),
	})
}

// emptyFor gives the named claims an Empty condition a minute old.
func (f *fixture) emptyFor(names ...string) *fixture {
	for _, name := range names {
		withCondition(f.claim(name), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
	}
	return f
}

// decideOnce runs one round on the fixture's state.
func decideOnce(t *testing.T, f *fixture) (*command, *round) {
	t.Helper()
	r := f.round(f.state())
	cmd, err := r.decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cmd, r
}

// refusalsByClaim is the round's refusals by the name of their claim.
func refusalsByClaim(r *round) map[string]refusal {
	byClaim := map[string]refusal{}
	for _, refused := range r.refusals {
		byClaim[refused.candidate.claim.Name] = refused
	}
	return byClaim
}

func TestRoundDecides(t *testing.T) {
	tests := []struct {
		name    string
		fixture func() *fixture
		// want is the decision as "reason action claims… -> shapes…", or
		// "" for none.
		want string
		// refused, when set, is part of a refusal's note.
		refused string
	}{
		{
			name: "a node whose pods fit on another is deleted",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "2")
			},
			want: "Underutilized delete a",
		},
		{
			name: "a node whose pods fit only on a cheaper shape is replaced by it",
			fixture: func() *fixture {
				return newFixture(c4, c2).node("a", c4).pod("p", "a", "1")
			},
			want: "Underutilized replace a -> c2",
		},
		{
			name: "a node of the cheapest shape its pods fit is kept and reported",
			fixture: func() *fixture {
				return newFixture(c4, c2).node("a", c2).pod("p", "a", "1500m")
			},
			refused: "Consolidatable=False: its pods fit only on a new node, and the cheapest (c2 of pool pool at 0.2/h) is not cheaper than 0.2/h",
		},
		{
			name: "nodes at a fifth of their cpu pack onto one, deleting rather than replacing",
			fixture: func() *fixture {
				f := newFixture(c4)
				for _, name := range []string{"a", "b", "c", "d", "e"} {
					f.node(name, c4).pod("p-"+name, name, "800m")
				}
				return f
			},
			want: "Underutilized delete a b c d",
		},
		{
			name: "a budget of one node lets one go at a time",
			fixture: func() *fixture {
				f := newFixture(c4)
				f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
				for _, name := range []string{"a", "b", "c", "d", "e"} {
					f.node(name, c4).pod("p-"+name, name, "800m")
				}
				return f
			},
			want: "Underutilized delete a",
		},
		{
			name: "minNodes keeps the pool's nodes",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
				f.pool.Spec.MinNodes = 2
				return f
			},
			refused: "below its minNodes of 2",
		},
		{
			name: "a pod annotated do-not-disrupt keeps its node; the other node goes",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1", doNotDisrupt).pod("q", "b", "1")
			},
			want:    "Underutilized delete b",
			refused: "pod default/p is annotated claimscale.io/do-not-disrupt",
		},
		{
			name: "a node annotated do-not-disrupt is kept",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "1")
				f.nodes[0].Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
				return f
			},
			refused: "node a is annotated claimscale.io/do-not-disrupt",
		},
		{
			name: "a pod no controller would bring back keeps its node",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1", func(pod *corev1.Pod) { pod.OwnerReferences = nil }).pod("q", "b", "3500m")
			},
			refused: "has no controller",
		},
		{
			name: "a pending pod that keeps its room does not hold consolidation back",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1").pod("waiting", "", "1")
			},
			want: "Underutilized delete a",
		},
		{
			name: "a node whose removal would take a pending pod's room is kept",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1").pod("waiting", "", "3")
			},
			refused: "removing it would leave pending pods without the room they have now: 1 pending pods have room now (pod default/waiting first), and with the node gone 1 pods would find none",
		},
		{
			// A large scale-up on a busy scheduler leaves pods pending for
			// minutes; their room must stay however long they wait.
			name: "a long-pending pod keeps its room",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1").pod("waiting", "", "3", func(pod *corev1.Pod) {
					pod.CreationTimestamp = metav1.NewTime(pod.CreationTimestamp.Add(-time.Hour))
				})
			},
			refused: "removing it would leave pending pods without the room they have now",
		},
		{
			name: "an empty node a pending pod is about to use is kept",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3").pod("waiting", "", "3")
				withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
				return f
			},
			refused: "removing it would leave pending pods without the room they have now",
		},
		{
			name: "a pending pod that nothing would take holds nothing back",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1").pod("waiting", "", "1", func(pod *corev1.Pod) {
					pod.Spec.NodeSelector = map[string]string{"team": "b"}
				})
			},
			want: "Underutilized delete a",
		},
		{
			name: "the pods of a node already going need room too",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).node("c", c4).pod("p", "a", "2").pod("q", "b", "2").pod("r", "c", "2")
				withCondition(f.claim("c"), v1alpha1.ConditionDisrupting, "Underutilized", f.now)
				return f
			},
		},
		{
			name: "an expired node is replaced first when its pods fit nowhere else, whatever the budget",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "3")
				f.pool.Spec.Disruption.ExpireAfter = &metav1.Duration{Duration: 30 * time.Minute}
				f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0"}}
				return f
			},
			want: "Expired replace a -> c4",
		},
		{
			name: "an expired node whose pods fit elsewhere is just deleted",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
				f.pool.Spec.Disruption.ExpireAfter = &metav1.Duration{Duration: 30 * time.Minute}
				f.claim("b").CreationTimestamp = metav1.NewTime(f.now.Add(-time.Minute))
				return f
			},
			want: "Expired delete a",
		},
		{
			name: "a drifted node is replaced within the Drifted budget",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "3")
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}
				withCondition(f.claim("a"), v1alpha1.ConditionDrifted, driftLabels, f.now)
				return f
			},
			want: "Drifted replace a -> c4",
		},
		{
			name: "a drifted node waits while the Drifted budget allows none",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "3")
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}
				withCondition(f.claim("a"), v1alpha1.ConditionDrifted, driftLabels, f.now)
				return f
			},
		},
		{
			name: "an empty node is deleted once empty for consolidateAfter",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3")
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
				return f
			},
			want: "Empty delete a",
		},
		{
			name: "an empty node is kept until it has been empty for consolidateAfter",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4)
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Second))
				return f
			},
		},
		{
			// Registration nominates the pods a node was bought for; until
			// the scheduler binds them the node holds them all the same.
			name: "a node whose pod is nominated to it is not empty",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3").
					pod("p", "", "1", func(pod *corev1.Pod) { pod.Status.NominatedNodeName = "a" })
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
				return f
			},
		},
		{
			name: "a pod nominated to a node holds it with its do-not-disrupt annotation",
			fixture: func() *fixture {
				return newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3500m").
					pod("p", "", "1", doNotDisrupt, func(pod *corev1.Pod) { pod.Status.NominatedNodeName = "a" })
			},
			refused: "pod default/p is annotated " + v1alpha1.AnnotationDoNotDisrupt,
		},
		{
			name: "a WhenEmpty pool's underused node stays",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
				f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
				return f
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fixture()
			s := f.state()
			r := f.round(s)
			cmd, err := r.decide(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(cmd); got != tt.want {
				t.Errorf("decided %q, want %q", got, tt.want)
			}
			if tt.refused != "" && !refusedWith(r, tt.refused) {
				t.Errorf("no refusal says %q; refusals: %v", tt.refused, notes(r))
			}
		})
	}
}

func describe(cmd *command) string {
	if cmd == nil {
		return ""
	}
	text := string(cmd.reason) + " " + cmd.action() + " " + strings.Join(cmd.names(), " ")
	if len(cmd.replacements) > 0 {
		text += " ->"
		for _, replacement := range cmd.replacements {
			text += " " + replacement.Shape.Name
		}
	}
	return text
}

func refusedWith(r *round, note string) bool {
	for _, refused := range r.refusals {
		if strings.Contains(refused.note, note) {
			return true
		}
	}
	return false
}

func notes(r *round) []string {
	var out []string
	for _, refused := range r.refusals {
		out = append(out, refused.reason+": "+refused.note)
	}
	return out
}

// A node found unconsolidatable is not simulated again on the same
// cluster until the memory's backoff passes.
func TestUnconsolidatableNodeIsNotSimulatedAgainUntilTheClusterChanges(t *testing.T) {
	f := newFixture(c4, c2).node("a", c2).pod("p", "a", "1500m")
	memory := newMemory(time.Minute)
	decide := func(now time.Time, f *fixture) (*command, *round) {
		f.now = now
		s := f.state()
		pools, total, disrupting := s.poolTotals()
		budgets, _ := newLedger(pools, total, disrupting, now)
		r := newRound(s, s.candidates(), budgets, map[string]time.Time{"a": now.Add(-time.Hour), "b": now.Add(-time.Hour)}, nil, memory)
		cmd, err := r.decide(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return cmd, r
	}
	start := f.now
	if _, r := decide(start, f); !refusedWith(r, "Consolidatable=False") {
		t.Fatalf("first round refused nothing: %v", notes(r))
	}
	if _, r := decide(start.Add(time.Second), f); refusedWith(r, "Consolidatable=False") {
		t.Fatal("the same cluster was simulated again")
	}
	if _, r := decide(start.Add(2*time.Minute), f); !refusedWith(r, "Consolidatable=False") {
		t.Fatal("not simulated again after the backoff")
	}
	// A new node with room changes the cluster: a's pod fits there now.
	f.node("b", c4)
	if cmd, r := decide(start.Add(2*time.Minute+time.Second), f); describe(cmd) != "Underutilized delete a" {
		t.Fatalf("decided %q after the cluster changed; refusals %v", describe(cmd), notes(r))
	}
}

// After a scale-down the Empty conditions of a thousand claims are written
// over several seconds; a node's consolidateAfter counts from when a round
// saw it lose its last pod, not from that write.
func TestEmptyClockStartsWhenTheNodeLostItsPods(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4)
	f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
	start := f.now
	tracker := newStability()
	decide := func(now time.Time) string {
		f.now = now
		s := f.state()
		pools, total, disrupting := s.poolTotals()
		budgets, _ := newLedger(pools, total, disrupting, now)
		r := newRound(s, s.candidates(), budgets, nil, tracker.emptySince, newMemory(memoryBackoff))
		cmd, err := r.decide(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return describe(cmd)
	}
	initialized := start.Add(-time.Hour)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p"}}
	tracker.observe("a", []*corev1.Pod{pod}, initialized, start)
	// b was empty when first seen: no round saw it empty out, so only its
	// condition (absent here) would count.
	tracker.observe("b", nil, initialized, start)
	tracker.observe("a", nil, initialized, start.Add(time.Second))
	if got := decide(start.Add(time.Second + 10*time.Second - time.Millisecond)); got != "" {
		t.Fatalf("decided %q before consolidateAfter passed", got)
	}
	if got := decide(start.Add(time.Second + 10*time.Second)); got != "Empty delete a" {
		t.Fatalf("decided %q once a was empty for consolidateAfter, without an Empty condition; want a deleted", got)
	}
}

// A node that stays says why on its claim's Consolidatable condition: the
// refusal carries the condition's reason, a budget's without an event.
func TestRefusalsCarryTheConsolidatableReason(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).node("c", c4).pod("p", "c", "1", doNotDisrupt)
	f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
	f.emptyFor("a", "b")
	cmd, r := decideOnce(t, f)
	if describe(cmd) != "Empty delete a" {
		t.Fatalf("decided %q, want one empty node within the budget of 1", describe(cmd))
	}
	got := refusalsByClaim(r)
	if b := got["b"]; b.condition != v1alpha1.ConsolidatableReasonDisruptionBudget || !b.quiet {
		t.Errorf("empty node held by the budget: %+v, want a quiet DisruptionBudget refusal", b)
	}
	if c := got["c"]; c.condition != v1alpha1.ConsolidatableReasonDoNotDisrupt || c.quiet {
		t.Errorf("node with a do-not-disrupt pod: %+v, want a DoNotDisrupt refusal with an event", c)
	}
	// The decision records read the same reasons, and count each node once.
	if reason := refusalReason(got["b"]); reason != decisions.NodeReasonBudget {
		t.Errorf("empty node held by the budget is recorded as %q, want %q", reason, decisions.NodeReasonBudget)
	}
	if reason := refusalReason(got["c"]); reason != decisions.NodeReasonDoNotDisrupt {
		t.Errorf("node with a do-not-disrupt pod is recorded as %q, want %q", reason, decisions.NodeReasonDoNotDisrupt)
	}
	for _, h := range r.held {
		if h.candidate.claim.Name == "b" {
			t.Errorf("empty node held by the budget is recorded twice: as refused and as held")
		}
	}
}

// Underused nodes a budget of 0 keeps say so on their claims' condition,
// as empty ones do, without an event each.
func TestUnderusedNodesHeldByTheBudgetSayDisruptionBudget(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "1")
	f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0"}}
	cmd, r := decideOnce(t, f)
	if cmd != nil {
		t.Fatalf("decided %q under a budget of 0", describe(cmd))
	}
	got := refusalsByClaim(r)
	for _, name := range []string{"a", "b"} {
		refused := got[name]
		if refused.condition != v1alpha1.ConsolidatableReasonDisruptionBudget || !refused.quiet {
			t.Errorf("underused node %s under a budget of 0: %+v, want a quiet DisruptionBudget refusal", name, refused)
		}
		if reason := refusalReason(refused); reason != decisions.NodeReasonBudget {
			t.Errorf("underused node %s is recorded as %q, want %q", name, reason, decisions.NodeReasonBudget)
		}
	}
}

// One pod waiting for room in one pool holds back only the nodes whose
// removal would take that room: the other pool consolidates as usual.
func TestAPendingPodHoldsBackOnlyTheNodesItNeeds(t *testing.T) {
	teamA := func(pod *corev1.Pod) { pod.Spec.NodeSelector = map[string]string{"team": "a"} }
	f := newFixture(c4).node("a1", c4).node("a2", c4).pod("p1", "a1", "1", teamA).pod("p2", "a2", "1", teamA).pod("waiting", "", "3", teamA)
	other := f.pool.DeepCopy()
	other.Name = "other"
	other.Spec.Template.Labels = map[string]string{"team": "b"}
	f.otherPool(other).nodeOf(other, "b1", c4).nodeOf(other, "b2", c4).pod("q1", "b1", "1").pod("q2", "b2", "1")

	cmd, r := decideOnce(t, f)
	if describe(cmd) != "Underutilized delete b1" {
		t.Fatalf("decided %q, want the other pool's node to go; refusals %v", describe(cmd), notes(r))
	}
	kept := refusalsByClaim(r)
	for _, name := range []string{"a1", "a2"} {
		refused, ok := kept[name]
		if !ok || unconsolidatableCondition(refused) != v1alpha1.ConsolidatableReasonPendingPods {
			t.Errorf("node %s: refusal %+v, want Consolidatable=False %s", name, refused, v1alpha1.ConsolidatableReasonPendingPods)
		}
		if reason := refusalReason(refused); reason != decisions.NodeReasonPendingPods {
			t.Errorf("node %s is recorded as %q, want %q", name, reason, decisions.NodeReasonPendingPods)
		}
	}
}

// Empty nodes do not wait for a drain to finish, as the methods that move
// pods do; the drained node's pods keep the room they have now, as pending
// pods do.
func TestEmptyNodesGoWhileANodeDrainsLeavingItsPodsRoom(t *testing.T) {
	f := newFixture(c4).node("going", c4).pod("stranded", "going", "3").going("going").
		node("a", c4).node("b", c4).node("c", c4).pod("p", "c", "2")
	f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
	f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "100%"}}
	f.emptyFor("a", "b")
	cmd, r := decideOnce(t, f)
	// The stranded pod fits on a or b, not on c: one of them stays.
	if describe(cmd) != "Empty delete a" {
		t.Fatalf("decided %q while going drains, want a deleted and b kept for its pod; refusals %v", describe(cmd), notes(r))
	}
	kept, ok := refusalsByClaim(r)["b"]
	if !ok || kept.condition != v1alpha1.ConsolidatableReasonPendingPods || !strings.Contains(kept.note, "pod default/stranded first") {
		t.Errorf("b's refusal: %+v, want PendingPods naming the drained node's pod", kept)
	}
	// Moving pods still waits for the drain.
	if reason := r.whatIf.unsettled(); reason != "1 pods on node going, which is going, still have to move" {
		t.Errorf("unsettled: %q", reason)
	}
}

// An empty node the budget holds keeps the same note, and with it the
// same Consolidatable condition, while the pool shrinks: at a scale-down
// of a thousand nodes a note with the budget's share of the pool in it
// rewrote hundreds of claims each round.
func TestTheBudgetsNoteStaysWhileThePoolShrinks(t *testing.T) {
	heldNote := func(nodes int) string {
		f := newFixture(c4)
		f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
		f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "20%"}}
		for i := range nodes {
			name := fmt.Sprintf("n%02d", i)
			f.node(name, c4).emptyFor(name)
		}
		_, r := decideOnce(t, f)
		last, ok := refusalsByClaim(r)[fmt.Sprintf("n%02d", nodes-1)]
		if !ok {
			t.Fatalf("at %d nodes the last is not held: %v", nodes, notes(r))
		}
		return last.note
	}
	atTwenty, atTen := heldNote(20), heldNote(10)
	if atTwenty != atTen {
		t.Errorf("the note of a node the budget holds changed as the pool shrank:\n%s\n%s", atTwenty, atTen)
	}
	if !strings.Contains(atTen, "disruption budget for Empty is taken by the nodes already going") {
		t.Errorf("note %q does not say the budget is taken", atTen)
	}
}
