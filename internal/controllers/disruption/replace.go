package disruption

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// orchestrate carries replacements in flight forward: once every
// replacement of a group is Ready, the claims it replaces are checked once
// more and deleted; if a replacement fails, they are released. It says
// whether it changed anything, so the round ends and the next one sees it.
func (e *executor) orchestrate(ctx context.Context, s *state) (bool, error) {
	acted := false
	named := map[string]bool{}
	for _, group := range s.groups {
		for _, name := range group.olds {
			named[name] = true
		}
		advanced, err := e.advance(ctx, s, group)
		acted = acted || advanced
		if err != nil {
			return acted, err
		}
	}
	released := e.releaseStaleMarks(ctx, s, named)
	deleted, err := e.deleteStaleSleepers(ctx, s)
	return acted || released || deleted, err
}

// replace makes a decision's replacements and marks the claims they
// replace; orchestrate deletes those once the replacements are Ready.
func (e *executor) replace(ctx context.Context, s *state, cmd *command) error {
	olds := strings.Join(cmd.names(), ",")
	var made []string
	for _, replacement := range cmd.replacements {
		pool, ok := s.pools[replacement.Pool]
		if !ok {
			return fmt.Errorf("replacement names pool %s, which the round did not see", replacement.Pool)
		}
		claim, err := e.writer.createReplacement(ctx, pool.pool, s.providerHashes[pool.pool.Spec.ProviderRef.Name], replacement, olds, cmd.reason)
		if err != nil {
			return err
		}
		made = append(made, claim.Name)
	}
	message := fmt.Sprintf("%s; waiting for replacement %s to be Ready", cmd.message, strings.Join(made, ", "))
	log.FromContext(ctx).Info("replacing nodes", "reason", cmd.reason, "nodeClaims", cmd.names(), "replacements", made, "why", cmd.message)
	for _, candidate := range cmd.candidates {
		e.mark(ctx, s, candidate.claim, cmd.reason, message)
		e.teller.eventf(candidate.claim, candidate.node, corev1.EventTypeNormal, "Disrupting", "Replace", "replacing: "+message)
	}
	return nil
}

// advance carries one group of replacements forward, and says whether it
// acted: cancelled the group, or deleted (or tried to) the claims it
// replaces.
func (e *executor) advance(ctx context.Context, s *state, group *replacementGroup) (bool, error) {
	var live []*v1alpha1.NodeClaim
	present := 0
	for _, name := range group.olds {
		if old, ok := s.claims[name]; ok {
			present++
			if old.DeletionTimestamp.IsZero() {
				live = append(live, old)
			}
		}
	}
	replacements := strings.Join(claimNames(group.replacements), ", ")
	if present == 0 {
		// Done: the replacements are ordinary claims from now on.
		// Not sooner: until the old nodes are gone, their pods are
		// on their way to the replacements, which must not look
		// empty meanwhile.
		e.release(ctx, s, group)
		return false, nil
	}
	if len(live) == 0 {
		return false, nil
	}
	failed, ready := "", true
	for _, replacement := range group.replacements {
		if !replacement.DeletionTimestamp.IsZero() {
			failed = replacement.Name
			break
		}
		ready = ready && meta.IsStatusConditionTrue(replacement.Status.Conditions, v1alpha1.ConditionReady)
	}
	if failed != "" {
		e.cancel(ctx, s, group, live, fmt.Sprintf("replacement %s is being deleted", failed))
		return true, nil
	}
	if !ready {
		// After a restart between making the replacements and
		// marking the claims, the marks are made here.
		for _, old := range live {
			if !meta.IsStatusConditionTrue(old.Status.Conditions, v1alpha1.ConditionDisrupting) {
				e.mark(ctx, s, old, group.reason, fmt.Sprintf("waiting for replacement %s to be Ready", replacements))
			}
		}
		return false, nil
	}
	if why, err := e.revalidate(ctx, s, group, live); err != nil {
		return false, err
	} else if why != "" {
		e.cancel(ctx, s, group, live, why)
		return true, nil
	}
	return true, e.deleteReplaced(ctx, s, group, live, replacements)
}

// deleteReplaced marks and deletes the claims a group's Ready
// replacements (named replacements) replace.
func (e *executor) deleteReplaced(ctx context.Context, s *state, group *replacementGroup, live []*v1alpha1.NodeClaim, replacements string) error {
	for _, old := range live {
		node := s.nodes[old.Status.NodeName]
		message := fmt.Sprintf("replacement %s is Ready", replacements)
		if !e.mark(ctx, s, old, group.reason, message) {
			continue
		}
		e.teller.eventf(old, node, corev1.EventTypeNormal, "Disrupting", "Disrupt", "deleting: "+message)
		if err := e.delete(ctx, old); err != nil {
			return err
		}
	}
	return nil
}

// createReplacement writes a claim for a new node the way provisioning
// writes one (labels, template hash, taints, the resources it was sized
// for), plus the names of the claims it replaces, and waits until the
// cache has it: the next round must see the replacement in flight, or it
// would release the claims it replaces.
func (wr *writer) createReplacement(ctx context.Context, pool *v1alpha1.NodePool, providerHash string, node scheduling.NewNode, olds string, reason v1alpha1.DisruptionReason) (*v1alpha1.NodeClaim, error) {
	claim := poolclaims.New(pool, node.Shape, node.TotalRequests(), node.Requirements)
	claim.Annotations[AnnotationReplaces] = olds
	claim.Annotations[AnnotationDisruptionReason] = string(reason)
	if providerHash != "" {
		claim.Annotations[AnnotationProviderHash] = providerHash
	}
	if err := wr.kube.Create(ctx, claim); err != nil {
		return nil, fmt.Errorf("creating a replacement for %s in pool %s (shape %s): %w", olds, pool.Name, node.Shape.Name, err)
	}
	metrics.NodeClaimsCreated.WithLabelValues(pool.Name, metrics.ReasonReplacement).Inc()
	wr.own.Created(claim)
	err := wr.own.Await(ctx, cacheWait, func(ctx context.Context) (bool, error) {
		var cached v1alpha1.NodeClaim
		err := wr.kube.Get(ctx, client.ObjectKeyFromObject(claim), &cached)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the cache to see replacement %s: %w", claim.Name, err)
	}
	return claim, nil
}
