// Package provisioning turns pending pods into NodeClaims. A batcher decides
// when, the provisioner reads the cluster as it is from clusterstate's
// picture (nodes, their pods, claims still booting, machines asleep) with
// the pools it can provision from and their shapes, the scheduling package
// decides in memory which new nodes would hold the pods, and the provisioner
// writes one claim per new node, or wakes the sleeping claim the node is,
// and tells each pod where it is going, or why it can go nowhere.
package provisioning

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/poolusability"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/warmcapacity"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Name of the controller in logs, metrics and events.
const Name = "provisioning"

// Events per batch at the most: a Deployment of thousands of replicas must
// not become thousands of events every ten seconds.
const maxPodEvents = 100

// ProviderResolver finds a NodeProvider's provider.
type ProviderResolver interface {
	ForProviderName(ctx context.Context, name string) (provider.Provider, error)
}

// ObjectSource gives every pod and node of the cluster, read only
// (clusterstate.ObjectSource).
type ObjectSource = clusterstate.ObjectSource

// CapacityChecker says where a pool may open nodes after capacity errors:
// which of its zones and shapes are backed off (see capacitybackoff.Backoff.Narrow).
type CapacityChecker interface {
	Narrow(pool string, zones, shapes []string) (available, unavailable []string, unavailableIn map[string][]string)
}

// DefaultProviderCallTimeout bounds each provider call of a round: a
// provider whose API hangs costs a round this long at the most, once, and
// its pools are then backed off.
const DefaultProviderCallTimeout = 5 * time.Second

// DefaultPoolWait is how long a round waits for a pool's provider to name
// its shapes before it goes on with the shapes that provider last named
// (or without the pool, when it never answered): a provider that is slow,
// refuses connections or hangs holds up no other pool's claims.
const DefaultPoolWait = 500 * time.Millisecond

// Provisioner runs one provisioning round at a time. A pool that cannot
// provision (its provider unreachable or missing, its template invalid, its
// claims refused) is left out of the round, logged and backed off on its
// own; every other pool provisions as if it were not there.
type Provisioner struct {
	Kube client.Client
	// Objects, when set, gives the pods and nodes without listing them
	// (see clusterstate.Objects); nil lists them through Kube.
	Objects   ObjectSource
	Providers ProviderResolver
	Capacity  CapacityChecker
	Recorder  events.EventRecorder
	Clock     clock.Clock
	// Templates checks pool templates against the API server; nil checks
	// only what needs no API server.
	Templates *poolusability.TemplateCheck
	// Pools resolves the pools' shapes and keeps their backoff, shared
	// with the NodePool status and the externalgrpc shim; nil builds one
	// for this provisioner from Providers, Kube, Clock and Recorder.
	Pools *poolusability.Pools
	// ProviderCallTimeout bounds each provider call (default
	// DefaultProviderCallTimeout).
	ProviderCallTimeout time.Duration
	// PoolWait bounds how long a round waits on one pool's provider
	// (default DefaultPoolWait); the call goes on, for the next round.
	PoolWait time.Duration
	// WarmCapacity says each pool's minNodes and headroom now; nil reads
	// the pools' schedules on the real clock.
	WarmCapacity *warmcapacity.Source
	// Decisions keeps the round's decision about each pod; nil keeps none.
	Decisions *decisions.Store
	// DryRun decides and records as usual but writes no claim: events say
	// what would have been done.
	DryRun bool
	// PodLatency is told which pods got a claim, to time their binding;
	// nil times none.
	PodLatency *metrics.PodLatency
	// Writes records the claims the round creates, so the next round
	// counts them in flight before the cache shows them; nil records none.
	Writes *clusterstate.Writes
	// Nominations records which pods each new claim's node was bought
	// for, so that registration nominates them there; nil records none.
	Nominations *clusterstate.Nominations

	// round is held for a round from its picture to its last claim, and
	// by Exclusively.
	round         sync.Mutex
	mu            sync.Mutex
	lastGoodPools map[string]scheduling.Pool
	pools         *poolusability.Pools
	// free are the machines of inventory shapes a round may still claim,
	// by pool and shape, as its pools were read.
	free map[string]map[string]int
}

