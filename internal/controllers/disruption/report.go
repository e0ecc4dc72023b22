package disruption

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/metrics"
)

// reporter says what a round decided and why: the Consolidatable
// condition and the events of each node it kept (report), the decision
// records (records.go), budgets it cannot read, and the metrics.
type reporter struct {
	teller *teller
	writer *writer
	// store keeps the latest decision about each node; nil keeps none.
	store *decisions.Store
	// verdicts keeps the Consolidatable=False condition of each claim
	// the last round that decided about it gave (report).
	verdicts map[types.UID]verdictCondition
	// pools whose metrics were set, to remove those of deleted pools.
	metricPools map[string]bool
}

// report turns the round's refusals into events (each at most every
// eventRepeat) and Consolidatable conditions, and sets the metrics.
//
// The condition is set every round from the round's verdict, whether the
// event is due or not: a write that failed is made again next round, and
// the condition says what the record and the last event say. A verdict a
// later round does not repeat (remembered, not simulated again) is set
// again from the controller's memory of it (verdicts).
func (rep *reporter) report(s *state, r *round, cmd *command, budgets *ledger, total map[string]int) {
	said := map[types.UID]bool{}
	if cmd != nil {
		// Marked as it goes (mark).
		for _, cand := range cmd.candidates {
			said[cand.claim.UID] = true
			delete(rep.verdicts, cand.claim.UID)
		}
	}
	for _, refused := range r.refusals {
		claim := refused.candidate.claim
		if rep.teller.memo.due(claim.UID, refused.reason, refused.note, s.now) && !refused.quiet {
			rep.teller.eventf(claim, refused.candidate.node, corev1.EventTypeNormal, refused.reason, "Disrupt", refused.note)
		}
		if said[claim.UID] {
			// The first verdict about a claim is the one its record
			// keeps (recordDecisions).
			continue
		}
		reason, message := refused.condition, refused.note
		if refused.reason == eventUnconsolidatable {
			reason, message = unconsolidatableCondition(refused), refusalMessage(refused)
		}
		if reason == "" {
			continue
		}
		said[claim.UID] = true
		rep.verdicts[claim.UID] = verdictCondition{reason: reason, message: message}
	}
	for _, h := range r.held {
		claim := h.candidate.claim
		if said[claim.UID] {
			continue
		}
		switch h.reason {
		case decisions.NodeReasonMinNodes, decisions.NodeReasonHeadroom:
			said[claim.UID] = true
			rep.verdicts[claim.UID] = verdictCondition{reason: heldConditions[h.reason], message: h.message}
		case decisions.NodeReasonConsolidateAfter:
			// The wait replaces a verdict the claim carries, which no
			// longer holds; on a claim without one it writes nothing:
			// after a scale-up a thousand new nodes wait so.
			delete(rep.verdicts, claim.UID)
			if meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable) != nil {
				said[claim.UID] = true
				message := h.message
				if h.condition != "" {
					message = h.condition
				}
				rep.verdicts[claim.UID] = verdictCondition{reason: v1alpha1.ConsolidatableReasonConsolidateAfter, message: message}
			}
		}
	}
	rep.writeVerdicts(s)
	rep.setMetrics(s, r, budgets, total)
}

// writeVerdicts gives each claim the Consolidatable=False condition of the
// verdict the controller keeps for it, unless the claim carries it already
// or is going, and forgets the verdicts of claims that are gone.
func (rep *reporter) writeVerdicts(s *state) {
	for name, claim := range s.claims {
		verdict, ok := rep.verdicts[claim.UID]
		if !ok || !claim.DeletionTimestamp.IsZero() || s.disrupting[name] {
			continue
		}
		if written := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable); written != nil &&
			written.Status == metav1.ConditionFalse && written.Reason == verdict.reason && written.Message == verdict.message {
			continue
		}
		rep.writer.deferStatus(s, claim, func(claim *v1alpha1.NodeClaim) {
			rep.writer.setCondition(claim, v1alpha1.ConditionConsolidatable, metav1.ConditionFalse, verdict.reason, verdict.message)
		})
	}
	live := make(map[types.UID]bool, len(s.claims))
	for _, claim := range s.claims {
		live[claim.UID] = true
	}
	for uid := range rep.verdicts {
		if !live[uid] {
			delete(rep.verdicts, uid)
		}
	}
}

