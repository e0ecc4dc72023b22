// Package provisioning turns pending pods into NodeClaims. A batcher decides
// when, the provisioner gathers the cluster as it is (nodes, their pods,
// claims still booting, pools and their shapes), the scheduling package
// decides in memory which new nodes would hold the pods, and the provisioner
// writes one claim per new node and tells each pod where it is going, or
// why it can go nowhere.
package provisioning

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
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

// ObjectSource gives every pod and node of the cluster, read only, and
// the nodes with their pods as the scheduling simulation starts from them
// (nil: built from the pods each time).
type ObjectSource interface {
	Pods() []*corev1.Pod
	Nodes() []*corev1.Node
	Existing() *scheduling.Existing
}

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

	mu            sync.Mutex
	lastGoodPools map[string]scheduling.Pool
	pools         *poolusability.Pools
}

// SlowProviderError: a pool's provider named no shapes within the pool
// wait, and had named none before; the pool sits the round out.
type SlowProviderError = poolusability.SlowProviderError

// Provision runs one round: it writes claims for pools below their
// minNodes, then for pending pods and for headroom that does not fit.
func (p *Provisioner) Provision(ctx context.Context) error {
	logger := log.FromContext(ctx)
	input, pools, err := p.gather(ctx)
	if err != nil {
		return err
	}
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
	p.createClaims(ctx, pools, result)
	p.reportUnschedulable(ctx, result.Unschedulable)
	return nil
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

// ClusterFromCache builds the scheduling input from the informer caches the
// way a provisioning round sees the cluster (nodes leaving are left out,
// claims still booting are in flight, pods waiting for a node are
// Pending), with the pools that can provision by name. Disruption decides
// on the same picture, so scale-down never disagrees with scale-up.
func ClusterFromCache(ctx context.Context, kube client.Client, resolver ProviderResolver, capacity CapacityChecker) (scheduling.Input, map[string]*v1alpha1.NodePool, error) {
	return ClusterFromObjects(ctx, kube, nil, resolver, capacity)
}

// ClusterFromObjects is ClusterFromCache with the pods and nodes read from
// objects (nil lists them).
func ClusterFromObjects(ctx context.Context, kube client.Client, objects ObjectSource, resolver ProviderResolver, capacity CapacityChecker) (scheduling.Input, map[string]*v1alpha1.NodePool, error) {
	p := &Provisioner{Kube: kube, Objects: objects, Providers: resolver, Capacity: capacity}
	return p.gather(ctx)
}

// gather builds the scheduling input from the informer caches.
func (p *Provisioner) gather(ctx context.Context) (scheduling.Input, map[string]*v1alpha1.NodePool, error) {
	var input scheduling.Input
	// Pods, nodes, claims, pools and DaemonSets are the cache's own
	// objects, not copies: at ten thousand pods the copies were most of a
	// round's cost, and nothing here or in scheduling writes to them (a
	// node that must look different is copied first, see withClaimLabels;
	// a new claim takes nothing of its pool's by reference, see NewClaim).
	pods, nodes, err := p.podsAndNodes(ctx)
	if err != nil {
		return input, nil, err
	}
	if p.Objects != nil {
		input.Existing = p.Objects.Existing()
	}
	var claimList v1alpha1.NodeClaimList
	if err := p.Kube.List(ctx, &claimList, client.UnsafeDisableDeepCopy); err != nil {
		return input, nil, fmt.Errorf("listing claims: %w", err)
	}
	var poolList v1alpha1.NodePoolList
	if err := p.Kube.List(ctx, &poolList, client.UnsafeDisableDeepCopy); err != nil {
		return input, nil, fmt.Errorf("listing pools: %w", err)
	}
	var daemonSets appsv1.DaemonSetList
	if err := p.Kube.List(ctx, &daemonSets, client.UnsafeDisableDeepCopy); err != nil {
		return input, nil, fmt.Errorf("listing DaemonSets: %w", err)
	}

	// Nodes whose claim is going away, and nodes being drained, hold
	// nothing new.
	leaving := map[string]bool{}
	claimOfNode := newClaimIndex(claimList.Items)
	for i := range claimList.Items {
		claim := &claimList.Items[i]
		if claim.Status.NodeName != "" && !claim.DeletionTimestamp.IsZero() {
			leaving[claim.Status.NodeName] = true
		}
	}
	for _, node := range nodes {
		if leaving[node.Name] || !node.DeletionTimestamp.IsZero() || hasDisruptedTaint(node) {
			continue
		}
		if claim := claimOfNode.find(node); claim != nil {
			node = withoutStartupTaints(withClaimLabels(node, claim), claim)
		}
		input.Nodes = append(input.Nodes, node)
	}
	input.Pods = make([]*corev1.Pod, 0, len(pods))
	for _, pod := range pods {
		switch {
		case pod.Spec.NodeName != "":
			input.Pods = append(input.Pods, pod)
		case Provisionable(pod):
			input.Pending = append(input.Pending, pod)
		}
	}
	for i := range daemonSets.Items {
		input.DaemonSets = append(input.DaemonSets, &daemonSets.Items[i])
	}

	// By pointer: a claim is a kilobyte, and a round reads every one.
	claimsByPool := map[string][]*v1alpha1.NodeClaim{}
	for i := range claimList.Items {
		claim := &claimList.Items[i]
		claimsByPool[claim.Spec.NodePoolRef.Name] = append(claimsByPool[claim.Spec.NodePoolRef.Name], claim)
	}
	open, closed := p.usablePools(ctx, poolList.Items, claimsByPool)
	simulated := map[string]bool{}
	for i := range poolList.Items {
		name := poolList.Items[i].Name
		if schedulingPool, ok := open[name]; ok {
			input.Pools = append(input.Pools, schedulingPool)
			simulated[name] = true
		} else if schedulingPool, ok := closed[name]; ok {
			input.Pools = append(input.Pools, schedulingPool)
			simulated[name] = true
		}
	}
	for i := range claimList.Items {
		claim := &claimList.Items[i]
		if !claim.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
			continue
		}
		if !simulated[claim.Spec.NodePoolRef.Name] {
			// Its pool is gone or skipped this round: the claim cannot be
			// simulated as a node of it, and must not stop the others.
			log.FromContext(ctx).V(1).Info("in-flight claim left out: its pool is not provisioning", "nodeClaim", claim.Name, "nodePool", claim.Spec.NodePoolRef.Name)
			continue
		}
		input.InFlight = append(input.InFlight, scheduling.InFlight{
			Name: claim.Name,
			Pool: claim.Spec.NodePoolRef.Name,
			Shape: scheduling.Shape{
				Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory,
			},
			Zone: zoneOf(claim.Spec.Requirements.NodeSelector),
		})
	}
	// Only open pools get claims.
	byName := map[string]*v1alpha1.NodePool{}
	for name, schedulingPool := range open {
		byName[name] = schedulingPool.NodePool
	}
	return input, byName, nil
}

