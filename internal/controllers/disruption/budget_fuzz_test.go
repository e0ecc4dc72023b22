package disruption

import (
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/cronwindow"
)

// FuzzAllowedDisruptions feeds a budget's nodes, schedule and duration as a
// user writes them (the duration as metav1.Duration reads it) to
// AllowedDisruptions. Whatever they are, the answer is an error or a
// number of nodes that is not negative and, for a percentage, not above
// the pool's; a never-firing schedule is an error, not a budget that is
// always active. The seed corpus is in testdata/fuzz/FuzzAllowedDisruptions.
func FuzzAllowedDisruptions(f *testing.F) {
	f.Fuzz(func(t *testing.T, nodes, spec, duration string, totalNodes uint16, unixSeconds int64) {
		budget := v1alpha1.Budget{Nodes: nodes}
		if spec != "" || duration != "" {
			d, err := time.ParseDuration(duration)
			if err != nil {
				t.Skip() // metav1.Duration refuses it when the object is read
			}
			budget.Schedule, budget.Duration = &spec, &metav1.Duration{Duration: d}
		}
		pool := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{budget}}}}
		now := time.Unix(unixSeconds%(1<<40), 0) // about 35,000 years either side of 1970
		total := int(totalNodes)
		allowed, err := AllowedDisruptions(pool, v1alpha1.DisruptionReasonEmpty, total, now)
		if err != nil {
			return
		}
		if allowed < 0 {
			t.Fatalf("allowed %d", allowed)
		}
		if allowed != math.MaxInt && len(nodes) > 0 && nodes[len(nodes)-1] == '%' && allowed > total {
			t.Fatalf("%s of %d nodes allows %d", nodes, total, allowed)
		}
		if budget.Schedule == nil {
			return
		}
		// A budget found active must have a schedule that fires.
		parsed, err := cronwindow.Parse(spec)
		if err != nil {
			t.Fatalf("schedule %q was used but does not parse: %v", spec, err)
		}
		if allowed != math.MaxInt && parsed.Next(now.UTC().Add(-budget.Duration.Duration)).IsZero() && parsed.Next(now.UTC()).IsZero() {
			t.Fatalf("schedule %q never fires, yet its budget holds", spec)
		}
	})
}
