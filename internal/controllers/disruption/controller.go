// Package disruption removes and replaces nodes voluntarily, deciding on
// the same scheduling snapshot provisioning uses: nodes empty for their
// pool's consolidateAfter, underused nodes whose pods fit on the others (or
// on one cheaper node), nodes past their pool's expireAfter, and nodes
// drifted from their pool's template. A replacement is Ready before the
// node it replaces drains; budgets, minNodes, do-not-disrupt and
// PodDisruptionBudgets hold throughout, and the claim's deletion goes the
// lifecycle's way (cordon, evict, grace period).
package disruption

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/warmcapacity"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Name of the controller in logs, metrics and events.
const Name = "disruption"

const (
	defaultConsolidateAfter = 30 * time.Second
	defaultInterval         = time.Second
	// A decision that found nothing is not tried again on an unchanged
	// cluster for this long. The cluster's fingerprint covers all a
	// decision reads, pools' warm capacity now included, so this is only a
	// safety net: at a thousand nodes, simulating each again every few
	// minutes was most of an idle controller's CPU.
	memoryBackoff = 30 * time.Minute
	// The same refusal is repeated as an event at most this often.
	eventRepeat = 10 * time.Minute
	// A claim marked Disrupting that nothing replaces or deletes any more
	// (a crash between marking and acting, a replacement that failed and
	// vanished) is released after this long.
	staleMark = 10 * time.Second
	// How long to wait for the cache to see our own writes.
	cacheWait = 10 * time.Second
)

// Controller runs disruption rounds: each reads the cluster from the
// caches, finishes replacements in flight, and then takes at most one new
// decision, trying expiration, drift, emptiness, multi-node and single-node
// consolidation in that order. One decision at a time keeps every
// simulation true to the cluster the next one sees.
type Controller struct {
	Kube client.Client
	// Providers are asked whether a claim's machine drifted, by the
	// providers that tell drift of their own.
	Providers ProviderResolver
	// Pools says which pools can provision now, as provisioning resolves
	// them; nil: none can, so no replacement is simulated.
	Pools    clusterstate.PoolUsability
	Recorder events.EventRecorder
	Clock    clock.WithTicker
	// Interval is the pause between rounds (default 1s).
	Interval time.Duration
	// WarmCapacity says each pool's minNodes and headroom now, as
	// provisioning sees them; nil reads the pools' schedules at Clock.
	WarmCapacity *warmcapacity.Source
	// Decisions keeps the latest decision about each node; nil keeps none.
	Decisions *decisions.Store
	// DryRun decides and records as usual but marks, cordons and deletes
	// nothing.
	DryRun bool
	// Changes, when set, says when the cluster changed: a round that
	// found nothing to do is followed by the next only after a change, at
	// the earliest time a decision could come out differently, or after
	// Resync. Nil runs a round every Interval.
	Changes *clusterstate.Changes
	// Objects, when set, gives the pods and nodes without listing them;
	// nil lists them through Kube.
	Objects clusterstate.ObjectSource
	// Writes records the claims the controller creates and deletes until
	// the cache shows them, and waits for the cache; nil records none.
	Writes *clusterstate.Writes
	// Departures, when set, tells when a pod last left a node, so an
	// emptied node's consolidateAfter clock starts then and not when a
	// round first sees it empty (clusterstate.Departures).
	Departures departures
	// Resync is the longest wait for a change (default 5m).
	Resync time.Duration

	memory    *memory
	stability *stability
	events    *eventMemo
	// verdicts keeps the Consolidatable=False condition of each claim
	// the last round that decided about it gave (report).
	verdicts map[types.UID]verdictCondition
	// pools whose metrics were set, to remove those of deleted pools.
	metricPools map[string]bool
	// writes counts the writes attempted, to tell a round that changed
	// something from one that found nothing to do.
	writes atomic.Int64
	// providerDriftAsked says the round asked a provider that tells drift
	// of its own, which no event of this cluster announces.
	providerDriftAsked bool
}

// providerDriftRecheck is how soon a quiet controller asks again the
// providers that tell drift of their own (a Cluster API MachineDeployment
// rolled to new templates changes nothing claimscale watches).
const providerDriftRecheck = 30 * time.Second

// outcome is what a round leaves for the next: whether it changed
// anything (then the next follows after Interval), and else the earliest
// time a decision could come out differently on an unchanged cluster.
type outcome struct {
	busy bool
	wake time.Time
}