// SlowProviderError: a pool's provider named no shapes within the pool
// wait, and had named none before; the pool sits the round out.
type SlowProviderError = poolusability.SlowProviderError

// Provision runs one round: it writes claims for pools below their
// minNodes, then for pending pods and for headroom that does not fit.
func (p *Provisioner) Provision(ctx context.Context) error {
	p.round.Lock()
	defer p.round.Unlock()
	logger := log.FromContext(ctx)
	picture, err := p.picture(ctx)
	if err != nil {
		return err
	}
	input, pools := picture.Input, picture.Open
	input.Sleeping = picture.Asleep
	targets := p.targets(ctx, pools)
	// Warm nodes first, so the headroom counts them and is not bought
	// twice.
	input.InFlight = append(input.InFlight, p.keepWarmCapacity(ctx, pools, input.Pools, targets)...)
	workload := len(input.Pending)
	for _, schedulingPool := range input.Pools {
		pool, ok := pools[schedulingPool.NodePool.Name]
		if !ok {
			continue // closed this round: it buys nothing
		}
		// After the real pods, at the lowest priority: real pods take
		// the room first.
		target := targets[pool.Name]
		input.Pending = append(input.Pending, warmcapacity.Pods(pool, target.Headroom)...)
		nodes, err := warmcapacity.NodePods(ctx, pool, target.Nodes, schedulingPool.Shapes, input.DaemonSets)
		if err != nil {
			logger.Info("nodes of headroom left out", "nodePool", pool.Name, "reason", err.Error())
		}
		input.Pending = append(input.Pending, nodes...)
	}
	// Room other objects keep: booked ProvisioningRequests (placed before
	// every real pod, on the nodes booked for them) and CapacityBuffers
	// (headroom of the pools their pods can use, after the real pods).
	input.Pending = append(input.Pending, p.WarmCapacity.Reserved(ctx)...)
	if len(input.Pending) == 0 {
		metrics.PodsUnschedulable.Set(0)
		return nil
	}
	started := time.Now()
	result, err := solve(ctx, input)
	metrics.SchedulingSeconds.Observe(time.Since(started).Seconds())
	if err != nil {
		return fmt.Errorf("scheduling %d pending pods and %d headroom pods: %w", workload, len(input.Pending)-workload, err)
	}
	if workload > 0 || len(result.NewNodes) > 0 {
		logger.Info("scheduled pending pods", "pending", workload, "headroomPods", len(input.Pending)-workload, "inFlight", len(input.InFlight), "nodes", len(input.Nodes), "newNodes", len(result.NewNodes),
			"placedOnExisting", len(result.Placements), "unschedulable", len(result.Unschedulable), "duration", time.Since(started))
	}
	p.planOnInFlight(input.InFlight, result.Placements)
	failedWakes := p.createClaims(ctx, pools, asleepClaims(picture.Claims), result)
	p.reportUnschedulable(ctx, result.Unschedulable)
	if failedWakes != nil {
		return fmt.Errorf("waking sleeping claims: %w", failedWakes)
	}
	return nil
}

// Exclusively runs decide while no round runs: another writer of claims
// (the ProvisioningRequest controller) reads the cluster and writes its
// claims between rounds, so that neither buys on a picture without the
// other's claims and a pool's limits hold across both.
func (p *Provisioner) Exclusively(decide func() error) error {
	p.round.Lock()
	defer p.round.Unlock()
	return decide()
}

// targets works out each open pool's warm capacity now. A pool whose
// capacity schedules cannot be read keeps its own values, and says why.
func (p *Provisioner) targets(ctx context.Context, pools map[string]*v1alpha1.NodePool) map[string]warmcapacity.Target {
	targets := make(map[string]warmcapacity.Target, len(pools))
	for name, pool := range pools {
		target, err := p.WarmCapacity.Target(pool)
		if err != nil {
			log.FromContext(ctx).Info("capacity schedules ignored", "nodePool", name, "reason", err.Error())
		}
		targets[name] = target
	}
	return targets
}

// poolFailed leaves a pool out of the next rounds for its backoff and tells
// why, on the pool's events and in the log.
func (p *Provisioner) poolFailed(ctx context.Context, pool *v1alpha1.NodePool, err error) {
	p.usability().Failed(ctx, pool, err)
}

