package disruption

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// executor carries a round's decision out (execute) and the replacements
// in flight forward (orchestrate, replace.go), checking each just before
// it acts (validate.go) and releasing what it no longer takes (cancel.go).
type executor struct {
	// kube is read to check a decision against the objects as they are
	// now.
	kube   client.Reader
	writer *writer
	teller *teller
}

// How long to wait for the cache to see our own writes.
const cacheWait = 10 * time.Second

// execute carries out a decision: deleting the candidates, or making their
// replacements first (replace) and leaving the deletion to orchestrate
// once the replacements are Ready.
func (e *executor) execute(ctx context.Context, s *state, cmd *command) error {
	incDecision(cmd.reason, cmd.action(), len(cmd.candidates)-len(cmd.sleeps))
	if len(cmd.sleeps) > 0 {
		incDecision(cmd.reason, actionSuspend, len(cmd.sleeps))
	}
	if len(cmd.replacements) > 0 {
		return e.replace(ctx, s, cmd)
	}
	return e.deleteAll(ctx, s, cmd)
}

// actionSuspend is the decision metric's action of a node put to sleep
// instead of deleted.
const actionSuspend = "suspend"

// deleteAll marks and deletes the candidates of a decision without
// replacements, in parallel, and waits until the cache has seen them go.
// The candidates chosen to sleep (cmd.sleeps) are marked the same way and
// then annotated to be suspended instead of deleted: the claim lifecycle
// drains their nodes as for termination and stops their machines.
func (e *executor) deleteAll(ctx context.Context, s *state, cmd *command) error {
	// The budget allows these all at once (two hundred empty nodes
	// of a thousand, say): one after the other, each waiting for the
	// cache, would spread them over many seconds.
	work := make(chan *candidate)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		errs      []error
		deleted   []*v1alpha1.NodeClaim
		suspended []*v1alpha1.NodeClaim
	)
	for range min(parallelStatusWrites, len(cmd.candidates)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for candidate := range work {
				message := cmd.candidateMessage(candidate.claim)
				if !e.mark(ctx, s, candidate.claim, cmd.reason, message) {
					continue
				}
				if cmd.sleeps[candidate.claim.Name] {
					log.FromContext(ctx).Info("suspending node instead of deleting it", "reason", cmd.reason, "nodeClaim", candidate.claim.Name, "node", candidate.node.Name, "why", cmd.message)
					e.teller.eventf(candidate.claim, candidate.node, corev1.EventTypeNormal, "Disrupting", "Suspend", message)
					err := e.writer.suspend(ctx, s, candidate.claim, cmd.reason)
					mu.Lock()
					if err != nil {
						// The mark is released as stale and the next
						// rounds decide again.
						errs = append(errs, err)
					} else {
						suspended = append(suspended, s.current(candidate.claim))
					}
					mu.Unlock()
					continue
				}
				log.FromContext(ctx).Info("deleting node", "reason", cmd.reason, "nodeClaim", candidate.claim.Name, "node", candidate.node.Name, "why", cmd.message)
				e.teller.eventf(candidate.claim, candidate.node, corev1.EventTypeNormal, "Disrupting", "Disrupt", "deleting: "+cmd.message)
				err := e.writer.deleteClaim(ctx, candidate.claim)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					deleted = append(deleted, candidate.claim)
				}
				mu.Unlock()
			}
		}()
	}
	for _, candidate := range cmd.candidates {
		work <- candidate
	}
	close(work)
	wg.Wait()
	// Waiting for the cache once all are deleted, not after each
	// deletion, keeps the writers writing: on a busy API server the
	// watch runs a second or more behind.
	return errors.Join(append(errs, e.writer.waitForDeletions(ctx, deleted), e.writer.waitForSuspensions(ctx, suspended))...)
}

// mark sets a claim's Disrupting condition (and, for consolidation,
// Consolidatable), before it is deleted: termination reads the reason. It
// says whether the claim is marked.
func (e *executor) mark(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, message string) bool {
	if _, err := e.writer.writeStatus(ctx, s, claim, func(claim *v1alpha1.NodeClaim) {
		e.writer.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionTrue, string(reason), message)
		if reason == v1alpha1.DisruptionReasonUnderutilized {
			e.writer.setCondition(claim, v1alpha1.ConditionConsolidatable, metav1.ConditionTrue, v1alpha1.ConsolidatableReasonConsolidating, message)
		}
	}); err != nil {
		log.FromContext(ctx).Info("marking a claim for disruption failed; deciding again next round", "nodeClaim", claim.Name, "error", err.Error())
		return false
	}
	return true
}

// delete deletes a claim and waits until the cache has seen it: the next
// round counts disrupting claims from the cache, and would count one too
// few and go over the budget.
func (e *executor) delete(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	if err := e.writer.deleteClaim(ctx, claim); err != nil {
		return err
	}
	return e.writer.waitForDeletions(ctx, []*v1alpha1.NodeClaim{claim})
}

// deleteClaim asks the API server to delete a claim; its lifecycle does
// the rest behind the termination finalizer.
func (wr *writer) deleteClaim(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	wr.writes.Add(1)
	if err := wr.kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting claim %s: %w", claim.Name, err)
	}
	return nil
}

// waitForDeletions records the claims as deleted, so the next round's
// picture counts them leaving however late the cache is, and waits until
// the cache has seen every one deleted (or gone), for at most cacheWait.
func (wr *writer) waitForDeletions(ctx context.Context, claims []*v1alpha1.NodeClaim) error {
	for _, claim := range claims {
		wr.own.Deleted(claim)
	}
	return wr.awaitCached(ctx, claims, func(cached *v1alpha1.NodeClaim) bool { return !cached.DeletionTimestamp.IsZero() })
}

// awaitCached waits, for at most cacheWait, until the cache shows each of
// claims gone or as written (written says whether a cached copy shows the
// write).
func (wr *writer) awaitCached(ctx context.Context, claims []*v1alpha1.NodeClaim, written func(cached *v1alpha1.NodeClaim) bool) error {
	return wr.own.Await(ctx, cacheWait, func(ctx context.Context) (bool, error) {
		for len(claims) > 0 {
			var cached v1alpha1.NodeClaim
			err := wr.kube.Get(ctx, client.ObjectKeyFromObject(claims[0]), &cached)
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			if err == nil && !written(&cached) {
				return false, nil
			}
			claims = claims[1:]
		}
		return true, nil
	})
}

func incDecision(reason v1alpha1.DisruptionReason, action string, nodes int) {
	metrics.DisruptionDecisions.WithLabelValues(string(reason), action).Add(float64(nodes))
}
