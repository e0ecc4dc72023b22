package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/statusapply"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Machines that sleep instead of dying (NodePool spec.disruption.sleep).
//
// A node removed for Empty or Underutilized without a replacement, in a
// pool that sleeps for that reason, whose sleep budget has room and whose
// provider can stop and start machines, is marked exactly as for deletion
// (the same budgets, do-not-disrupt, PodDisruptionBudgets and events) and
// then annotated claimscale.io/suspend=<reason> instead of deleted: the
// claim lifecycle drains the node as for termination and stops the
// machine. Only plain removals sleep: the nodes a consolidation replaces
// by one cheaper node are deleted, as keeping the dearer machines the
// round just chose to be rid of would only have them woken instead of the
// cheaper one. Drift, expiry and repair always delete.
//
// How the sleeping claims count:
//   - suspending (annotation set, not asleep yet): its node is leaving, so
//     it is disrupting, against every budget, as a deletion is, and it is
//     never a candidate;
//   - asleep: no node, so neither a candidate nor disrupting, and not part
//     of the pool's size for its disruption budgets or minNodes: a budget
//     caps how many of the pool's running nodes are away at once, and
//     minNodes is warm capacity, which a stopped machine is not. The sleep
//     budget (spec.disruption.sleep.machines) is the one that counts them,
//     out of the pool's claims not being deleted, sleeping ones included.
//
// A sleeping machine that drifted from its pool (template or provider
// settings, its shape no longer offered) or outlived the pool's
// expireAfter is deleted, never woken (deleteStaleSleepers).

// sleepNotePrefix starts what the decision records, events and the
// Disrupting condition say of a node put to sleep; kubectl claimscale why
// shows it.
const sleepNotePrefix = "suspended instead of deleted by pool policy"

// sleepNote is what is said of a node put to sleep for why.
func sleepNote(why string) string { return sleepNotePrefix + ": " + why }

// powerCapability is what a round knows of whether a pool's provider can
// stop and start machines.
type powerCapability int

const (
	// powerUnknown: not asked (no resolver, a dry plan) or the provider
	// could not be resolved; the pool's nodes are deleted.
	powerUnknown powerCapability = iota
	powerSupported
	powerNotSupported
)

// sleepRoom is how many more of the pool's machines may be put to sleep
// now: what sleep.machines allows of the pool's claims not being deleted
// (the sleeping ones included), less those asleep and suspending.
func (p *poolInfo) sleepRoom() int {
	return p.pool.SleepingMachinesAllowed(p.live+p.asleep) - p.asleep - p.suspending
}

// chooseSleepers decides which of a decision's nodes sleep instead of
// being deleted: in a plain removal (no replacement) for Empty or
// Underutilized, those of pools that sleep for the reason, whose provider
// can manage power, as many as each pool's sleep budget has room for.
func chooseSleepers(cmd *command) {
	if cmd == nil || len(cmd.replacements) > 0 {
		return
	}
	room := map[string]int{}
	for _, c := range cmd.candidates {
		pool := c.pool
		if !pool.pool.SleepsFor(cmd.reason) || pool.power != powerSupported {
			continue
		}
		if _, ok := room[pool.pool.Name]; !ok {
			room[pool.pool.Name] = pool.sleepRoom()
		}
		if room[pool.pool.Name] <= 0 {
			continue
		}
		room[pool.pool.Name]--
		if cmd.sleeps == nil {
			cmd.sleeps = map[string]bool{}
		}
		cmd.sleeps[c.claim.Name] = true
	}
}

// candidateMessage is what is said of one of the decision's candidates.
func (c *command) candidateMessage(claim *v1alpha1.NodeClaim) string {
	if c.sleeps[claim.Name] {
		return sleepNote(c.message)
	}
	return c.message
}

// sleepObserver learns, each round, whether the providers of the pools
// with a sleep policy can manage power (poolInfo.power), and keeps those
// pools' SleepAllowed condition true to it and to their sleep budget.
type sleepObserver struct {
	kube      client.Client
	providers ProviderResolver
	clock     clock.Clock
	teller    *teller
}

