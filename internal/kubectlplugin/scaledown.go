package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/disruption"
	"github.com/claimscale/claimscale/internal/decisions"
)

// planScaleDown asks the disruption package what a round would decide now
// on the cluster kube reads, with each pool's shapes as the controller
// resolved them, through a reader that cannot write.
//
// leftOut are the pools the controller has no offer of: the round leaves
// them out as the controller's does, so no replacement comes from them.
func planScaleDown(ctx context.Context, kube client.Reader, offers []decisions.PoolOffer, clk clock.WithTicker) (plan *disruption.Plan, leftOut []string, err error) {
	byPool := map[string]decisions.PoolOffer{}
	for _, offer := range offers {
		byPool[offer.Pool] = offer
	}
	var pools v1alpha1.NodePoolList
	if err := kube.List(ctx, &pools); err != nil {
		return nil, nil, fmt.Errorf("listing pools: %w", err)
	}
	for _, pool := range pools.Items {
		if _, ok := byPool[pool.Name]; !ok && pool.DeletionTimestamp.IsZero() {
			leftOut = append(leftOut, pool.Name)
		}
	}
	plan, err = disruption.PlanScaleDown(ctx, readOnly{Reader: kube}, offerPools{offers: byPool, kube: kube}, clk)
	if err != nil {
		return nil, nil, fmt.Errorf("deciding as a disruption round: %w", err)
	}
	return plan, leftOut, nil
}

// fixedClock is a snapshot's time: a replay judges consolidateAfter and
// budgets as of when the snapshot was taken.
type fixedClock struct {
	clock.WithTicker
	now time.Time
}

func (c fixedClock) Now() time.Time                  { return c.now }
func (c fixedClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }

// writePlan prints the round's decision, then each node: what would
// happen to it, or why it stays, in the words of `why node/…`.
func writePlan(w io.Writer, plan *disruption.Plan, leftOut []string) {
	d := plan.Decision
	switch {
	case d == nil:
		fmt.Fprintln(w, "consolidation would remove or replace no node now")
	case d.Action == "replace":
		var made []string
		for _, n := range d.Replacements {
			made = append(made, fmt.Sprintf("%s of pool %s at %s/h", n.Shape, n.Pool, formatPrice(n.Price)))
		}
		fmt.Fprintf(w, "would replace %s/h of nodes (%s) with %s, saving %s/h\n", formatPrice(d.Price), d.Reason, strings.Join(made, " and "), formatPrice(d.Saving))
	default:
		fmt.Fprintf(w, "would delete %s/h of nodes (%s), saving %s/h\n", formatPrice(d.Price), d.Reason, formatPrice(d.Saving))
	}
	if len(leftOut) > 0 {
		fmt.Fprintf(w, "pools left out, as the controller leaves them out now (no shapes resolved; see their events): %s\n", strings.Join(leftOut, ", "))
	}
	if plan.Settling != "" {
		fmt.Fprintf(w, "no pods move while the cluster settles: %s\n", plan.Settling)
	}
	for _, inFlight := range plan.InFlight {
		fmt.Fprintf(w, "in flight: %s\n", inFlight)
	}
	for _, v := range plan.Nodes {
		node := v.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(w, "node %s (claim %s, pool %s, %s/h): ", node, v.NodeClaim, v.Pool, formatPrice(v.Price))
		switch v.Outcome {
		case decisions.NodeDisrupting:
			fmt.Fprintf(w, "%s, %s\n", d.Action, v.Reason)
		case decisions.NodeKept:
			fmt.Fprintf(w, "stays, %s\n", v.Reason)
		case disruption.OutcomeCandidate:
			fmt.Fprintln(w, "stays this round")
		default:
			fmt.Fprintln(w, "stays, not a candidate")
		}
		fmt.Fprintf(w, "  %s\n", v.Message)
	}
}