// usability is the Pools the provisioner reads pools' shapes and backoff
// from.
func (p *Provisioner) usability() *poolusability.Pools {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pools == nil {
		p.pools = p.Pools
		if p.pools == nil {
			p.pools = &poolusability.Pools{Providers: p.Providers, Kube: p.Kube, Clock: p.Clock, Recorder: p.Recorder}
		}
	}
	return p.pools
}

func (p *Provisioner) poolWait() time.Duration {
	if p.PoolWait > 0 {
		return p.PoolWait
	}
	return DefaultPoolWait
}

// offered returns what the pool's provider offers. The call runs on its
// own, under the provider call timeout, one at a time per pool; the round
// waits for it at most the pool wait, then goes on with the shapes the
// provider last named for this generation of the pool. A call whose answer
// no round waited for records its own failure, so the pool is backed off
// as if a round had seen it.
func (p *Provisioner) offered(ctx context.Context, pool *v1alpha1.NodePool) (poolusability.Offer, error) {
	return p.usability().Offer(ctx, pool, poolusability.Read{Wait: p.poolWait(), CallTimeout: p.callTimeout()})
}

func (p *Provisioner) callTimeout() time.Duration {
	if p.ProviderCallTimeout > 0 {
		return p.ProviderCallTimeout
	}
	return DefaultProviderCallTimeout
}

func solve(ctx context.Context, input scheduling.Input) (scheduling.Result, error) {
	simulator, err := scheduling.New(ctx, input.Cluster)
	if err != nil {
		return scheduling.Result{}, err
	}
	return simulator.Solve(ctx, input.Pending)
}

// Resolve returns a pool usability that resolves every pool afresh on each
// call, with no memory of earlier ones: no backoff, no last good shapes.
// Disruption reads the cluster picture with it (the operator passes it),
// as it did through a throw-away Provisioner before.
func Resolve(kube client.Client, resolver ProviderResolver, capacity CapacityChecker) clusterstate.PoolUsability {
	return freshPools{kube: kube, resolver: resolver, capacity: capacity}
}

type freshPools struct {
	kube     client.Client
	resolver ProviderResolver
	capacity CapacityChecker
}

func (f freshPools) UsablePools(ctx context.Context, pools []v1alpha1.NodePool, claimsByPool map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool) {
	p := &Provisioner{Kube: f.kube, Providers: f.resolver, Capacity: f.capacity}
	return p.UsablePools(ctx, pools, claimsByPool)
}

// gather reads the round's cluster picture (clusterstate.Cluster) with
// this provisioner's pool usability, and returns its scheduling input and
// the open pools by name.
func (p *Provisioner) gather(ctx context.Context) (scheduling.Input, map[string]*v1alpha1.NodePool, error) {
	picture, err := p.picture(ctx)
	if err != nil {
		return scheduling.Input{}, nil, err
	}
	return picture.Input, picture.Open, nil
}

// picture reads the round's cluster picture with this provisioner's pool
// usability and own writes.
func (p *Provisioner) picture(ctx context.Context) (*clusterstate.Picture, error) {
	return (&clusterstate.Cluster{Kube: p.Kube, Objects: p.Objects, Writes: p.Writes, Nominations: p.Nominations}).Picture(ctx, p)
}

