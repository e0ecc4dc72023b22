// Package disruption removes and replaces nodes voluntarily, deciding on
// the same scheduling snapshot provisioning uses: nodes empty for their
// pool's consolidateAfter, underused nodes whose pods fit on the others (or
// on one cheaper node), nodes past their pool's expireAfter, and nodes
// drifted from their pool's template. A replacement is Ready before the
// node it replaces drains; budgets, minNodes, do-not-disrupt and
// PodDisruptionBudgets hold throughout, and the claim's deletion goes the
// lifecycle's way (cordon, evict, grace period). Where a pool lets machines
// sleep, an empty or underused node removed without a replacement is
// suspended instead of deleted (sleep.go).
package disruption

import (
	"context"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

// Name of the controller in logs, metrics and events.
const Name = "disruption"

const (
	defaultInterval = time.Second
	// A decision that found nothing is not tried again on an unchanged
	// cluster for this long. The cluster's fingerprint covers all a
	// decision reads, pools' warm capacity now included, so this is only a
	// safety net: at a thousand nodes, simulating each again every few
	// minutes was most of an idle controller's CPU.
	memoryBackoff = 30 * time.Minute
	// The same refusal is repeated as an event at most this often.
	eventRepeat = 10 * time.Minute
)

// Controller runs disruption rounds: each reads the cluster from the
// caches, finishes replacements in flight, and then takes at most one new
// decision, trying expiration, drift, emptiness, multi-node and single-node
// consolidation in that order. One decision at a time keeps every
// simulation true to the cluster the next one sees.
//
// The controller only wires a round's parts and runs rounds. A reader
// (gather.go) reads the cluster; an observer (conditions.go) keeps the
// claims' Empty and Drifted conditions, and a sleep observer (sleep.go)
// the SleepAllowed condition of the pools whose machines may sleep; a round (round.go) decides, one
// file per method (expiration.go, drift.go, emptiness.go, consolidation.go,
// with consolidateafter.go for the wait they share); an executor carries
// the decision out (validate.go, execute.go, replace.go, cancel.go)
// through a writer (status.go); a reporter (report.go, records.go) says
// what was decided and why; dryrun.go is what a dry run does instead.
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
	// nothing (dryrun.go).
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

	// The parts of a round, wired from the fields above (wire).
	reader    *reader
	writer    *writer
	observer  *observer
	sleep     *sleepObserver
	stability *stability
	memory    *memory
	executor  *executor
	reporter  *reporter
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
	c.wire()
	return mgr.Add(c)
}

// wire fills in the defaults and builds the parts a round is made of from
// the controller's fields.
func (c *Controller) wire() {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Interval == 0 {
		c.Interval = defaultInterval
	}
	if c.Resync == 0 {
		c.Resync = defaultResync
	}
	c.reader = &reader{kube: c.Kube, objects: c.Objects, pools: c.Pools, writes: c.Writes, warm: c.WarmCapacity, clock: c.Clock}
	c.writer = &writer{kube: c.Kube, clock: c.Clock, own: c.Writes}
	c.stability = newStability()
	c.stability.departures = c.Departures
	c.memory = newMemory(memoryBackoff)
	tell := &teller{recorder: c.Recorder, dryRun: c.DryRun, memo: newEventMemo(eventRepeat)}
	c.observer = &observer{providers: c.Providers, clock: c.Clock, stability: c.stability, writer: c.writer, teller: tell}
	c.sleep = &sleepObserver{kube: c.Kube, providers: c.Providers, clock: c.Clock, teller: tell}
	c.executor = &executor{kube: c.Kube, writer: c.writer, teller: tell}
	c.reporter = &reporter{teller: tell, writer: c.writer, store: c.Decisions,
		verdicts: map[types.UID]verdictCondition{}, metricPools: map[string]bool{}}
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
	writes := c.writer.writes.Load()
	s, err := c.reader.gather(ctx)
	if err != nil {
		return outcome{busy: true}, err
	}
	result, err := c.decideAndAct(ctx, s)
	c.writer.sendUnsent(ctx, s)
	if c.writer.writes.Load() != writes {
		result.busy = true
	}
	return result, err
}

// decideAndAct is a round on the state gathered: the claims' conditions,
// orchestration, a decision and, if there is one, acting on it.
func (c *Controller) decideAndAct(ctx context.Context, s *state) (outcome, error) {
	writes, remembered := c.writer.writes.Load(), c.memory.remembered
	c.observer.providerDriftAsked = false
	stableSince := c.stability.observeRound(s)
	c.observer.updateClaims(ctx, s)
	c.sleep.observe(ctx, s)
	if acted, err := c.executor.orchestrate(ctx, s); err != nil || acted {
		return outcome{busy: true}, err
	}
	candidates := s.candidates()
	pools, total, disrupting := s.poolTotals()
	budgets, errs := newLedger(pools, total, disrupting, s.now)
	c.reporter.reportBudgetErrors(ctx, s, errs)
	r := newRound(s, candidates, budgets, stableSince, c.stability.emptySince, c.memory)
	cmd, err := r.decide(ctx)
	c.reporter.report(s, r, cmd, budgets, total)
	c.reporter.recordDecisions(s, r, cmd)
	c.memory.prune(s.now)
	c.reporter.teller.memo.prune(s.now)
	result := outcome{
		busy: acts(cmd, c.DryRun) || c.writer.writes.Load() != writes || c.memory.remembered != remembered,
		wake: wakeAt(s, candidates, stableSince, c.stability.emptySince, c.memory),
	}
	if c.observer.providerDriftAsked {
		if recheck := s.now.Add(providerDriftRecheck); result.wake.IsZero() || recheck.Before(result.wake) {
			result.wake = recheck
		}
	}
	if err != nil || cmd == nil {
		return result, err
	}
	if c.DryRun {
		wouldDisrupt(ctx, cmd)
		return result, nil
	}
	if why := c.executor.stillValid(ctx, cmd); why != "" {
		log.FromContext(ctx).Info("decision no longer holds, deciding again", "reason", cmd.reason, "nodeClaims", cmd.names(), "why", why)
		return result, nil
	}
	return result, c.executor.execute(ctx, s, cmd)
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