// observe sets each sleeping pool's power capability and writes its
// SleepAllowed condition where it changed. A failed write is tried again
// next round.
func (o *sleepObserver) observe(ctx context.Context, s *state) {
	for _, name := range sortedNames(s.pools) {
		info := s.pools[name]
		if info.pool.Spec.Disruption.Sleep == nil {
			if meta.FindStatusCondition(info.pool.Status.Conditions, v1alpha1.ConditionSleepAllowed) != nil {
				o.apply(ctx, info.pool, nil)
			}
			continue
		}
		info.power = o.power(ctx, info.pool)
		condition := sleepAllowed(info)
		if condition == nil {
			continue
		}
		was := meta.FindStatusCondition(info.pool.Status.Conditions, v1alpha1.ConditionSleepAllowed)
		if was != nil && was.Status == condition.Status && was.Reason == condition.Reason && was.Message == condition.Message &&
			was.ObservedGeneration == info.pool.Generation {
			continue
		}
		condition.ObservedGeneration = info.pool.Generation
		condition.LastTransitionTime = metav1.NewTime(o.clock.Now())
		if was != nil && was.Status == condition.Status {
			condition.LastTransitionTime = was.LastTransitionTime
		}
		if condition.Status == metav1.ConditionFalse && (was == nil || was.Reason != condition.Reason) && o.teller != nil {
			eventType := corev1.EventTypeNormal
			if condition.Reason == v1alpha1.ReasonPowerNotSupported {
				eventType = corev1.EventTypeWarning
			}
			o.teller.recorder.Eventf(info.pool, nil, eventType, condition.Reason, "Suspend", "%s", condition.Message)
		}
		o.apply(ctx, info.pool, condition)
	}
}

// power asks the pool's provider whether it can stop and start machines.
// A provider that cannot be resolved is provisioning's to report; its
// pool's nodes are deleted meanwhile.
func (o *sleepObserver) power(ctx context.Context, pool *v1alpha1.NodePool) powerCapability {
	if o.providers == nil {
		return powerUnknown
	}
	p, err := o.providers.ForProviderName(ctx, pool.Spec.ProviderRef.Name)
	if err != nil {
		log.FromContext(ctx).V(1).Info("resolving the provider of a sleeping pool failed; its nodes are deleted meanwhile", "nodePool", pool.Name, "error", err.Error())
		return powerUnknown
	}
	if provider.CanManagePower(ctx, p) {
		return powerSupported
	}
	return powerNotSupported
}

// recordedPower is what the controller last found of the pool's provider,
// from the SleepAllowed condition it wrote: a plan (kubectl claimscale
// simulate --scale-down, why's round taken now) asks no provider, and says
// suspend where the controller's round would.
func recordedPower(pool *v1alpha1.NodePool) powerCapability {
	condition := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionSleepAllowed)
	switch {
	case condition == nil:
		return powerUnknown
	case condition.Reason == v1alpha1.ReasonPowerNotSupported:
		return powerNotSupported
	}
	return powerSupported
}

// sleepAllowed is the pool's SleepAllowed condition for what the round
// knows, nil when it knows nothing of the provider yet.
func sleepAllowed(info *poolInfo) *metav1.Condition {
	pool := info.pool
	switch info.power {
	case powerUnknown:
		return nil
	case powerNotSupported:
		return &metav1.Condition{Type: v1alpha1.ConditionSleepAllowed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPowerNotSupported,
			Message: fmt.Sprintf("NodeProvider %s cannot stop and start machines: the pool's empty and underused nodes are deleted", pool.Spec.ProviderRef.Name)}
	}
	allowed := pool.SleepingMachinesAllowed(info.live + info.asleep)
	sleeping := info.asleep + info.suspending
	if sleeping >= allowed {
		return &metav1.Condition{Type: v1alpha1.ConditionSleepAllowed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSleepBudgetUsedUp,
			Message: fmt.Sprintf("%d of the pool's machines sleep or are being suspended, as many as sleep.machines %s allows of its %d claims: further removals delete",
				sleeping, pool.Spec.Disruption.Sleep.Machines, info.live+info.asleep)}
	}
	return &metav1.Condition{Type: v1alpha1.ConditionSleepAllowed, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonWithinSleepBudget,
		Message: fmt.Sprintf("%d of the pool's machines sleep or are being suspended, of %d sleep.machines %s allows of its %d claims",
			sleeping, allowed, pool.Spec.Disruption.Sleep.Machines, info.live+info.asleep)}
}