// UsablePools works out, concurrently and under the provider call timeout,
// the scheduling pool of every pool that can provision now (open). A pool
// that cannot is backed off and left out; one still backed off is left out
// without asking its provider again. A pool left out only because its
// provider failed is still simulated from its last good picture with every
// shape closed (closed), so the machines it is booting count and are not
// bought twice elsewhere; it gets no new claims.
func (p *Provisioner) UsablePools(ctx context.Context, pools []v1alpha1.NodePool, claimsByPool map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	open, closed = map[string]scheduling.Pool{}, map[string]scheduling.Pool{}
	leftOut := func(pool *v1alpha1.NodePool, err error) {
		if poolusability.IsTemplateInvalid(err) {
			return
		}
		if last, ok := p.lastGood(pool); ok {
			mu.Lock()
			closed[pool.Name] = closedPool(last, pool, claimsByPool[pool.Name])
			mu.Unlock()
		}
	}
	for i := range pools {
		pool := &pools[i]
		if !pool.DeletionTimestamp.IsZero() {
			continue
		}
		if err := p.usability().Waiting(pool); err != nil {
			leftOut(pool, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithTimeout(ctx, p.callTimeout())
			defer cancel()
			schedulingPool, err := p.schedulingPool(callCtx, pool, claimsByPool[pool.Name])
			if err == nil {
				err = p.Templates.Check(callCtx, pool, schedulingPool.Shapes)
			}
			var slow *SlowProviderError
			if errors.As(err, &slow) {
				// Not a failure (yet): the call goes on, and records its
				// own if it fails.
				log.FromContext(ctx).V(1).Info("pool sits the round out", "nodePool", pool.Name, "reason", err.Error())
				leftOut(pool, err)
				return
			}
			if err != nil {
				p.poolFailed(ctx, pool, err)
				leftOut(pool, err)
				return
			}
			p.usability().Succeeded(pool)
			p.remember(schedulingPool)
			mu.Lock()
			open[pool.Name] = schedulingPool
			mu.Unlock()
		}()
	}
	wg.Wait()
	return open, closed
}

// remember keeps a pool's last good scheduling picture.
func (p *Provisioner) remember(pool scheduling.Pool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastGoodPools == nil {
		p.lastGoodPools = map[string]scheduling.Pool{}
	}
	p.lastGoodPools[pool.NodePool.Name] = pool
}

// lastGood returns the pool's last good picture, if it was taken of the
// pool's current generation.
func (p *Provisioner) lastGood(pool *v1alpha1.NodePool) (scheduling.Pool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.lastGoodPools[pool.Name]
	if !ok || last.NodePool.UID != pool.UID || last.NodePool.Generation != pool.Generation {
		return scheduling.Pool{}, false
	}
	return last, true
}

// closedPool is last with the pool's current claims and every shape
// closed to new nodes.
func closedPool(last scheduling.Pool, pool *v1alpha1.NodePool, claims []*v1alpha1.NodeClaim) scheduling.Pool {
	closed := last
	closed.NodePool = pool
	nodes, resources := poolclaims.InUseOf(claims)
	closed.InUse = scheduling.Usage{Nodes: int64(nodes), CPU: resources[corev1.ResourceCPU], Memory: resources[corev1.ResourceMemory]}
	closed.Unavailable = nil
	for _, shape := range last.Shapes.Fixed {
		closed.Unavailable = append(closed.Unavailable, shape.Name)
	}
	if last.Shapes.Flexible != nil {
		closed.Unavailable = append(closed.Unavailable, "flexible")
	}
	return closed
}

func (p *Provisioner) schedulingPool(ctx context.Context, pool *v1alpha1.NodePool, claims []*v1alpha1.NodeClaim) (scheduling.Pool, error) {
	offer, err := p.offered(ctx, pool)
	if err != nil {
		return scheduling.Pool{}, err
	}
	offered, providerZones, shapes := offer.Offered, offer.Zones, offer.Shapes
	if offer.ShapesErr != nil {
		return scheduling.Pool{}, &poolusability.TemplateInvalidError{Err: offer.ShapesErr}
	}
	var nodeProvider v1alpha1.NodeProvider
	if err := p.Kube.Get(ctx, client.ObjectKey{Name: pool.Spec.ProviderRef.Name}, &nodeProvider); err != nil {
		return scheduling.Pool{}, err
	}
	nodes, resources := poolclaims.InUseOf(claims)
	shapeNames := make([]string, 0, len(offered))
	for _, shape := range offered {
		shapeNames = append(shapeNames, shape.Name)
	}
	zones := zonesOf(&nodeProvider)
	if len(providerZones) > 0 {
		zones = providerZones
	}
	zones, unavailable, unavailableIn := p.Capacity.Narrow(pool.Name, zones, shapeNames)
	free, noneFree := p.countInventory(pool, offered, claims)
	p.Decisions.RecordPoolOffer(decisions.PoolOffer{Pool: pool.Name, Shapes: offerShapes(offered), Zones: zones, Unavailable: unavailable, UnavailableIn: unavailableIn})
	return scheduling.Pool{
		NodePool: pool,
		Shapes:   shapes,
		Zones:    zones,
		InUse: scheduling.Usage{
			Nodes: int64(nodes), CPU: resources[corev1.ResourceCPU], Memory: resources[corev1.ResourceMemory],
		},
		Unavailable:   unavailable,
		UnavailableIn: unavailableIn,
		NoneFree:      noneFree,
		Free:          free,
	}, nil
}

// countInventory records how many machines of each inventory shape (a
// bare-metal server powered on for a claim) the pool may still claim: the
// provider's free ones less the pool's claims of the shape that hold none
// yet (not launched). It returns, by shape, how many the round may open
// (the packer opens no more) and the shapes with none left, which the
// round does not pack.
func (p *Provisioner) countInventory(pool *v1alpha1.NodePool, offered []provider.Shape, claims []*v1alpha1.NodeClaim) (map[string]int, map[string]string) {
	free := map[string]int{}
	var noneFree map[string]string
	for _, shape := range offered {
		if !shape.Inventory {
			continue
		}
		left := shape.Available
		for _, claim := range claims {
			if claim.Spec.Shape.Name == shape.Name && claim.Status.ProviderID == "" && claim.DeletionTimestamp.IsZero() {
				left--
			}
		}
		free[shape.Name] = max(left, 0)
		if left <= 0 {
			if noneFree == nil {
				noneFree = map[string]string{}
			}
			why := shape.Taken
			if shape.Available > 0 {
				why = "the free ones are claimed by claims not launched yet"
			}
			noneFree[shape.Name] = why
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[string]map[string]int{}
	}
	if len(free) == 0 {
		delete(p.free, pool.Name)
	} else {
		p.free[pool.Name] = free
	}
	return maps.Clone(free), noneFree
}

// takeInventory reports whether the round may claim one more machine of
// the shape, and counts it taken. The packer opens no more nodes of a
// shape than Pool.Free allows, but a node that outgrows its shape onto one
// whose machines the round has given out keeps it; such a node waits for
// the next round, which packs its pods on what is left.
func (p *Provisioner) takeInventory(pool, shape string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	left, counted := p.free[pool][shape]
	if !counted {
		return true
	}
	if left <= 0 {
		return false
	}
	p.free[pool][shape] = left - 1
	return true
}

// createClaims writes one claim per new node, or wakes the sleeping claim
// the node is (asleep, by name, as the round's picture had them), and
// tells its pods. A node opened only for headroom is made with reason
// "headroom". A pool whose claim is refused gets no more claims this round
// and is backed off; the other pools' claims are still written. It returns
// why the wakes that did not happen failed (a claim changed since the
// round read it, most often).
func (p *Provisioner) createClaims(ctx context.Context, pools map[string]*v1alpha1.NodePool, asleep map[string]*v1alpha1.NodeClaim, result scheduling.Result) error {
	var failedWakes []error
	events := 0
	refused := map[string]bool{}
	for _, newNode := range result.NewNodes {
		pool, ok := pools[newNode.Pool]
		if !ok || refused[pool.Name] {
			continue
		}
		var workload []*corev1.Pod
		for _, pod := range newNode.Pods {
			if !warmcapacity.IsPlaceholder(pod) {
				workload = append(workload, pod)
			}
		}
		if newNode.Wake != "" {
			woken, err := p.wakeFor(ctx, pool, asleep[newNode.Wake], newNode, workload, &events)
			if err != nil {
				failedWakes = append(failedWakes, err)
			}
			if woken {
				continue
			}
			// The claim is gone: the pods get a new machine instead.
		}
		reason := metrics.ReasonProvisioning
		if len(workload) == 0 {
			reason = metrics.ReasonHeadroom
		}
		if !p.takeInventory(pool.Name, newNode.Shape.Name) {
			log.FromContext(ctx).Info("no machine of the shape is free; its pods wait for the next round", "nodePool", pool.Name, "shape", newNode.Shape.Name, "pods", len(workload))
			continue
		}
		if p.DryRun {
			p.recordWouldCreate(pool, newNode, workload, &events)
			continue
		}
		claim, err := p.createClaim(ctx, pool, newNode.Shape, newNode.TotalRequests(), newNode.Requirements, reason)
		if err != nil {
			refused[pool.Name] = true
			p.poolFailed(ctx, pool, err)
			continue
		}
		p.Nominations.Plan(claim.Name, workload)
		log.FromContext(ctx).Info("created claim", "nodeClaim", claim.Name, "nodePool", pool.Name, "shape", newNode.Shape.Name, "zone", newNode.Zone,
			"pods", len(workload), "headroomPods", len(newNode.Pods)-len(workload), "reason", reason)
		for _, pod := range workload {
			if events++; events > maxPodEvents {
				break
			}
			p.Recorder.Eventf(pod, claim, corev1.EventTypeNormal, "Nominated", "Provision",
				"pod should schedule on a new node of claim %s (pool %s, shape %s)", claim.Name, pool.Name, newNode.Shape.Name)
		}
		for _, pod := range workload {
			p.Decisions.RecordPod(decisions.PodRecord{
				Namespace: pod.Namespace, Name: pod.Name, Time: p.now(), Outcome: decisions.PodNewNode,
				Pool: pool.Name, Shape: newNode.Shape.Name, Zone: newNode.Zone, NodeClaim: claim.Name,
			})
			p.PodLatency.Provisioned(pod, pool.Name)
		}
	}
	return errors.Join(failedWakes...)
}

// planOnInFlight records the pods a round placed on claims still booting
// as planned there: the latest round's plan is the one nominated.
func (p *Provisioner) planOnInFlight(inFlight []scheduling.InFlight, placements []scheduling.Placement) {
	if p.Nominations == nil || p.DryRun || len(inFlight) == 0 {
		return
	}
	booting := make(map[string]bool, len(inFlight))
	for _, claim := range inFlight {
		booting[claim.Name] = true
	}
	byClaim := map[string][]*corev1.Pod{}
	for _, placement := range placements {
		if booting[placement.Node] && !warmcapacity.IsPlaceholder(placement.Pod) {
			byClaim[placement.Node] = append(byClaim[placement.Node], placement.Pod)
		}
	}
	for claim, pods := range byClaim {
		p.Nominations.PlanOnBooting(claim, pods)
	}
}

// recordWouldCreate records and tells, in dry-run, the node a real round
// would have bought.
func (p *Provisioner) recordWouldCreate(pool *v1alpha1.NodePool, newNode scheduling.NewNode, workload []*corev1.Pod, events *int) {
	for _, pod := range workload {
		p.Decisions.RecordPod(decisions.PodRecord{
			Namespace: pod.Namespace, Name: pod.Name, Time: p.now(), Outcome: decisions.PodNewNode,
			Pool: pool.Name, Shape: newNode.Shape.Name, Zone: newNode.Zone,
		})
		if *events++; *events > maxPodEvents {
			continue
		}
		p.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "WouldNominate", "Provision", "%s",
			decisions.EventNote(true, fmt.Sprintf("pod would schedule on a new node (pool %s, shape %s); no claim was created", pool.Name, newNode.Shape.Name)))
	}
}

func offerShapes(offered []provider.Shape) []decisions.OfferShape {
	out := make([]decisions.OfferShape, 0, len(offered))
	for _, shape := range offered {
		out = append(out, decisions.OfferShape{Name: shape.Name, Capacity: shape.Capacity, Price: shape.Price})
	}
	return out
}

func (p *Provisioner) now() time.Time {
	if p.Clock != nil {
		return p.Clock.Now()
	}
	return time.Now()
}

func (p *Provisioner) createClaim(ctx context.Context, pool *v1alpha1.NodePool, shape scheduling.Shape, requests corev1.ResourceList, requirements []corev1.NodeSelectorRequirement, reason string) (*v1alpha1.NodeClaim, error) {
	claim := poolclaims.New(pool, shape, requests, requirements)
	if err := p.Kube.Create(ctx, claim); err != nil {
		err = fmt.Errorf("creating claim for pool %s shape %s: %w", pool.Name, shape.Name, err)
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			err = &poolusability.TemplateInvalidError{Err: err}
		}
		return nil, err
	}
	p.Writes.Created(claim)
	metrics.NodeClaimsCreated.WithLabelValues(pool.Name, reason).Inc()
	return claim, nil
}

