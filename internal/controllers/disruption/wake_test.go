package disruption

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestWakeAtIsTheEarliestDeadlineOfAnUnchangedCluster(t *testing.T) {
	tests := []struct {
		name    string
		fixture func() *fixture
		// stable is how long ago the nodes' pods last changed.
		stable time.Duration
		// remembered, when set, is how long ago a decision that found
		// nothing was remembered.
		remembered time.Duration
		// want is how long after now the next round is due; 0 for none.
		want time.Duration
	}{
		{
			name:    "nodes whose pods changed long ago and nothing remembered: no deadline",
			fixture: func() *fixture { return newFixture(c4).node("a", c4).pod("p", "a", "1") },
			stable:  time.Hour,
		},
		{
			name:    "a node whose pods just changed is due when its consolidateAfter runs out",
			fixture: func() *fixture { return newFixture(c4).node("a", c4).pod("p", "a", "1") },
			stable:  4 * time.Second,
			want:    6 * time.Second,
		},
		{
			name: "a claim is due when it expires",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "1")
				f.pool.Spec.Disruption.ExpireAfter = &metav1.Duration{Duration: 90 * time.Minute}
				return f
			},
			stable: time.Hour,
			want:   30 * time.Minute,
		},
		{
			name:       "a decision that found nothing is due again when its backoff ends",
			fixture:    func() *fixture { return newFixture(c4).node("a", c4).pod("p", "a", "1") },
			stable:     time.Hour,
			remembered: time.Minute,
			want:       memoryBackoff - time.Minute,
		},
		{
			name: "a claim marked Disrupting is due when its mark goes stale",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "1")
				withCondition(f.claim("a"), v1alpha1.ConditionDisrupting, "Underutilized", f.now.Add(-4*time.Second))
				return f
			},
			stable: time.Hour,
			want:   staleMark - 4*time.Second,
		},
		{
			name: "a scheduled budget is due on the next minute",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).pod("p", "a", "1")
				f.now = f.now.Add(15 * time.Second)
				schedule := "0 9 * * *"
				f.pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0", Schedule: &schedule, Duration: &metav1.Duration{Duration: time.Hour}}}
				return f
			},
			stable: time.Hour,
			want:   45 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fixture()
			s := f.state()
			stable := map[string]time.Time{}
			for _, node := range f.nodes {
				stable[node.Name] = f.now.Add(-tt.stable)
			}
			memory := newMemory(memoryBackoff)
			if tt.remembered > 0 {
				memory.remember("uid-a", v1alpha1.DisruptionReasonUnderutilized, s.fingerprint, f.now.Add(-tt.remembered))
			}
			got := wakeAt(s, s.candidates(), stable, nil, memory)
			if tt.want == 0 {
				if !got.IsZero() {
					t.Fatalf("wake at %s after now, want no deadline", got.Sub(f.now))
				}
				return
			}
			if got.Sub(f.now) != tt.want {
				t.Fatalf("wake %s after now, want %s", got.Sub(f.now), tt.want)
			}
		})
	}
}