// SetupWithManager adds the controller to the manager.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Interval == 0 {
		c.Interval = defaultInterval
	}
	if c.Resync == 0 {
		c.Resync = defaultResync
	}
	c.memory = newMemory(memoryBackoff)
	c.stability = newStability()
	c.stability.departures = c.Departures
	c.events = newEventMemo(eventRepeat)
	c.verdicts = map[types.UID]verdictCondition{}
	c.metricPools = map[string]bool{}
	return mgr.Add(c)
}

// NeedLeaderElection: only the leader disrupts.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs rounds until the context ends.
func (c *Controller) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName(Name)
	ctx = log.IntoContext(ctx, logger)
	for {
		if c.Changes != nil {
			// Changes from here on wake the next wait; those before are
			// in this round.
			select {
			case <-c.Changes.C():
			default:
			}
		}
		result, err := c.round(ctx)
		if err != nil && ctx.Err() == nil {
			if apierrors.IsConflict(err) {
				// The next round decides again on the newer objects.
				logger.V(1).Info("disruption round conflicted, deciding again next round", "error", err.Error())
			} else {
				logger.Error(err, "disruption round failed")
			}
		}
		// A fixed pause after each round, not a multiple of its length: a
		// round costs what changed, and scale-down must not slow down in
		// the large clusters where it matters most.
		if !c.pause(ctx, c.Interval, nil) {
			return nil
		}
		if c.Changes == nil || result.busy || err != nil {
			continue
		}
		// Nothing to do: deciding again on the same cluster would find
		// the same. Wait for a change or a deadline; at a thousand idle
		// nodes a round a second is most of the controller's CPU.
		wait := c.Resync
		if !result.wake.IsZero() {
			wait = min(wait, max(result.wake.Sub(c.Clock.Now()), 0))
		}
		if !c.pause(ctx, wait, c.Changes.C()) {
			return nil
		}
	}
}

// pause waits for d, or until wake receives; false when the context ended.
func (c *Controller) pause(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	timer := c.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C():
	case <-wake:
	}
	return true
}

// Reconcile runs one round.
func (c *Controller) Reconcile(ctx context.Context) error {
	_, err := c.round(ctx)
	return err
}

func (c *Controller) round(ctx context.Context) (outcome, error) {
	writes := c.writes.Load()
	s, err := c.gather(ctx)
	if err != nil {
		return outcome{busy: true}, err
	}
	result, err := c.decideAndAct(ctx, s)
	c.sendUnsent(ctx, s)
	if c.writes.Load() != writes {
		result.busy = true
	}
	return result, err
}

// decideAndAct is a round on the state gathered: the claims' conditions,
// orchestration, a decision and, if there is one, acting on it.
func (c *Controller) decideAndAct(ctx context.Context, s *state) (outcome, error) {
	writes, remembered := c.writes.Load(), c.memory.remembered
	c.providerDriftAsked = false
	stableSince := c.observeStability(s)
	c.updateClaims(ctx, s)
	if acted, err := c.orchestrate(ctx, s); err != nil || acted {
		return outcome{busy: true}, err
	}
	candidates := s.candidates()
	pools, total, disrupting := s.poolTotals()
	budgets, errs := newLedger(pools, total, disrupting, s.now)
	c.reportBudgetErrors(ctx, s, errs)
	r := newRound(s, candidates, budgets, stableSince, c.emptySince, c.memory)
	cmd, err := r.decide(ctx)
	c.report(s, r, cmd, budgets, total)
	c.recordDecisions(s, r, cmd)
	c.memory.prune(s.now)
	c.events.prune(s.now)
	result := outcome{
		// A dry run's decision is recorded and acted on by nobody: the
		// next round would only decide it again.
		busy: (cmd != nil && !c.DryRun) || c.writes.Load() != writes || c.memory.remembered != remembered,
		wake: wakeAt(s, candidates, stableSince, c.emptySince, c.memory),
	}
	if c.providerDriftAsked {
		if recheck := s.now.Add(providerDriftRecheck); result.wake.IsZero() || recheck.Before(result.wake) {
			result.wake = recheck
		}
	}
	if err != nil || cmd == nil {
		return result, err
	}
	if c.DryRun {
		// The record says it; the log would say it every round.
		log.FromContext(ctx).V(1).Info("dry-run: would disrupt", "reason", cmd.reason, "action", cmd.action(), "nodeClaims", cmd.names(), "message", cmd.message)
		return result, nil
	}
	if why := c.stillValid(ctx, cmd); why != "" {
		log.FromContext(ctx).Info("decision no longer holds, deciding again", "reason", cmd.reason, "nodeClaims", cmd.names(), "why", why)
		return result, nil
	}
	return result, c.execute(ctx, s, cmd)
}

