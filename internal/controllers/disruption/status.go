package disruption

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/statusapply"
)

// writer writes claims for a round: their conditions (on the round's own
// copies, see state.own), annotations, deletions and replacements. It
// counts the writes it attempts, to tell a round that changed something
// from one that found nothing to do.
type writer struct {
	kube   client.Client
	clock  clock.Clock
	writes atomic.Int64
	// own records the claims created and deleted until the cache shows
	// them, and is where the writer waits for the cache; nil records none.
	own *clusterstate.Writes
}

// Claims whose status a round writes at once. After a scale-down a
// thousand claims turn Empty in the same round; one after the other that
// is a minute of round trips before the first can be removed.
const parallelStatusWrites = 16

// statusWrite is a change to a claim's conditions: the round's own copy of
// the claim with the change (claim), and the claim as it was before
// (stored), which a failed write puts back.
type statusWrite struct{ stored, claim *v1alpha1.NodeClaim }

// statusChange applies change to the claim's conditions, the only part of
// a claim's status disruption writes. Only if that changes them is the
// claim copied (state.own): most rounds change nothing, and the claims
// are the cache's. The write returned carries the claim as it was
// (stored) and the round's own copy with the change.
func (wr *writer) statusChange(s *state, claim *v1alpha1.NodeClaim, change func(*v1alpha1.NodeClaim)) (statusWrite, bool) {
	claim = s.current(claim)
	scratch := *claim
	scratch.Status.Conditions = slices.Clone(claim.Status.Conditions)
	change(&scratch)
	if slices.Equal(scratch.Status.Conditions, claim.Status.Conditions) {
		return statusWrite{}, false
	}
	owned := s.own(claim)
	stored := s.takeUnsent(owned.Name)
	if stored == nil {
		stored = owned.DeepCopy()
	}
	owned.Status.Conditions = scratch.Status.Conditions
	return statusWrite{stored: stored, claim: owned}, true
}

// deferStatus changes a claim's status for the rest of the round to see,
// and writes it at the round's end (sendUnsent), or with the next write to
// the same claim. The conditions that only report (Empty, Drifted,
// Consolidatable) wait so: written first, they held every decision back.
// After a scale to zero a thousand claims turn Empty within a minute, and
// on an API server busy with the deletions their writes took a round ten
// seconds or more before it could remove a node; a node removed in the
// same round has its Empty condition written with its Disrupting mark, in
// one write instead of two.
func (wr *writer) deferStatus(s *state, claim *v1alpha1.NodeClaim, change func(*v1alpha1.NodeClaim)) {
	if write, changed := wr.statusChange(s, claim, change); changed {
		s.keepUnsent(write)
	}
}

// sendUnsent writes the status changes the round deferred.
func (wr *writer) sendUnsent(ctx context.Context, s *state) {
	wr.applyStatuses(ctx, s.takeAllUnsent(), "updating conditions failed")
}

// applyStatuses writes the claims' statuses in parallel. A failed write
// (a conflict, mostly) is tried again next round, so it is logged at debug
// level only.
func (wr *writer) applyStatuses(ctx context.Context, writes []statusWrite, failed string) {
	work := make(chan statusWrite)
	var wg sync.WaitGroup
	for range min(parallelStatusWrites, len(writes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range work {
				if err := wr.applyStatus(ctx, w); err != nil {
					log.FromContext(ctx).V(1).Info(failed, "nodeClaim", w.claim.Name, "error", err.Error())
				}
			}
		}()
	}
	for _, w := range writes {
		work <- w
	}
	close(work)
	wg.Wait()
}

// writeStatus applies change to the claim's conditions and, if that
// changed them, writes them at once (statusChange, applyStatus). It says
// whether there was anything to write.
func (wr *writer) writeStatus(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, change func(*v1alpha1.NodeClaim)) (bool, error) {
	write, changed := wr.statusChange(s, claim, change)
	if !changed {
		return false, nil
	}
	return true, wr.applyStatus(ctx, write)
}

// applyStatus writes a change statusChange worked out: the conditions
// disruption owns (v1alpha1.IsDisruptionCondition), as the round's own
// copy of the claim has them, by server-side apply under the controller's
// field manager; the other conditions of the list are the claim lifecycle's,
// which it applies under its own. The write holds only over the claim as
// the round read it: from a copy the cache has not caught up with, an
// apply would remove a condition the controller wrote since, so a
// concurrent write makes it fail instead (and the next round try again).
// A failed write leaves the round's copy as it was.
func (wr *writer) applyStatus(ctx context.Context, w statusWrite) error {
	wr.writes.Add(1)
	owned := statusapply.Conditions{Conditions: ownedConditions(w.claim)}
	if err := statusapply.ApplyUnchanged(ctx, wr.kube, "NodeClaim", w.claim, &owned, Name); err != nil {
		*w.claim = *w.stored
		return err
	}
	return nil
}

// ownedConditions are the claim's conditions disruption writes
// (v1alpha1.IsDisruptionCondition); the claim lifecycle applies the others.
func ownedConditions(claim *v1alpha1.NodeClaim) []metav1.Condition {
	var owned []metav1.Condition
	for _, condition := range claim.Status.Conditions {
		if v1alpha1.IsDisruptionCondition(condition.Type) {
			owned = append(owned, condition)
		}
	}
	return owned
}

// annotate sets (or, with nil, removes) annotations on a claim, on the
// round's own copy of it.
func (wr *writer) annotate(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, annotations map[string]*string) error {
	claim = s.own(claim)
	wr.writes.Add(1)
	patch := client.MergeFrom(claim.DeepCopy())
	for key, value := range annotations {
		if value == nil {
			delete(claim.Annotations, key)
			continue
		}
		if claim.Annotations == nil {
			claim.Annotations = map[string]string{}
		}
		claim.Annotations[key] = *value
	}
	if err := wr.kube.Patch(ctx, claim, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("annotating claim %s: %w", claim.Name, err))
	}
	return nil
}

// setCondition sets a condition with the controller's clock, keeping the
// transition time while the status stays.
func (wr *writer) setCondition(claim *v1alpha1.NodeClaim, conditionType string, status metav1.ConditionStatus, reason, message string) {
	claim.SetCondition(conditionType, status, reason, message, wr.clock.Now())
}
