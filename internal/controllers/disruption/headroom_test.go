package disruption

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestRoundKeepsWarmCapacity(t *testing.T) {
	cpu := func(s string) *resource.Quantity {
		q := resource.MustParse(s)
		return &q
	}
	emptyA := func(f *fixture) *fixture {
		f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
		withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
		return f
	}
	tests := []struct {
		name    string
		fixture func() *fixture
		want    string
		refused string
	}{
		{
			name: "an empty node that holds the headroom stays",
			fixture: func() *fixture {
				f := emptyA(newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3"))
				f.pool.Spec.Headroom = &v1alpha1.Headroom{CPU: cpu("2")}
				return f
			},
		},
		{
			name: "an empty node the headroom does not need goes",
			fixture: func() *fixture {
				f := emptyA(newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3"))
				f.pool.Spec.Headroom = &v1alpha1.Headroom{CPU: cpu("1")}
				return f
			},
			want: "Empty delete a",
		},
		{
			name: "a node whose pods fit elsewhere stays when the headroom then would not",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "2")
				f.pool.Spec.Headroom = &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: 1, CPU: *cpu("2")}}
				return f
			},
			refused: "pool pool would lose headroom",
		},
		{
			name: "headroom that fits nowhere now does not stop a removal that does not make it worse",
			fixture: func() *fixture {
				f := newFixture(c4).node("a", c4).node("b", c4).pod("p", "a", "1").pod("q", "b", "2")
				f.pool.Spec.Headroom = &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: 1, CPU: *cpu("8")}}
				return f
			},
			want: "Underutilized delete a",
		},
		{
			name: "an active capacity schedule's minNodes keeps an empty node",
			fixture: func() *fixture {
				f := emptyA(newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3"))
				f.pool.Spec.CapacitySchedules = []v1alpha1.CapacitySchedule{{
					Schedule: "0 7 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour}, MinNodes: ptrTo(int32(2)),
				}}
				return f
			},
		},
		{
			name: "outside its window the schedule keeps nothing",
			fixture: func() *fixture {
				f := emptyA(newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3"))
				f.pool.Spec.CapacitySchedules = []v1alpha1.CapacitySchedule{{
					Schedule: "0 7 * * 6", Duration: metav1.Duration{Duration: 12 * time.Hour}, MinNodes: ptrTo(int32(2)),
				}}
				return f
			},
			want: "Empty delete a",
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

func ptrTo[T any](v T) *T { return &v }

// Right after a start the pool's external scaler has not been asked yet:
// its headroom is unknown, so none of its nodes goes for want of it.
func TestUnknownExternalHeadroomKeepsNodes(t *testing.T) {
	f := newFixture(c4).node("a", c4).node("b", c4).pod("q", "b", "3")
	f.pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmpty
	withCondition(f.claim("a"), v1alpha1.ConditionEmpty, "Empty", f.now.Add(-time.Minute))
	s := f.state()
	s.pools[f.pool.Name].target.Unknown = true
	cmd, err := f.round(s).decide(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(cmd); got != "" {
		t.Errorf("decided %q while the pool's headroom is unknown, want nothing", got)
	}
}