// gather reads everything a round looks at from the caches.
func (c *Controller) gather(ctx context.Context) (*state, error) {
	// A pool that cannot provision is provisioning's to report; here it
	// would be said every second.
	quiet := log.IntoContext(ctx, log.FromContext(ctx).V(1))
	picture, err := (&clusterstate.Cluster{Kube: c.Kube, Objects: c.Objects, Writes: c.Writes}).Picture(quiet, c.Pools)
	if err != nil {
		return nil, err
	}
	var (
		budgets   policyv1.PodDisruptionBudgetList
		providers v1alpha1.NodeProviderList
	)
	// Pools, claims, nodes and pods are the picture's: the cache's own,
	// only read; a write to a claim copies first (state.own).
	for _, list := range []struct {
		what string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"PodDisruptionBudgets", &budgets, []client.ListOption{client.UnsafeDisableDeepCopy}},
		{"providers", &providers, nil},
	} {
		if err := c.Kube.List(ctx, list.list, list.opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", list.what, err)
		}
	}
	warm := c.WarmCapacity
	if warm == nil {
		warm = &warmcapacity.Source{Clock: c.Clock}
	}
	targets := map[string]warmcapacity.Target{}
	for i := range picture.Pools {
		// A schedule that cannot be read leaves the pool's own values;
		// provisioning says so.
		targets[picture.Pools[i].Name], _ = warm.Target(&picture.Pools[i])
	}
	return newState(c.Clock.Now(), objects{
		input: picture.Input, pools: picture.Pools, claims: picture.Claims, nodes: picture.AllNodes,
		pods: picture.AllPods, budgets: budgets.Items, providers: providers.Items, targets: targets,
	}), nil
}

// updateClaims keeps the claims' Empty and Drifted conditions true to the
// cluster, and records the provider's settings hash on claims that lack
// it. A failed write is tried again next round.
func (c *Controller) updateClaims(ctx context.Context, s *state) {
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
			if err := c.annotate(ctx, s, claim, map[string]*string{AnnotationProviderHash: &hash}); err != nil {
				log.FromContext(ctx).V(1).Info("recording the provider hash failed", "nodeClaim", claim.Name, "error", err.Error())
			}
			claim = s.current(claim)
		}
		node, ok := s.nodes[claim.Status.NodeName]
		if !ok || !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
			continue
		}
		var driftReason, driftMessage string
		pool, hasPool := s.pools[claim.Spec.NodePoolRef.Name]
		if hasPool {
			driftReason, driftMessage = driftOf(claim, pool.pool, s.providerHashes[providerName])
			if driftReason == "" {
				driftReason, driftMessage = c.providerDrift(ctx, providerName, claim)
			}
			if driftReason != "" && !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDrifted) {
				c.eventf(claim, node, corev1.EventTypeNormal, "Drifted", "Drift", driftMessage)
			}
		}
		c.deferStatus(s, claim, func(claim *v1alpha1.NodeClaim) {
			if claim.Annotations[AnnotationReplaces] != "" {
				// A replacement waits for the pods of the nodes it
				// replaces; its emptiness counts from when it stops
				// waiting.
				c.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionFalse, "Replacing", "node "+node.Name+" waits for the pods of "+claim.Annotations[AnnotationReplaces])
			} else if n := len(workloadPods(s.podsByNode[node.Name])); n > 0 {
				c.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionFalse, "NotEmpty", "node "+node.Name+" runs pods other than DaemonSet and mirror pods")
			} else {
				emptyAt, ok := c.stability.emptySince(node.Name)
				if !ok {
					emptyAt = c.Clock.Now()
				}
				claim.SetCondition(v1alpha1.ConditionEmpty, metav1.ConditionTrue, "Empty", "node "+node.Name+" runs no pods but DaemonSet and mirror pods", emptyAt)
			}
			switch {
			case !hasPool:
			case driftReason != "":
				c.setCondition(claim, v1alpha1.ConditionDrifted, metav1.ConditionTrue, driftReason, driftMessage)
			case meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDrifted):
				c.setCondition(claim, v1alpha1.ConditionDrifted, metav1.ConditionFalse, "NotDrifted", "the claim matches its pool again")
			}
		})
	}
}

