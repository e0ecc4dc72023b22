package disruption

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// A claim marked Disrupting that nothing replaces or deletes any more
// (a crash between marking and acting, a replacement that failed and
// vanished) is released after this long.
const staleMark = 10 * time.Second

// cancel releases the claims a failed or invalid replacement was for; the
// replacements that exist stay as ordinary claims (consolidation removes
// them if nobody needs them).
func (e *executor) cancel(ctx context.Context, s *state, group *replacementGroup, live []*v1alpha1.NodeClaim, why string) {
	log.FromContext(ctx).Info("replacement cancelled", "nodeClaims", claimNames(live), "reason", group.reason, "why", why)
	incDecision(group.reason, "cancel", len(live))
	for _, old := range live {
		if _, err := e.writer.writeStatus(ctx, s, old, func(claim *v1alpha1.NodeClaim) {
			e.writer.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionFalse, "Cancelled", why)
		}); err != nil {
			log.FromContext(ctx).V(1).Info("releasing a claim failed", "nodeClaim", old.Name, "error", err.Error())
		}
		e.teller.eventf(old, s.nodes[old.Status.NodeName], corev1.EventTypeNormal, "DisruptionCancelled", "Disrupt", "not replaced after all: "+why)
	}
	e.release(ctx, s, group)
}

// release turns a group's replacements into ordinary claims.
func (e *executor) release(ctx context.Context, s *state, group *replacementGroup) {
	for _, replacement := range group.replacements {
		if !replacement.DeletionTimestamp.IsZero() {
			continue
		}
		if err := e.writer.annotate(ctx, s, replacement, map[string]*string{AnnotationReplaces: nil, AnnotationDisruptionReason: nil}); err != nil {
			log.FromContext(ctx).V(1).Info("releasing a replacement failed", "nodeClaim", replacement.Name, "error", err.Error())
		}
	}
}

// releaseStaleMarks releases the claims marked Disrupting more than
// staleMark ago that no replacement in flight names (named) and nobody
// deleted: nothing acts on them any more. It says whether it released
// any. A claim to be put to sleep is no such claim: its lifecycle is
// draining its node and stopping its machine, however long that takes,
// and once asleep its mark is the observer's (observeSleeper).
func (e *executor) releaseStaleMarks(ctx context.Context, s *state, named map[string]bool) bool {
	released := false
	for _, name := range sortedNames(s.claims) {
		claim := s.claims[name]
		marked := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)
		if named[name] || !claim.DeletionTimestamp.IsZero() || claim.SleepRequested() || marked == nil || marked.Status != metav1.ConditionTrue ||
			s.now.Sub(marked.LastTransitionTime.Time) < staleMark {
			continue
		}
		changed, err := e.writer.writeStatus(ctx, s, claim, func(claim *v1alpha1.NodeClaim) {
			e.writer.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionFalse, "Cancelled", "nothing replaces or deletes the claim any more")
		})
		if err != nil {
			log.FromContext(ctx).V(1).Info("releasing a stale mark failed", "nodeClaim", claim.Name, "error", err.Error())
			continue
		}
		released = released || changed
	}
	return released
}
