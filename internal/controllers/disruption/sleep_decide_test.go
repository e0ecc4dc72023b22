package disruption

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// asleep adds a claim of the pool whose machine sleeps: the suspend
// annotation, Suspended=True, no node.
func (f *fixture) asleep(name string) *fixture {
	hourAgo := metav1.NewTime(f.now.Add(-time.Hour))
	f.claims = append(f.claims, v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), CreationTimestamp: hourAgo,
			Labels:      map[string]string{v1alpha1.LabelNodePool: f.pool.Name},
			Annotations: map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)},
		},
		Spec: v1alpha1.NodeClaimSpec{NodePoolRef: v1alpha1.NodePoolReference{Name: f.pool.Name}, Shape: v1alpha1.ClaimShape{Name: c4.Name, CPU: c4.CPU, Memory: c4.Memory}},
		Status: v1alpha1.NodeClaimStatus{ProviderID: "fake://" + name, Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSuspended, LastTransitionTime: hourAgo},
		}},
	})
	return f
}

// sleeps lets the fixture's pool put machines to sleep.
func (f *fixture) sleeps(machines string, reasons ...v1alpha1.DisruptionReason) *fixture {
	f.pool.Spec.Disruption.Sleep = &v1alpha1.Sleep{Machines: machines, Reasons: reasons}
	return f
}

// TestRoundChoosesWhichRemovedNodesSleep: of a decision's nodes, those
// removed without a replacement for a reason the pool sleeps for, on a
// provider that manages power, within the sleep budget, sleep; the others
// are deleted.
func TestRoundChoosesWhichRemovedNodesSleep(t *testing.T) {
	tests := []struct {
		name    string
		fixture func() *fixture
		power   powerCapability
		// want is the decision as "reason action claims…", and sleeping
		// the claims that sleep instead of being deleted.
		want     string
		sleeping []string
	}{
		{
			name: "an underused node whose pods fit elsewhere sleeps when the pool sleeps for every reason",
			fixture: func() *fixture {
				return newFixture(c4).sleeps("2").node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "2")
			},
			power:    powerSupported,
			want:     "Underutilized delete a",
			sleeping: []string{"a"},
		},
		{
			name: "an underused node sleeps when the pool sleeps for Underutilized",
			fixture: func() *fixture {
				return newFixture(c4).sleeps("2", v1alpha1.DisruptionReasonUnderutilized).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "2")
			},
			power:    powerSupported,
			want:     "Underutilized delete a",
			sleeping: []string{"a"},
		},
		{
			name: "an underused node is deleted when the pool sleeps only for Empty",
			fixture: func() *fixture {
				return newFixture(c4).sleeps("2", v1alpha1.DisruptionReasonEmpty).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "2")
			},
			power: powerSupported,
			want:  "Underutilized delete a",
		},
		{
			name: "an empty node is deleted when the pool sleeps only for Underutilized",
			fixture: func() *fixture {
				return newFixture(c4).sleeps("2", v1alpha1.DisruptionReasonUnderutilized).node("a", c4).node("b", c4).pod("q", "b", "2").emptyFor("a")
			},
			power: powerSupported,
			want:  "Empty delete a",
		},
		{
			name:    "a node replaced by a cheaper one is deleted, not put to sleep",
			fixture: func() *fixture { return newFixture(c4, c2).sleeps("2").node("a", c4).pod("p", "a", "1") },
			power:   powerSupported,
			want:    "Underutilized replace a",
		},
		{
			name: "empty nodes sleep as far as the sleep budget goes and the rest are deleted",
			fixture: func() *fixture {
				// Three claims, one asleep: 50% of three is two, one left.
				return newFixture(c4).sleeps("50%").node("a", c4).node("b", c4).asleep("z").emptyFor("a", "b")
			},
			power:    powerSupported,
			want:     "Empty delete a b",
			sleeping: []string{"a"},
		},
		{
			name:    "an empty node is deleted when the provider cannot manage power",
			fixture: func() *fixture { return newFixture(c4).sleeps("2").node("a", c4).emptyFor("a") },
			power:   powerNotSupported,
			want:    "Empty delete a",
		},
		{
			name:    "an empty node is deleted when the pool has no sleep policy",
			fixture: func() *fixture { return newFixture(c4).node("a", c4).emptyFor("a") },
			power:   powerSupported,
			want:    "Empty delete a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fixture()
			s := f.state()
			s.pools[f.pool.Name].power = tt.power
			cmd, err := f.round(s).decide(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if cmd == nil {
				t.Fatalf("no decision, want %q", tt.want)
			}
			names := cmd.names()
			sort.Strings(names)
			if got := string(cmd.reason) + " " + cmd.action() + " " + strings.Join(names, " "); got != tt.want {
				t.Fatalf("decision %q, want %q", got, tt.want)
			}
			var sleeping []string
			for name := range cmd.sleeps {
				sleeping = append(sleeping, name)
			}
			sort.Strings(sleeping)
			if strings.Join(sleeping, " ") != strings.Join(tt.sleeping, " ") {
				t.Fatalf("sleeping %v, want %v", sleeping, tt.sleeping)
			}
			for _, c := range cmd.candidates {
				if says := cmd.candidateMessage(c.claim); strings.HasPrefix(says, sleepNotePrefix) != cmd.sleeps[c.claim.Name] {
					t.Errorf("claim %s: the decision says %q", c.claim.Name, says)
				}
			}
		})
	}
}

// TestAsleepClaimsCountAgainstTheSleepBudgetOnly: an asleep claim is no
// candidate and takes no node from the pool's disruption budget or
// minNodes; a suspending one is going, as a deletion is.
func TestAsleepClaimsCountAgainstTheSleepBudgetOnly(t *testing.T) {
	f := newFixture(c4).sleeps("3").node("a", c4).node("b", c4).asleep("z").asleep("y")
	f.claim("b").Annotations[v1alpha1.AnnotationSuspend] = string(v1alpha1.DisruptionReasonEmpty)
	s := f.state()
	info := s.pools[f.pool.Name]
	if info.live != 2 || info.asleep != 2 || info.suspending != 1 || info.marked != 1 {
		t.Fatalf("live %d, asleep %d, suspending %d, marked %d; want 2, 2, 1, 1", info.live, info.asleep, info.suspending, info.marked)
	}
	if room := info.sleepRoom(); room != 0 {
		t.Fatalf("sleep room %d, want 0: three of four claims sleep or are being suspended", room)
	}
	_, total, disrupting := s.poolTotals()
	if total[f.pool.Name] != 2 || disrupting[f.pool.Name] != 1 {
		t.Fatalf("budget pool size %d, disrupting %d; want 2 (the asleep claims are not nodes), 1 (the suspending one)", total[f.pool.Name], disrupting[f.pool.Name])
	}
	for _, c := range s.candidates() {
		if c.claim.Name != "a" {
			t.Errorf("claim %s is a candidate", c.claim.Name)
		}
	}
}