// reportUnschedulable tells each real pod that nothing can hold it. Headroom
// that fits nowhere (the pool at its limits) is only logged: it has no
// object to tell.
func (p *Provisioner) reportUnschedulable(ctx context.Context, unschedulable []scheduling.Unschedulable) {
	events, workload := 0, 0
	headroom := map[string]int{}
	for _, u := range unschedulable {
		if warmcapacity.IsPlaceholder(u.Pod) {
			headroom[warmcapacity.Owner(u.Pod)]++
			continue
		}
		workload++
		p.Decisions.RecordPod(decisions.PodRecord{
			Namespace: u.Pod.Namespace, Name: u.Pod.Name, Time: p.now(), Outcome: decisions.PodUnschedulable,
			Reason: u.Reason, Pools: decisions.Refusals(u.Pools),
		})
		if events++; events > maxPodEvents {
			continue
		}
		p.Recorder.Eventf(u.Pod, nil, corev1.EventTypeWarning, "FailedProvisioning", "Provision", "%s", decisions.EventNote(p.DryRun, "no pool can hold the pod: "+u.Reason))
	}
	metrics.PodsUnschedulable.Set(float64(workload))
	for owner, n := range headroom {
		log.FromContext(ctx).V(1).Info("headroom does not fit", "for", owner, "headroomPods", n)
	}
}

