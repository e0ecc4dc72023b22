package disruption

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// observer keeps each claim's Empty and Drifted conditions true to the
// cluster (updateClaims), asking the providers that tell drift of their
// own (drift.go).
type observer struct {
	providers ProviderResolver
	clock     clock.Clock
	stability *stability
	writer    *writer
	teller    *teller
	// providerDriftAsked says the round asked a provider that tells drift
	// of its own, which no event of this cluster announces.
	providerDriftAsked bool
}

// updateClaims keeps the claims' Empty and Drifted conditions true to the
// cluster, and records the provider's settings hash on claims that lack
// it. A failed write is tried again next round.
func (o *observer) updateClaims(ctx context.Context, s *state) {
	for _, name := range sortedNames(s.claims) {
		claim := s.claims[name]
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		// The NodeProvider the controller recorded, not the label a user
		// may have set.
		providerName := claim.Status.NodeProviderName
		if pool, ok := s.pools[claim.Spec.NodePoolRef.Name]; ok && providerName == "" {
			providerName = pool.pool.Spec.ProviderRef.Name
		}
		if hash := s.providerHashes[providerName]; hash != "" && claim.Annotations[AnnotationProviderHash] == "" {
			if err := o.writer.annotate(ctx, s, claim, map[string]*string{AnnotationProviderHash: &hash}); err != nil {
				log.FromContext(ctx).V(1).Info("recording the provider hash failed", "nodeClaim", claim.Name, "error", err.Error())
			}
			claim = s.current(claim)
		}
		if claim.Asleep() {
			o.observeSleeper(s, claim, providerName)
			continue
		}
		o.observeWoken(s, claim)
		claim = s.current(claim)
		node, ok := s.nodes[claim.Status.NodeName]
		if !ok || !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
			continue
		}
		var driftReason, driftMessage string
		pool, hasPool := s.pools[claim.Spec.NodePoolRef.Name]
		if hasPool {
			driftReason, driftMessage = driftOf(claim, pool.pool, s.providerHashes[providerName])
			if driftReason == "" {
				driftReason, driftMessage = o.providerDrift(ctx, providerName, claim)
			}
			if driftReason != "" && !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDrifted) {
				o.teller.eventf(claim, node, corev1.EventTypeNormal, "Drifted", "Drift", driftMessage)
			}
		}
		o.writer.deferStatus(s, claim, func(claim *v1alpha1.NodeClaim) {
			if claim.Annotations[AnnotationReplaces] != "" {
				// A replacement waits for the pods of the nodes it
				// replaces; its emptiness counts from when it stops
				// waiting.
				o.writer.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionFalse, "Replacing", "node "+node.Name+" waits for the pods of "+claim.Annotations[AnnotationReplaces])
			} else if n := len(workloadPods(s.podsByNode[node.Name])); n > 0 {
				o.writer.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionFalse, "NotEmpty", "node "+node.Name+" runs pods other than DaemonSet and mirror pods")
			} else {
				emptyAt, ok := o.stability.emptySince(node.Name)
				if !ok {
					emptyAt = o.clock.Now()
				}
				claim.SetCondition(v1alpha1.ConditionEmpty, metav1.ConditionTrue, "Empty", "node "+node.Name+" runs no pods but DaemonSet and mirror pods", emptyAt)
			}
			if hasPool {
				o.setDrifted(claim, driftReason, driftMessage)
			}
		})
	}
}

// setDrifted writes the claim's Drifted condition from the round's
// judgement: True with the reason, or False once a drifted claim matches
// its pool again.
func (o *observer) setDrifted(claim *v1alpha1.NodeClaim, driftReason, driftMessage string) {
	switch {
	case driftReason != "":
		o.writer.setCondition(claim, v1alpha1.ConditionDrifted, metav1.ConditionTrue, driftReason, driftMessage)
	case meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDrifted):
		o.writer.setCondition(claim, v1alpha1.ConditionDrifted, metav1.ConditionFalse, v1alpha1.ReasonNotDrifted, "the claim matches its pool again")
	}
}
