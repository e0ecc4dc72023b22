package disruption

import (
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestAllowedDisruptions(t *testing.T) {
	monday10 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	monday20 := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	workHours := v1alpha1.Budget{Nodes: "0", Schedule: ptr("0 9 * * mon-fri"), Duration: &metav1.Duration{Duration: 8 * time.Hour}}
	tests := []struct {
		name    string
		budgets []v1alpha1.Budget
		reason  v1alpha1.DisruptionReason
		total   int
		now     time.Time
		want    int
	}{
		{"no budget means no limit", nil, v1alpha1.DisruptionReasonEmpty, 10, monday10, math.MaxInt},
		{"a count is taken as is", []v1alpha1.Budget{{Nodes: "3"}}, v1alpha1.DisruptionReasonEmpty, 10, monday10, 3},
		{"a percentage rounds up", []v1alpha1.Budget{{Nodes: "10%"}}, v1alpha1.DisruptionReasonEmpty, 15, monday10, 2},
		{"a percentage of one node still allows one", []v1alpha1.Budget{{Nodes: "10%"}}, v1alpha1.DisruptionReasonEmpty, 1, monday10, 1},
		{"the strictest active budget wins", []v1alpha1.Budget{{Nodes: "50%"}, {Nodes: "2"}}, v1alpha1.DisruptionReasonEmpty, 10, monday10, 2},
		{"a budget for other reasons does not apply", []v1alpha1.Budget{{Nodes: "5"}, {Nodes: "0", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}, v1alpha1.DisruptionReasonEmpty, 10, monday10, 5},
		{"a budget for this reason applies", []v1alpha1.Budget{{Nodes: "5"}, {Nodes: "0", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}, v1alpha1.DisruptionReasonDrifted, 10, monday10, 0},
		{"a scheduled budget holds inside its window", []v1alpha1.Budget{{Nodes: "5"}, workHours}, v1alpha1.DisruptionReasonEmpty, 10, monday10, 0},
		{"a scheduled budget is off outside its window", []v1alpha1.Budget{{Nodes: "5"}, workHours}, v1alpha1.DisruptionReasonEmpty, 10, monday20, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: tt.budgets}}}
			got, err := AllowedDisruptions(pool, tt.reason, tt.total, tt.now)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("allowed %d, want %d", got, tt.want)
			}
		})
	}
}

func TestAllowedDisruptionsRejectsABadSchedule(t *testing.T) {
	pool := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{
		{Nodes: "1", Schedule: ptr("every tuesday"), Duration: &metav1.Duration{Duration: time.Hour}},
	}}}}
	if _, err := AllowedDisruptions(pool, v1alpha1.DisruptionReasonEmpty, 3, time.Now()); err == nil {
		t.Fatal("a malformed schedule was accepted")
	}
}

func ptr[T any](v T) *T { return &v }

func TestLedger(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pool := func(name string, budgets ...v1alpha1.Budget) *v1alpha1.NodePool {
		return &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: budgets}}}
	}
	drifted := []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}
	tests := []struct {
		name       string
		pool       *v1alpha1.NodePool
		total      int
		disrupting int
		take       int
		reason     v1alpha1.DisruptionReason
		want       int
	}{
		{"what is disrupting counts against the budget", pool("p", v1alpha1.Budget{Nodes: "3"}), 10, 1, 0, v1alpha1.DisruptionReasonEmpty, 2},
		{"what a round takes counts against the budget", pool("p", v1alpha1.Budget{Nodes: "3"}), 10, 1, 1, v1alpha1.DisruptionReasonEmpty, 1},
		{"never below zero", pool("p", v1alpha1.Budget{Nodes: "1"}), 10, 3, 0, v1alpha1.DisruptionReasonEmpty, 0},
		{"a percentage is of the pool's claims", pool("p", v1alpha1.Budget{Nodes: "50%"}), 6, 1, 0, v1alpha1.DisruptionReasonUnderutilized, 2},
		{"a budget for Drifted leaves other reasons alone", pool("p", v1alpha1.Budget{Nodes: "0", Reasons: drifted}), 6, 0, 0, v1alpha1.DisruptionReasonUnderutilized, math.MaxInt},
		{"a budget for Drifted holds drift", pool("p", v1alpha1.Budget{Nodes: "0", Reasons: drifted}), 6, 0, 0, v1alpha1.DisruptionReasonDrifted, 0},
		{"disruptions for one reason count against another's budget", pool("p", v1alpha1.Budget{Nodes: "1", Reasons: drifted}), 6, 1, 0, v1alpha1.DisruptionReasonDrifted, 0},
		{"a budget that cannot be read allows nothing", pool("p", v1alpha1.Budget{Nodes: "1", Schedule: ptr("never"), Duration: &metav1.Duration{Duration: time.Hour}}), 6, 0, 0, v1alpha1.DisruptionReasonEmpty, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newLedger([]*v1alpha1.NodePool{tt.pool}, map[string]int{"p": tt.total}, map[string]int{"p": tt.disrupting}, now)
			l.take("p", tt.take)
			if got := l.remaining("p", tt.reason); got != tt.want {
				t.Fatalf("remaining %d, want %d", got, tt.want)
			}
		})
	}
	if l, _ := newLedger(nil, nil, nil, now); l.remaining("unknown", v1alpha1.DisruptionReasonEmpty) != 0 {
		t.Fatal("a pool the ledger does not know allows disruptions")
	}
}
