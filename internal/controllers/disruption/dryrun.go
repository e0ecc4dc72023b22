package disruption

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// A dry run (Controller.DryRun, the operator's --dry-run) decides,
// records and reports as every round does, and acts on no decision: it
// marks, cordons, replaces and deletes nothing. Its events say they are a
// dry run's (teller.eventf), and the decision store records its decisions
// as a dry run's. PlanScaleDown (plan.go) is one such round on demand,
// for kubectl claimscale simulate --scale-down.

// acts says whether the round's decision is acted on. A dry run's is
// recorded and acted on by nobody: the next round would only decide it
// again, so it does not keep the controller busy.
func acts(cmd *command, dryRun bool) bool { return cmd != nil && !dryRun }

// wouldDisrupt is what a dry run does with a decision instead of acting
// on it. The decision record says it; the log would say it every round, so
// only at debug level.
func wouldDisrupt(ctx context.Context, cmd *command) {
	log.FromContext(ctx).V(1).Info("dry-run: would disrupt", "reason", cmd.reason, "action", cmd.action(), "nodeClaims", cmd.names(), "message", cmd.message)
}