// podsAndNodes reads every pod and node, from Objects when set.
func (p *Provisioner) podsAndNodes(ctx context.Context) ([]*corev1.Pod, []*corev1.Node, error) {
	return PodsAndNodes(ctx, p.Objects, p.Kube)
}

// PodsAndNodes reads every pod and node from objects when set, else
// through reader without deep copies (the kubectl plugin's read-only
// client, tests). What it returns is read only either way.
func PodsAndNodes(ctx context.Context, objects ObjectSource, reader client.Reader) ([]*corev1.Pod, []*corev1.Node, error) {
	if objects != nil {
		return objects.Pods(), objects.Nodes(), nil
	}
	var podList corev1.PodList
	if err := reader.List(ctx, &podList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	var nodeList corev1.NodeList
	if err := reader.List(ctx, &nodeList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods := make([]*corev1.Pod, len(podList.Items))
	for i := range podList.Items {
		pods[i] = &podList.Items[i]
	}
	nodes := make([]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	return pods, nodes, nil
}

// usablePools works out, concurrently and under the provider call timeout,
// the scheduling pool of every pool that can provision now (open). A pool
// that cannot is backed off and left out; one still backed off is left out
// without asking its provider again. A pool left out only because its
// provider failed is still simulated from its last good picture with every
// shape closed (closed), so the machines it is booting count and are not
// bought twice elsewhere; it gets no new claims.
func (p *Provisioner) usablePools(ctx context.Context, pools []v1alpha1.NodePool, claimsByPool map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool) {
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
	}, nil
}

// createClaims writes one claim per new node and tells its pods. A node
// opened only for headroom is made with reason "headroom". A pool whose
// claim is refused gets no more claims this round and is backed off; the
// other pools' claims are still written.
func (p *Provisioner) createClaims(ctx context.Context, pools map[string]*v1alpha1.NodePool, result scheduling.Result) {
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
		reason := metrics.ReasonProvisioning
		if len(workload) == 0 {
			reason = metrics.ReasonHeadroom
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
			headroom[u.Pod.Labels[v1alpha1.LabelNodePool]]++
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
	for pool, n := range headroom {
		log.FromContext(ctx).V(1).Info("headroom does not fit", "nodePool", pool, "headroomPods", n)
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
// for: the scheduler found no node for it, it is not a DaemonSet's (those
// follow nodes), and nothing is already arranged for it.
func Provisionable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.Status.NominatedNodeName != "" || !pod.DeletionTimestamp.IsZero() {
		return false
	}
	if scheduling.Terminated(pod) || scheduling.BelongsToNode(pod) {
		return false
	}
	for _, condition := range pod.Status.Conditions {
		if condition.Type == corev1.PodScheduled {
			return condition.Status == corev1.ConditionFalse && condition.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// claimIndex finds the live claim a node belongs to, the way registration
// will match them: by providerID, else by name.
type claimIndex struct {
	byProviderID map[string]*v1alpha1.NodeClaim
	byName       map[string]*v1alpha1.NodeClaim
}

func newClaimIndex(claims []v1alpha1.NodeClaim) claimIndex {
	index := claimIndex{byProviderID: make(map[string]*v1alpha1.NodeClaim, len(claims)), byName: make(map[string]*v1alpha1.NodeClaim, 2*len(claims))}
	for i := range claims {
		claim := &claims[i]
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		if claim.Status.ProviderID != "" {
			index.byProviderID[claim.Status.ProviderID] = claim
		}
		index.byName[claim.Name] = claim
		if claim.Status.NodeName != "" {
			index.byName[claim.Status.NodeName] = claim
		}
	}
	return index
}

func (c claimIndex) find(node *corev1.Node) *v1alpha1.NodeClaim {
	if claim, ok := c.byProviderID[node.Spec.ProviderID]; ok && node.Spec.ProviderID != "" {
		return claim
	}
	return c.byName[node.Name]
}

// withClaimLabels returns the node as it is once its claim has adopted it.
// A node that just registered may not carry the pool's labels yet (its
// kubelet does not set them; the lifecycle controller adds them), while its
// claim already counts as registered: simulated without them, the node
// would look unfit for the pods it was made for, and a second node would be
// bought.
func withClaimLabels(node *corev1.Node, claim *v1alpha1.NodeClaim) *corev1.Node {
	if node.Labels[v1alpha1.LabelNodeClaim] == claim.Name {
		return node
	}
	adopted := node.DeepCopy()
	if adopted.Labels == nil {
		adopted.Labels = map[string]string{}
	}
	for key, value := range claim.Labels {
		if key != v1alpha1.LabelNodeProvider {
			adopted.Labels[key] = value
		}
	}
	adopted.Labels[v1alpha1.LabelNodePool] = claim.Spec.NodePoolRef.Name
	adopted.Labels[v1alpha1.LabelNodeClaim] = claim.Name
	return adopted
}

// ephemeralTaints are put on every node while it starts and taken off
// once it is ready; pods do not tolerate them, and need not.
var ephemeralTaints = []corev1.Taint{
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
	// k8s.io/cloud-provider's TaintExternalCloudProvider.
	{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
}

// withoutStartupTaints returns a node whose claim is not Initialized yet
// as it will be once it is: without its startup taints and the taints every
// starting node carries, as Karpenter simulates it. Simulated with them, a
// node still starting looks unfit for the pods it was made for, and every
// batch while it starts buys nodes again, which in a large scale-up is
// several per cent of nodes too many.
func withoutStartupTaints(node *corev1.Node, claim *v1alpha1.NodeClaim) *corev1.Node {
	if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) || len(node.Spec.Taints) == 0 {
		return node
	}
	starting := func(taint corev1.Taint) bool {
		for _, startup := range append(claim.Spec.StartupTaints, ephemeralTaints...) {
			if startup.MatchTaint(&taint) {
				return true
			}
		}
		return false
	}
	if !slices.ContainsFunc(node.Spec.Taints, starting) {
		return node
	}
	// A shallow copy with taints of its own: the node may be the cache's.
	started := *node
	started.Spec.Taints = slices.DeleteFunc(slices.Clone(node.Spec.Taints), starting)
	return &started
}

func hasDisruptedTaint(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == v1alpha1.TaintDisrupted {
			return true
		}
	}
	return false
}

func zoneOf(requirements []corev1.NodeSelectorRequirement) string {
	for _, requirement := range requirements {
		if requirement.Key == corev1.LabelTopologyZone && requirement.Operator == corev1.NodeSelectorOpIn && len(requirement.Values) == 1 {
			return requirement.Values[0]
		}
	}
	return ""
}

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