// Claims whose status a round writes at once. After a scale-down a
// thousand claims turn Empty in the same round; one after the other that
// is a minute of round trips before the first can be removed.
const parallelStatusWrites = 16

type statusWrite struct{ stored, claim *v1alpha1.NodeClaim }

// statusChange applies change to the claim's conditions, the only part of
// a claim's status disruption writes. Only if that changes them is the
// claim copied (state.own): most rounds change nothing, and the claims
// are the cache's. The write returned carries the claim as it was
// (stored) and the round's own copy with the change.
func (c *Controller) statusChange(s *state, claim *v1alpha1.NodeClaim, change func(*v1alpha1.NodeClaim)) (statusWrite, bool) {
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
func (c *Controller) deferStatus(s *state, claim *v1alpha1.NodeClaim, change func(*v1alpha1.NodeClaim)) {
	if write, changed := c.statusChange(s, claim, change); changed {
		s.keepUnsent(write)
	}
}

// sendUnsent writes the status changes the round deferred.
func (c *Controller) sendUnsent(ctx context.Context, s *state) {
	c.patchStatuses(ctx, s.takeAllUnsent(), "updating conditions failed")
}

// patchStatuses writes the claims' statuses in parallel. A failed write
// (a conflict, mostly) is tried again next round, so it is logged at debug
// level only.
func (c *Controller) patchStatuses(ctx context.Context, writes []statusWrite, failed string) {
	work := make(chan statusWrite)
	var wg sync.WaitGroup
	for range min(parallelStatusWrites, len(writes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range work {
				if err := c.patchStatus(ctx, w); err != nil {
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

// emptySince is when the node lost its last pod, if a round saw it happen.
func (c *Controller) emptySince(node string) (time.Time, bool) {
	return c.stability.emptySince(node)
}

// observeStability notes every claim's node's pods and returns since when
// each has carried them.
func (c *Controller) observeStability(s *state) map[string]time.Time {
	since := map[string]time.Time{}
	seen := map[string]bool{}
	for _, claim := range s.claims {
		initialized := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionInitialized)
		if _, ok := s.nodes[claim.Status.NodeName]; !ok || initialized == nil || initialized.Status != metav1.ConditionTrue {
			continue
		}
		node := claim.Status.NodeName
		seen[node] = true
		since[node] = c.stability.observe(node, workloadPods(s.podsByNode[node]), initialized.LastTransitionTime.Time, s.now)
	}
	c.stability.prune(seen)
	return since
}

// orchestrate carries replacements in flight forward: once every
// replacement of a group is Ready, the claims it replaces are checked once
// more and deleted; if a replacement fails, they are released. It says
// whether it changed anything, so the round ends and the next one sees it.
func (c *Controller) orchestrate(ctx context.Context, s *state) (bool, error) {
	acted := false
	named := map[string]bool{}
	for _, group := range s.groups {
		var live []*v1alpha1.NodeClaim
		present := 0
		for _, name := range group.olds {
			named[name] = true
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
			c.release(ctx, s, group)
			continue
		}
		if len(live) == 0 {
			continue
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
			c.cancel(ctx, s, group, live, fmt.Sprintf("replacement %s is being deleted", failed))
			acted = true
			continue
		}
		if !ready {
			// After a restart between making the replacements and
			// marking the claims, the marks are made here.
			for _, old := range live {
				if !meta.IsStatusConditionTrue(old.Status.Conditions, v1alpha1.ConditionDisrupting) {
					c.mark(ctx, s, old, group.reason, fmt.Sprintf("waiting for replacement %s to be Ready", replacements))
				}
			}
			continue
		}
		if why, err := c.revalidate(ctx, s, group, live); err != nil {
			return acted, err
		} else if why != "" {
			c.cancel(ctx, s, group, live, why)
			acted = true
			continue
		}
		for _, old := range live {
			node := s.nodes[old.Status.NodeName]
			message := fmt.Sprintf("replacement %s is Ready", replacements)
			if !c.mark(ctx, s, old, group.reason, message) {
				continue
			}
			c.eventf(old, node, corev1.EventTypeNormal, "Disrupting", "Disrupt", "deleting: "+message)
			if err := c.delete(ctx, old); err != nil {
				return true, err
			}
		}
		acted = true
	}
	for _, name := range sortedNames(s.claims) {
		claim := s.claims[name]
		marked := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)
		if named[name] || !claim.DeletionTimestamp.IsZero() || marked == nil || marked.Status != metav1.ConditionTrue ||
			s.now.Sub(marked.LastTransitionTime.Time) < staleMark {
			continue
		}
		changed, err := c.writeStatus(ctx, s, claim, func(claim *v1alpha1.NodeClaim) {
			c.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionFalse, "Cancelled", "nothing replaces or deletes the claim any more")
		})
		if err != nil {
			log.FromContext(ctx).V(1).Info("releasing a stale mark failed", "nodeClaim", claim.Name, "error", err.Error())
			continue
		}
		acted = acted || changed
	}
	return acted, nil
}

// revalidate checks, just before the replaced claims are deleted, that it
// is still safe: nothing asked since to keep them, and (for consolidation,
// which is optional) their pods still fit with the replacement in place.
func (c *Controller) revalidate(ctx context.Context, s *state, group *replacementGroup, live []*v1alpha1.NodeClaim) (string, error) {
	for _, old := range live {
		node, ok := s.nodes[old.Status.NodeName]
		if !ok {
			continue
		}
		if why := blocker(node, s.podsByNode[node.Name], nil); why != "" {
			return why, nil
		}
	}
	if group.reason != v1alpha1.DisruptionReasonUnderutilized {
		// Drifted and expired nodes go in any case; what does not fit
		// goes Pending and provisioning makes room.
		return "", nil
	}
	removal, err := s.simulateRemoval(ctx, nil)
	if err != nil {
		return "", err
	}
	if !removal.Fits() {
		return "the pods would no longer fit: " + describeUnschedulable(removal.Unschedulable), nil
	}
	return "", nil
}

// cancel releases the claims a failed or invalid replacement was for; the
// replacements that exist stay as ordinary claims (consolidation removes
// them if nobody needs them).
func (c *Controller) cancel(ctx context.Context, s *state, group *replacementGroup, live []*v1alpha1.NodeClaim, why string) {
	log.FromContext(ctx).Info("replacement cancelled", "nodeClaims", claimNames(live), "reason", group.reason, "why", why)
	incDecision(group.reason, "cancel", len(live))
	for _, old := range live {
		if _, err := c.writeStatus(ctx, s, old, func(claim *v1alpha1.NodeClaim) {
			c.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionFalse, "Cancelled", why)
		}); err != nil {
			log.FromContext(ctx).V(1).Info("releasing a claim failed", "nodeClaim", old.Name, "error", err.Error())
		}
		c.eventf(old, s.nodes[old.Status.NodeName], corev1.EventTypeNormal, "DisruptionCancelled", "Disrupt", "not replaced after all: "+why)
	}
	c.release(ctx, s, group)
}

// release turns a group's replacements into ordinary claims.
func (c *Controller) release(ctx context.Context, s *state, group *replacementGroup) {
	for _, replacement := range group.replacements {
		if !replacement.DeletionTimestamp.IsZero() {
			continue
		}
		if err := c.annotate(ctx, s, replacement, map[string]*string{AnnotationReplaces: nil, AnnotationDisruptionReason: nil}); err != nil {
			log.FromContext(ctx).V(1).Info("releasing a replacement failed", "nodeClaim", replacement.Name, "error", err.Error())
		}
	}
}

// stillValid re-reads the candidates just before acting: a claim deleted
// or chosen by someone else meanwhile, pods that came or went, or a
// do-not-disrupt annotation that appeared, void the decision.
func (c *Controller) stillValid(ctx context.Context, cmd *command) string {
	for _, candidate := range cmd.candidates {
		var claim v1alpha1.NodeClaim
		if err := c.Kube.Get(ctx, client.ObjectKeyFromObject(candidate.claim), &claim); err != nil {
			return fmt.Sprintf("reading claim %s: %v", candidate.claim.Name, err)
		}
		if !claim.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDisrupting) {
			return "claim " + claim.Name + " is already going"
		}
		var node corev1.Node
		if err := c.Kube.Get(ctx, client.ObjectKeyFromObject(candidate.node), &node); err != nil {
			return fmt.Sprintf("reading node %s: %v", candidate.node.Name, err)
		}
		var pods corev1.PodList
		if err := c.Kube.List(ctx, &pods, client.MatchingFields{index.PodNodeName: node.Name}); err != nil {
			return fmt.Sprintf("listing pods on node %s: %v", node.Name, err)
		}
		now := make([]*corev1.Pod, 0, len(pods.Items))
		for i := range pods.Items {
			now = append(now, &pods.Items[i])
		}
		if !sameWorkload(candidate.pods, workloadPods(now)) {
			return "the pods on node " + node.Name + " changed"
		}
		if why := blocker(&node, now, nil); why != "" {
			return why
		}
	}
	return ""
}

func sameWorkload(a, b []*corev1.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	uids := map[string]bool{}
	for _, pod := range a {
		uids[string(pod.UID)] = true
	}
	for _, pod := range b {
		if !uids[string(pod.UID)] {
			return false
		}
	}
	return true
}

// execute carries out a decision: deleting the candidates, or making their
// replacements first and leaving the deletion to orchestrate once the
// replacements are Ready.
func (c *Controller) execute(ctx context.Context, s *state, cmd *command) error {
	logger := log.FromContext(ctx)
	incDecision(cmd.reason, cmd.action(), len(cmd.candidates))
	if len(cmd.replacements) == 0 {
		// The budget allows these all at once (two hundred empty nodes
		// of a thousand, say): one after the other, each waiting for the
		// cache, would spread them over many seconds.
		work := make(chan *candidate)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			errs    []error
			deleted []*v1alpha1.NodeClaim
		)
		for range min(parallelStatusWrites, len(cmd.candidates)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for candidate := range work {
					if !c.mark(ctx, s, candidate.claim, cmd.reason, cmd.message) {
						continue
					}
					logger.Info("deleting node", "reason", cmd.reason, "nodeClaim", candidate.claim.Name, "node", candidate.node.Name, "why", cmd.message)
					c.eventf(candidate.claim, candidate.node, corev1.EventTypeNormal, "Disrupting", "Disrupt", "deleting: "+cmd.message)
					err := c.deleteClaim(ctx, candidate.claim)
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
		return errors.Join(append(errs, c.waitForDeletions(ctx, deleted))...)
	}
	olds := strings.Join(cmd.names(), ",")
	var made []string
	for _, replacement := range cmd.replacements {
		pool, ok := s.pools[replacement.Pool]
		if !ok {
			return fmt.Errorf("replacement names pool %s, which the round did not see", replacement.Pool)
		}
		claim, err := c.createReplacement(ctx, pool.pool, s.providerHashes[pool.pool.Spec.ProviderRef.Name], replacement, olds, cmd.reason)
		if err != nil {
			return err
		}
		made = append(made, claim.Name)
	}
	message := fmt.Sprintf("%s; waiting for replacement %s to be Ready", cmd.message, strings.Join(made, ", "))
	logger.Info("replacing nodes", "reason", cmd.reason, "nodeClaims", cmd.names(), "replacements", made, "why", cmd.message)
	for _, candidate := range cmd.candidates {
		c.mark(ctx, s, candidate.claim, cmd.reason, message)
		c.eventf(candidate.claim, candidate.node, corev1.EventTypeNormal, "Disrupting", "Replace", "replacing: "+message)
	}
	return nil
}

// mark sets a claim's Disrupting condition (and, for consolidation,
// Consolidatable), before it is deleted: termination reads the reason. It
// says whether the claim is marked.
func (c *Controller) mark(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, message string) bool {
	if _, err := c.writeStatus(ctx, s, claim, func(claim *v1alpha1.NodeClaim) {
		c.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionTrue, string(reason), message)
		if reason == v1alpha1.DisruptionReasonUnderutilized {
			c.setCondition(claim, v1alpha1.ConditionConsolidatable, metav1.ConditionTrue, v1alpha1.ConsolidatableReasonConsolidating, message)
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
func (c *Controller) delete(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	if err := c.deleteClaim(ctx, claim); err != nil {
		return err
	}
	return c.waitForDeletions(ctx, []*v1alpha1.NodeClaim{claim})
}

// deleteClaim asks the API server to delete a claim; its lifecycle does
// the rest behind the termination finalizer.
func (c *Controller) deleteClaim(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	c.writes.Add(1)
	if err := c.Kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting claim %s: %w", claim.Name, err)
	}
	return nil
}

// waitForDeletions records the claims as deleted, so the next round's
// picture counts them leaving however late the cache is, and waits until
// the cache has seen every one deleted (or gone), for at most cacheWait.
func (c *Controller) waitForDeletions(ctx context.Context, claims []*v1alpha1.NodeClaim) error {
	for _, claim := range claims {
		c.Writes.Deleted(claim)
	}
	return c.Writes.Await(ctx, cacheWait, func(ctx context.Context) (bool, error) {
		for len(claims) > 0 {
			var cached v1alpha1.NodeClaim
			err := c.Kube.Get(ctx, client.ObjectKeyFromObject(claims[0]), &cached)
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			if err == nil && cached.DeletionTimestamp.IsZero() {
				return false, nil
			}
			claims = claims[1:]
		}
		return true, nil
	})
}

// report turns the round's refusals into events (each at most every
// eventRepeat) and Consolidatable conditions, and sets the metrics.
//
// The condition is set every round from the round's verdict, whether the
// event is due or not: a write that failed is made again next round, and
// the condition says what the record and the last event say. A verdict a
// later round does not repeat (remembered, not simulated again) is set
// again from the controller's memory of it (verdicts).
func (c *Controller) report(s *state, r *round, cmd *command, budgets *ledger, total map[string]int) {
	said := map[types.UID]bool{}
	if cmd != nil {
		// Marked as it goes (mark).
		for _, cand := range cmd.candidates {
			said[cand.claim.UID] = true
			delete(c.verdicts, cand.claim.UID)
		}
	}
	for _, refused := range r.refusals {
		claim := refused.candidate.claim
		if c.events.due(claim.UID, refused.reason, refused.note, s.now) && !refused.quiet {
			c.eventf(claim, refused.candidate.node, corev1.EventTypeNormal, refused.reason, "Disrupt", refused.note)
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
		c.verdicts[claim.UID] = verdictCondition{reason: reason, message: message}
	}
	for _, h := range r.held {
		claim := h.candidate.claim
		if said[claim.UID] {
			continue
		}
		switch h.reason {
		case decisions.NodeReasonMinNodes, decisions.NodeReasonHeadroom:
			said[claim.UID] = true
			c.verdicts[claim.UID] = verdictCondition{reason: heldConditions[h.reason], message: h.message}
		case decisions.NodeReasonConsolidateAfter:
			// The wait replaces a verdict the claim carries, which no
			// longer holds; on a claim without one it writes nothing:
			// after a scale-up a thousand new nodes wait so.
			delete(c.verdicts, claim.UID)
			if meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable) != nil {
				said[claim.UID] = true
				message := h.message
				if h.condition != "" {
					message = h.condition
				}
				c.verdicts[claim.UID] = verdictCondition{reason: v1alpha1.ConsolidatableReasonConsolidateAfter, message: message}
			}
		}
	}
	for name, claim := range s.claims {
		verdict, ok := c.verdicts[claim.UID]
		if !ok || !claim.DeletionTimestamp.IsZero() || s.disrupting[name] {
			continue
		}
		if written := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable); written != nil &&
			written.Status == metav1.ConditionFalse && written.Reason == verdict.reason && written.Message == verdict.message {
			continue
		}
		c.deferStatus(s, claim, func(claim *v1alpha1.NodeClaim) {
			c.setCondition(claim, v1alpha1.ConditionConsolidatable, metav1.ConditionFalse, verdict.reason, verdict.message)
		})
	}
	live := make(map[types.UID]bool, len(s.claims))
	for _, claim := range s.claims {
		live[claim.UID] = true
	}
	for uid := range c.verdicts {
		if !live[uid] {
			delete(c.verdicts, uid)
		}
	}
	c.setMetrics(s, r, budgets, total)
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
func (c *Controller) reportBudgetErrors(ctx context.Context, s *state, errs map[string]error) {
	for name, err := range errs {
		log.FromContext(ctx).Error(err, "reading a disruption budget; the pool disrupts nothing until it is fixed", "nodePool", name)
		info, ok := s.pools[name]
		if !ok {
			continue
		}
		note := err.Error() + "; the pool disrupts no node until the budget is fixed"
		if c.events.due(info.pool.UID, eventInvalidBudget, note, s.now) {
			c.Recorder.Eventf(info.pool, nil, corev1.EventTypeWarning, eventInvalidBudget, "Disrupt", "%s", note)
		}
	}
}

// eventf records an event on the claim and, if there is one, on its node.
func (c *Controller) eventf(claim *v1alpha1.NodeClaim, node *corev1.Node, eventType, reason, action, note string) {
	note = decisions.EventNote(c.DryRun, note)
	if node == nil {
		c.Recorder.Eventf(claim, nil, eventType, reason, action, "%s", note)
		return
	}
	c.Recorder.Eventf(claim, node, eventType, reason, action, "%s", note)
	c.Recorder.Eventf(node, claim, eventType, reason, action, "%s", note)
}

// annotate sets (or, with nil, removes) annotations on a claim, on the
// round's own copy of it.
func (c *Controller) annotate(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, annotations map[string]*string) error {
	claim = s.own(claim)
	c.writes.Add(1)
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
	if err := c.Kube.Patch(ctx, claim, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("annotating claim %s: %w", claim.Name, err))
	}
	return nil
}

// writeStatus applies change to the claim's conditions and, if that
// changed them, writes them at once (statusChange, patchStatus). It says
// whether there was anything to write.
func (c *Controller) writeStatus(ctx context.Context, s *state, claim *v1alpha1.NodeClaim, change func(*v1alpha1.NodeClaim)) (bool, error) {
	write, changed := c.statusChange(s, claim, change)
	if !changed {
		return false, nil
	}
	return true, c.patchStatus(ctx, write)
}

// patchStatus writes a change statusChange worked out: the round's own
// copy of the claim, against the claim as it was before the change. Other
// controllers write other conditions of the same list; the optimistic lock
// makes a concurrent write fail (and the next round try again) instead of
// erasing theirs. A failed write leaves the round's copy as it was.
func (c *Controller) patchStatus(ctx context.Context, w statusWrite) error {
	c.writes.Add(1)
	patch := client.MergeFromWithOptions(w.stored, client.MergeFromWithOptimisticLock{})
	if err := c.Kube.Status().Patch(ctx, w.claim, patch); err != nil {
		*w.claim = *w.stored
		return fmt.Errorf("writing status of claim %s: %w", w.claim.Name, err)
	}
	return nil
}

// setCondition sets a condition with the controller's clock, keeping the
// transition time while the status stays.
func (c *Controller) setCondition(claim *v1alpha1.NodeClaim, conditionType string, status metav1.ConditionStatus, reason, message string) {
	claim.SetCondition(conditionType, status, reason, message, c.Clock.Now())
}

func sortedNames[T any](m map[string]T) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func claimNames(claims []*v1alpha1.NodeClaim) []string {
	names := make([]string, 0, len(claims))
	for _, claim := range claims {
		names = append(names, claim.Name)
	}
	return names
}

// checksDrift says whether p, or the provider it wraps, tells drift of its
// own: the wrapper every provider is handed out in answers Drifted for any.
func checksDrift(p provider.Provider) bool {
	for {
		if _, ok := p.(provider.DriftChecker); !ok {
			return false
		}
		wrapper, ok := p.(interface{ Unwrap() provider.Provider })
		if !ok {
			return true
		}
		p = wrapper.Unwrap()
	}
}

// providerDrift asks the claim's provider whether its machine drifted from
// what the provider itself makes now (provider.DriftChecker); a provider
// that cannot say, or an error, is no drift.
func (c *Controller) providerDrift(ctx context.Context, providerName string, claim *v1alpha1.NodeClaim) (reason, message string) {
	if c.Providers == nil || providerName == "" {
		return "", ""
	}
	p, err := c.Providers.ForProviderName(ctx, providerName)
	if err != nil {
		return "", ""
	}
	checker, ok := p.(provider.DriftChecker)
	if !ok || !checksDrift(p) {
		return "", ""
	}
	c.providerDriftAsked = true
	reason, message, err = checker.Drifted(ctx, claim)
	if err != nil {
		log.FromContext(ctx).V(1).Info("asking the provider about drift failed", "nodeClaim", claim.Name, "error", err.Error())
		return "", ""
	}
	return reason, message
}
