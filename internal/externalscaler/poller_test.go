package externalscaler

import (
	"errors"
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestCount(t *testing.T) {
	perNode := resource.MustParse("50")
	external := &v1alpha1.ExternalHeadroom{TargetPerNode: &perNode, Min: 1, Max: 8}
	tests := []struct {
		name   string
		metric float64
		want   int32
	}{
		{"500 jobs at 50 per node want 10 nodes, capped at 8", 500, 8},
		{"a part of a node rounds up", 101, 3},
		{"an exact multiple does not", 100, 2},
		{"no jobs is the floor", 0, 1},
		{"a negative metric is the floor", -40, 1},
		{"a metric that is no number is the floor", math.NaN(), 1},
		{"an infinite metric is the ceiling", math.Inf(1), 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Count(tt.metric, external); got != tt.want {
				t.Errorf("Count(%g) = %d, want %d", tt.metric, got, tt.want)
			}
		})
	}
}

// An unreachable scaler's last answer stands for the grace period, then
// the floor; a pool that never had an answer is at its floor.
func TestCountFallsBackAfterTheGracePeriod(t *testing.T) {
	start := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	perNode := resource.MustParse("10")
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "ci", UID: "uid-1"}, Spec: v1alpha1.NodePoolSpec{Headroom: &v1alpha1.Headroom{
		External: &v1alpha1.ExternalHeadroom{TargetPerNode: &perNode, Min: 1, Max: 5, GracePeriod: &metav1.Duration{Duration: time.Minute}},
	}}}
	p := &Poller{Clock: clk}
	if got, known := p.Count(pool); got != 1 || known {
		t.Fatalf("not asked yet: %d (known %t), want the floor 1, unknown", got, known)
	}
	p.readings = map[string]reading{"ci": {uid: "uid-1", failing: errors.New("connection refused")}}
	if got, known := p.Count(pool); got != 1 || !known {
		t.Fatalf("asked, never answered: %d (known %t), want the floor 1, known", got, known)
	}
	p.readings = map[string]reading{"ci": {uid: "uid-1", count: 4, ok: true, at: start}}
	if got, _ := p.Count(pool); got != 4 {
		t.Fatalf("answering: %d, want 4", got)
	}
	p.readings["ci"] = reading{uid: "uid-1", count: 4, ok: true, at: start, failing: errors.New("connection refused")}
	clk.Step(time.Minute)
	if got, _ := p.Count(pool); got != 4 {
		t.Fatalf("unreachable within the grace period: %d, want the last answer 4", got)
	}
	clk.Step(time.Second)
	if got, _ := p.Count(pool); got != 1 {
		t.Fatalf("unreachable past the grace period: %d, want the floor 1", got)
	}
	recreated := pool.DeepCopy()
	recreated.UID = "uid-2"
	p.readings["ci"] = reading{uid: "uid-1", count: 4, ok: true, at: clk.Now()}
	if got, _ := p.Count(recreated); got != 1 {
		t.Fatalf("a pool of the same name made again: %d, want the floor 1, not the old pool's answer", got)
	}
}