// keepWarmCapacity tops every pool up to its minNodes now with its
// cheapest shape, within its limits, and returns the claims it made as
// in flight for the rest of the round.
func (p *Provisioner) keepWarmCapacity(ctx context.Context, pools map[string]*v1alpha1.NodePool, schedulingPools []scheduling.Pool, targets map[string]warmcapacity.Target) []scheduling.InFlight {
	var made []scheduling.InFlight
	for i := range schedulingPools {
		schedulingPool := &schedulingPools[i]
		pool, ok := pools[schedulingPool.NodePool.Name]
		if !ok {
			continue // closed this round
		}
		minNodes := targets[pool.Name].MinNodes
		missing := int64(minNodes) - schedulingPool.InUse.Nodes
		if missing <= 0 || p.DryRun {
			continue
		}
		shape, ok := cheapest(*schedulingPool)
		if !ok {
			continue
		}
		for range missing {
			claim, err := p.createClaim(ctx, pool, shape, nil, nil, metrics.ReasonMinNodes)
			if err != nil {
				p.poolFailed(ctx, pool, err)
				break
			}
			// The pool holds one more node now: the round's limits count it.
			schedulingPool.InUse.Nodes++
			schedulingPool.InUse.CPU.Add(shape.CPU)
			schedulingPool.InUse.Memory.Add(shape.Memory)
			made = append(made, scheduling.InFlight{Name: claim.Name, Pool: pool.Name, Shape: shape})
			log.FromContext(ctx).Info("created claim for warm capacity", "nodeClaim", claim.Name, "nodePool", pool.Name, "minNodes", minNodes)
		}
	}
	return made
}

func cheapest(pool scheduling.Pool) (scheduling.Shape, bool) {
	shapes := pool.Shapes.Fixed
	if pool.Shapes.Flexible != nil {
		shapes = pool.Shapes.Flexible.Expand()
	}
	return scheduling.Cheapest(shapes)
}

// Provisionable says whether a pod is one provisioning should find room
// for (clusterstate.Provisionable).
func Provisionable(pod *corev1.Pod) bool { return clusterstate.Provisionable(pod) }

// zonesOf lists the zones a NodeProvider can put machines in, for template
// nodes' zone labels.
func zonesOf(nodeProvider *v1alpha1.NodeProvider) []string {
	switch {
	case nodeProvider.Spec.Simulated != nil:
		return nodeProvider.Spec.Simulated.Zones
	case nodeProvider.Spec.Cloudscale != nil:
		return nodeProvider.Spec.Cloudscale.ZoneNames()
	}
	return nil
}