// verdictCondition is the Consolidatable=False condition a round's verdict
// gives a claim.
type verdictCondition struct{ reason, message string }

// heldConditions maps the reasons a pool keeps a node for to its
// Consolidatable reason.
var heldConditions = map[string]string{
	decisions.NodeReasonMinNodes: v1alpha1.ConsolidatableReasonMinNodes,
	decisions.NodeReasonHeadroom: v1alpha1.ConsolidatableReasonHeadroom,
}

// reportBudgetErrors says, in the log and in a warning event on the pool
// (repeated only every eventRepeat), why a pool disrupts nothing.
func (rep *reporter) reportBudgetErrors(ctx context.Context, s *state, errs map[string]error) {
	for name, err := range errs {
		log.FromContext(ctx).Error(err, "reading a disruption budget; the pool disrupts nothing until it is fixed", "nodePool", name)
		info, ok := s.pools[name]
		if !ok {
			continue
		}
		note := err.Error() + "; the pool disrupts no node until the budget is fixed"
		if rep.teller.memo.due(info.pool.UID, eventInvalidBudget, note, s.now) {
			rep.teller.recorder.Eventf(info.pool, nil, corev1.EventTypeWarning, eventInvalidBudget, "Disrupt", "%s", note)
		}
	}
}

// setMetrics publishes, per pool, the nodes eligible for each reason, the
// nodes kept by each safety rule and budget, and what the budgets allow
// now.
func (rep *reporter) setMetrics(s *state, r *round, budgets *ledger, total map[string]int) {
	blocked := r.blockedNodes()
	for name := range s.pools {
		metrics.ObserveDisruptionBlocked(name, blocked[name])
		for _, reason := range []v1alpha1.DisruptionReason{
			v1alpha1.DisruptionReasonEmpty, v1alpha1.DisruptionReasonUnderutilized, v1alpha1.DisruptionReasonDrifted, reasonExpired,
		} {
			metrics.DisruptionEligibleNodes.WithLabelValues(name, string(reason)).Set(float64(r.eligible[name][reason]))
		}
		for _, reason := range budgetReasons {
			metrics.DisruptionAllowedDisruptions.WithLabelValues(name, string(reason)).Set(float64(min(budgets.allowedNow(name, reason), total[name])))
		}
		rep.metricPools[name] = true
	}
	for name := range rep.metricPools {
		if _, ok := s.pools[name]; !ok {
			metrics.DisruptionEligibleNodes.DeletePartialMatch(prometheus.Labels{"nodepool": name})
			metrics.DisruptionAllowedDisruptions.DeletePartialMatch(prometheus.Labels{"nodepool": name})
			metrics.DisruptionBlockedNodes.DeletePartialMatch(prometheus.Labels{"nodepool": name})
			delete(rep.metricPools, name)
		}
	}
}

// teller records events, a dry run's saying so (decisions.EventNote), and
// remembers the notes it recorded lately (memo), so the same refusal is
// repeated only every eventRepeat.
type teller struct {
	recorder events.EventRecorder
	dryRun   bool
	memo     *eventMemo
}

// eventf records an event on the claim and, if there is one, on its node.
func (t *teller) eventf(claim *v1alpha1.NodeClaim, node *corev1.Node, eventType, reason, action, note string) {
	note = decisions.EventNote(t.dryRun, note)
	if node == nil {
		t.recorder.Eventf(claim, nil, eventType, reason, action, "%s", note)
		return
	}
	t.recorder.Eventf(claim, node, eventType, reason, action, "%s", note)
	t.recorder.Eventf(node, claim, eventType, reason, action, "%s", note)
}
