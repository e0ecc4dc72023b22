package disruption

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

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

func TestAllowedDisruptionsRejectsWhatItCannotRead(t *testing.T) {
	hour := &metav1.Duration{Duration: time.Hour}
	monday10 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		budget v1alpha1.Budget
		want   string
	}{
		{"a malformed schedule", v1alpha1.Budget{Nodes: "1", Schedule: ptr("every tuesday"), Duration: hour}, "parsing schedule"},
		{"a schedule that never fires", v1alpha1.Budget{Nodes: "1", Schedule: ptr("0 0 30 2 *"), Duration: hour}, `schedule "0 0 30 2 *" never fires`},
		{"a schedule on 31 April", v1alpha1.Budget{Nodes: "1", Schedule: ptr("0 0 31 apr *"), Duration: hour}, "never fires"},
		{"a schedule with a time zone", v1alpha1.Budget{Nodes: "1", Schedule: ptr("CRON_TZ=Europe/Zurich 0 9 * * *"), Duration: hour}, "time zones and @every"},
		{"a schedule of @every", v1alpha1.Budget{Nodes: "1", Schedule: ptr("@every 1h"), Duration: hour}, "time zones and @every"},
		{"a duration of zero", v1alpha1.Budget{Nodes: "1", Schedule: ptr("@daily"), Duration: &metav1.Duration{}}, "must be positive"},
		{"a percentage above 100", v1alpha1.Budget{Nodes: "150%"}, "not a percentage from 0% to 100%"},
		{"a negative percentage", v1alpha1.Budget{Nodes: "-5%"}, "not a percentage"},
		{"a negative count", v1alpha1.Budget{Nodes: "-1"}, "not a count of nodes"},
		{"a count beyond an int", v1alpha1.Budget{Nodes: "99999999999999999999"}, "not a count of nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{tt.budget}}}}
			_, err := AllowedDisruptions(pool, v1alpha1.DisruptionReasonEmpty, 3, monday10)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// A schedule that fires only in leap years is rare, not broken.
func TestAScheduleOnTheLeapDayHoldsOnlyThen(t *testing.T) {
	pool := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{
		{Nodes: "5"},
		{Nodes: "0", Schedule: ptr("0 0 29 2 *"), Duration: &metav1.Duration{Duration: 24 * time.Hour}},
	}}}}
	for now, want := range map[time.Time]int{
		time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC):  0,
		time.Date(2028, 3, 1, 12, 0, 0, 0, time.UTC):   5,
		time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC): 5,
	} {
		got, err := AllowedDisruptions(pool, v1alpha1.DisruptionReasonEmpty, 10, now)
		if err != nil {
			t.Fatalf("at %s: %v", now, err)
		}
		if got != want {
			t.Fatalf("at %s: allowed %d, want %d", now, got, want)
		}
	}
}

// A pool whose budget cannot be read says so on the pool, once per
// eventRepeat, not every round.
func TestABudgetThatCannotBeReadIsReportedOnThePool(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-p"}, Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{
		{Nodes: "1", Schedule: ptr("0 0 31 2 *"), Duration: &metav1.Duration{Duration: time.Hour}},
	}}}}
	recorder := events.NewFakeRecorder(10)
	c := &reporter{teller: &teller{recorder: recorder, memo: newEventMemo(eventRepeat)}}
	s := &state{now: now, pools: map[string]*poolInfo{"p": {pool: pool}}}
	for round := 0; round < 3; round++ {
		_, errs := newLedger([]*v1alpha1.NodePool{pool}, map[string]int{"p": 4}, nil, now)
		c.reportBudgetErrors(context.Background(), s, errs)
	}
	if got := len(recorder.Events); got != 1 {
		t.Fatalf("%d events after three rounds, want 1", got)
	}
	event := <-recorder.Events
	for _, want := range []string{"Warning", eventInvalidBudget, "never fires", "disrupts no node"} {
		if !strings.Contains(event, want) {
			t.Fatalf("event %q lacks %q", event, want)
		}
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
		{"a budget that never fires allows nothing, not everything", pool("p", v1alpha1.Budget{Nodes: "3"}, v1alpha1.Budget{Nodes: "100%", Schedule: ptr("0 0 30 2 *"), Duration: &metav1.Duration{Duration: time.Hour}}), 6, 0, 0, v1alpha1.DisruptionReasonEmpty, 0},
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