// apply writes the pool's SleepAllowed condition by server-side apply
// under disruption's own field manager, the one pool status field it
// owns; nil removes it. The nodepool controller and repair apply theirs
// under their own, and are left alone.
func (o *sleepObserver) apply(ctx context.Context, pool *v1alpha1.NodePool, condition *metav1.Condition) {
	var owned statusapply.Conditions
	if condition != nil {
		owned.Conditions = []metav1.Condition{*condition}
	}
	if _, err := statusapply.Apply(ctx, o.kube, "NodePool", pool.Name, &owned, Name); client.IgnoreNotFound(err) != nil {
		log.FromContext(ctx).V(1).Info("writing SleepAllowed failed; trying again next round", "nodePool", pool.Name, "error", err.Error())
	}
}

// suspend asks the claim's lifecycle to put its machine to sleep: the
// suspend annotation, whose value is the disruption reason, set by a patch
// that holds only over the claim as the round last wrote it (the mark
// before it), so a claim changed meanwhile (woken, deleted, taken by
// someone else) is decided on again next round rather than put to sleep
// from a stale copy.
func (wr *writer) suspend(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason) error {
	claim = s.own(claim)
	wr.writes.Add(1)
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[v1alpha1.AnnotationSuspend] = string(reason)
	if err := wr.kube.Patch(ctx, claim, patch); err != nil {
		delete(claim.Annotations, v1alpha1.AnnotationSuspend)
		return fmt.Errorf("suspending claim %s: %w", claim.Name, err)
	}
	return nil
}

// waitForSuspensions waits until the cache shows every claim with its
// suspend annotation (or gone), for at most cacheWait: the next round
// counts the claims suspending from the cache, against the budgets and
// the sleep budget, and would count too few.
func (wr *writer) waitForSuspensions(ctx context.Context, claims []*v1alpha1.NodeClaim) error {
	if len(claims) == 0 {
		return nil
	}
	return wr.awaitCached(ctx, claims, (*v1alpha1.NodeClaim).SleepRequested)
}

// Reasons of the Disrupting condition of a claim that slept.
const (
	// disruptingAsleep: the claim's node was removed and its machine
	// sleeps; nothing disrupts it now.
	disruptingAsleep = v1alpha1.ReasonSuspended
	// disruptingAwake: the machine was woken; the claim is an ordinary
	// one again.
	disruptingAwake = v1alpha1.ReasonAwake
)

// observeSleeper keeps an asleep claim's conditions true: Disrupting is no
// longer True (its node is gone and nothing takes it away), and Drifted
// says whether it drifted from its pool, by the template and provider
// hashes and the shapes offered (a provider's own drift check is not
// asked about a stopped machine). A drifted one is deleted by
// deleteStaleSleepers in the same round.
func (o *observer) observeSleeper(s *state, claim *v1alpha1.NodeClaim, providerName string) {
	var driftReason, driftMessage string
	pool, hasPool := s.pools[claim.Spec.NodePoolRef.Name]
	if hasPool {
		driftReason, driftMessage = driftOf(claim, pool.pool, s.providerHashes[providerName])
		if driftReason != "" && !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDrifted) {
			o.teller.eventf(claim, nil, corev1.EventTypeNormal, "Drifted", "Drift", "sleeping claim drifted: "+driftMessage)
		}
	}
	since := claim.AsleepSince()
	o.writer.deferStatus(s, claim, func(claim *v1alpha1.NodeClaim) {
		if disrupting := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting); disrupting != nil &&
			(disrupting.Status == metav1.ConditionTrue || disrupting.Reason != disruptingAsleep) {
			why := disrupting.Reason
			o.writer.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionFalse, disruptingAsleep,
				fmt.Sprintf("the node was removed (%s) and the machine sleeps since %s; provisioning may wake it", why, since.UTC().Format(time.RFC3339)))
		}
		if hasPool {
			o.setDrifted(claim, driftReason, driftMessage)
		}
	})
}

// observeWoken turns the Disrupting condition of a claim woken from sleep
// (Disrupting=False/Suspended, the annotation gone) to say so.
func (o *observer) observeWoken(s *state, claim *v1alpha1.NodeClaim) {
	disrupting := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)
	if claim.SleepRequested() || disrupting == nil || disrupting.Status != metav1.ConditionFalse || disrupting.Reason != disruptingAsleep {
		return
	}
	o.writer.deferStatus(s, claim, func(claim *v1alpha1.NodeClaim) {
		o.writer.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionFalse, disruptingAwake, "the sleeping machine was woken; nothing disrupts it")
	})
}

// deleteStaleSleepers deletes the asleep claims that drifted (the observer
// set Drifted this round or before) or outlived their pool's expireAfter:
// a sleeping machine is deleted, never woken, once it is no longer what
// its pool makes. No budget is needed and none is taken: the claim has no
// node and no pods, so removing it disrupts nothing; the lifecycle deletes
// the stopped machine. It says whether it deleted any.
func (e *executor) deleteStaleSleepers(ctx context.Context, s *state) (bool, error) {
	var deleted []*v1alpha1.NodeClaim
	for _, name := range sortedNames(s.claims) {
		claim := s.claims[name]
		if !claim.Asleep() || !claim.DeletionTimestamp.IsZero() {
			continue
		}
		info, ok := s.pools[claim.Spec.NodePoolRef.Name]
		if !ok {
			continue
		}
		reason, why := staleSleeper(s.now, claim, info.pool)
		if reason == "" {
			continue
		}
		if _, err := e.writer.writeStatus(ctx, s, claim, func(claim *v1alpha1.NodeClaim) {
			e.writer.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionTrue, string(reason), why)
		}); err != nil {
			log.FromContext(ctx).Info("marking a sleeping claim for deletion failed; deciding again next round", "nodeClaim", claim.Name, "error", err.Error())
			continue
		}
		log.FromContext(ctx).Info("deleting a sleeping claim instead of waking it", "reason", reason, "nodeClaim", claim.Name, "why", why)
		e.teller.eventf(claim, nil, corev1.EventTypeNormal, "Disrupting", "Disrupt", "deleting: "+why)
		incDecision(reason, "delete", 1)
		claim = s.current(claim)
		if err := e.writer.deleteAsMarked(ctx, claim); err != nil {
			if apierrors.IsConflict(err) {
				// Woken (or changed) since the mark: a running drifted or
				// expired node is replaced the usual way.
				log.FromContext(ctx).Info("a sleeping claim changed before its deletion; deciding again next round", "nodeClaim", claim.Name)
				continue
			}
			return true, err
		}
		deleted = append(deleted, claim)
	}
	if len(deleted) == 0 {
		return false, nil
	}
	return true, e.writer.waitForDeletions(ctx, deleted)
}

// deleteAsMarked deletes a claim on condition that it is still as the
// round last wrote it: provisioning may wake a sleeping claim (removing
// its suspend annotation) at any time, and a woken claim is not deleted
// from the copy that thought it asleep.
func (wr *writer) deleteAsMarked(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	wr.writes.Add(1)
	uid, version := claim.UID, claim.ResourceVersion
	if err := wr.kube.Delete(ctx, claim, client.Preconditions{UID: &uid, ResourceVersion: &version}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting sleeping claim %s: %w", claim.Name, err)
	}
	return nil
}

// staleSleeper says whether an asleep claim is to be deleted rather than
// woken, and why: Drifted, or Expired.
func staleSleeper(now time.Time, claim *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (v1alpha1.DisruptionReason, string) {
	if drifted := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDrifted); drifted != nil && drifted.Status == metav1.ConditionTrue {
		return v1alpha1.DisruptionReasonDrifted, fmt.Sprintf("sleeping claim %s drifted: %s; deleted, not woken", claim.Name, drifted.Message)
	}
	if expireAfter := pool.Spec.Disruption.ExpireAfter; expireAfter != nil && expireAfter.Duration > 0 && now.Sub(claim.CreationTimestamp.Time) >= expireAfter.Duration {
		return reasonExpired, fmt.Sprintf("sleeping claim %s expired: older than the pool's expireAfter of %s; deleted, not woken", claim.Name, expireAfter.Duration)
	}
	return "", ""
}
