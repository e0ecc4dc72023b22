package externalgrpc

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// cacheWaitLimit bounds how long a scaling call waits for the cache to see
// its own writes, well inside cluster-autoscaler's 5 s deadline.
const cacheWaitLimit = 2 * time.Second

// cloudProvider answers cluster-autoscaler's CloudProvider calls from the
// cache. Calls that change a group hold that group's lock and return only
// once the cache has seen their writes, so the next call (a concurrent
// increase, the next loop's target size) counts them.
type cloudProvider struct {
	protos.UnimplementedCloudProviderServer

	// kube reads through the manager's cache and writes to the API server.
	kube     client.Client
	shapes   *shapeCache
	gpuLabel string
	// writes waits for the cache to show the calls' writes.
	writes *clusterstate.Writes

	locks sync.Map // pool name → *sync.Mutex
}

func (c *cloudProvider) lock(pool string) func() {
	value, _ := c.locks.LoadOrStore(pool, &sync.Mutex{})
	mu := value.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// NodeGroups lists one group per shape of every pool with limits.nodes.
// A pool whose shapes cannot be resolved is left out, and logged: one
// broken pool must not hide the others.
func (c *cloudProvider) NodeGroups(ctx context.Context, _ *protos.NodeGroupsRequest) (*protos.NodeGroupsResponse, error) {
	var pools v1alpha1.NodePoolList
	if err := c.kube.List(ctx, &pools); err != nil {
		return nil, internal(fmt.Errorf("listing NodePools: %w", err))
	}
	response := &protos.NodeGroupsResponse{}
	for i := range pools.Items {
		pool := &pools.Items[i]
		if !isGroupPool(pool) {
			continue
		}
		shapes, err := c.shapes.get(ctx, pool)
		if err != nil {
			log.FromContext(ctx).Error(err, "serving no node groups for the pool", "nodePool", pool.Name)
			continue
		}
		usage, err := c.usageOf(ctx, pool.Name)
		if err != nil {
			return nil, internal(err)
		}
		for _, shape := range shapes.served {
			g := &group{pool: pool, shape: shape, shapes: shapes}
			response.NodeGroups = append(response.NodeGroups, g.message(usage))
		}
	}
	sort.Slice(response.NodeGroups, func(i, j int) bool { return response.NodeGroups[i].Id < response.NodeGroups[j].Id })
	return response, nil
}

// NodeGroupForNode names the group of a node: its pool and shape from its
// claim (by providerID, placeholder id or the Node's claim label), else
// from the Node's pool and instance-type labels. A node that is not ours,
// or whose pool or shape is not served, gets the empty group: that is an
// answer, not an error.
func (c *cloudProvider) NodeGroupForNode(ctx context.Context, request *protos.NodeGroupForNodeRequest) (*protos.NodeGroupForNodeResponse, error) {
	none := &protos.NodeGroupForNodeResponse{NodeGroup: &protos.NodeGroup{}}
	node := request.GetNode()
	if node == nil {
		return none, nil
	}
	poolName, shapeName := node.GetLabels()[v1alpha1.LabelNodePool], node.GetLabels()[corev1.LabelInstanceTypeStable]
	if poolName == "" || shapeName == "" {
		found, err := c.ownerOf(ctx, node)
		if err != nil {
			return nil, internal(err)
		}
		if found.foreign || found.group() == "" {
			return none, nil
		}
		poolName, shapeName = found.pool, found.shape
	}
	g, err := c.group(ctx, poolName, shapeName)
	if err != nil {
		return nil, internal(err)
	}
	if g == nil {
		return none, nil
	}
	usage, err := c.usageOf(ctx, poolName)
	if err != nil {
		return nil, internal(err)
	}
	return &protos.NodeGroupForNodeResponse{NodeGroup: g.message(usage)}, nil
}

// NodeGroupTargetSize counts the group's claims not being deleted.
func (c *cloudProvider) NodeGroupTargetSize(ctx context.Context, request *protos.NodeGroupTargetSizeRequest) (*protos.NodeGroupTargetSizeResponse, error) {
	g, err := c.mustGroup(ctx, request.GetId())
	if err != nil {
		return nil, err
	}
	claims, err := c.claimsOf(ctx, g.pool.Name)
	if err != nil {
		return nil, internal(err)
	}
	return &protos.NodeGroupTargetSizeResponse{TargetSize: targetSize(ofShape(claims, g.shape.Name))}, nil
}

// NodeGroupIncreaseSize writes delta claims of the group's shape and
// returns: the lifecycle controller launches them.
func (c *cloudProvider) NodeGroupIncreaseSize(ctx context.Context, request *protos.NodeGroupIncreaseSizeRequest) (*protos.NodeGroupIncreaseSizeResponse, error) {
	const operation = "increase"
	id, delta := request.GetId(), request.GetDelta()
	g, err := c.mustGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	pool, shape := g.pool, g.shape
	if delta <= 0 {
		return nil, c.refuse(g.pool.Name, operation, codes.InvalidArgument, "size increase must be positive, got %d", delta)
	}
	// The pool's lock: its limits span its groups.
	defer c.lock(pool.Name)()
	claims, err := c.claimsOf(ctx, pool.Name)
	if err != nil {
		return nil, internal(err)
	}
	poolSize := targetSize(claims)
	if maxSize := *pool.Spec.Limits.Nodes; poolSize+delta > maxSize {
		return nil, c.refuse(g.pool.Name, operation, codes.InvalidArgument, "size increase too large: NodePool %s holds %d nodes, %d more exceed its limit of %d", pool.Name, poolSize, delta, maxSize)
	}
	if err := withinResourceLimits(pool, claims, shape, delta); err != nil {
		return nil, c.refuse(g.pool.Name, operation, codes.InvalidArgument, "%v", err)
	}
	created := make([]string, 0, delta)
	for range delta {
		claim := poolclaims.New(pool, shape, nil, nil)
		if err := c.kube.Create(ctx, claim); err != nil {
			// The claims written so far stay: the target size says so.
			return nil, status.Errorf(codes.Unavailable, "creating claim %d of %d for node group %s: %v", len(created)+1, delta, id, err)
		}
		metrics.NodeClaimsCreated.WithLabelValues(pool.Name, metrics.ReasonExternalGRPC).Inc()
		created = append(created, claim.Name)
	}
	metrics.ExternalGRPCScaleRequests.WithLabelValues(pool.Name, operation, "accepted").Inc()
	log.FromContext(ctx).Info("created claims for cluster-autoscaler", "nodePool", pool.Name, "shape", shape.Name, "nodeClaims", created)
	c.awaitCache(ctx, pool.Name, func(claims []v1alpha1.NodeClaim) bool {
		seen := map[string]bool{}
		for i := range claims {
			seen[claims[i].Name] = true
		}
		for _, name := range created {
			if !seen[name] {
				return false
			}
		}
		return true
	})
	return &protos.NodeGroupIncreaseSizeResponse{}, nil
}

// withinResourceLimits refuses an increase that would take the pool past
// its cpu or memory limit.
func withinResourceLimits(pool *v1alpha1.NodePool, claims []v1alpha1.NodeClaim, shape scheduling.Shape, delta int32) error {
	limits := pool.Spec.Limits
	if limits.CPU == nil && limits.Memory == nil {
		return nil
	}
	cpu, memory := resource.Quantity{}, resource.Quantity{}
	for i := range claims {
		if claims[i].DeletionTimestamp.IsZero() {
			cpu.Add(claims[i].Spec.Shape.CPU)
			memory.Add(claims[i].Spec.Shape.Memory)
		}
	}
	for range delta {
		cpu.Add(shape.CPU)
		memory.Add(shape.Memory)
	}
	if limits.CPU != nil && cpu.Cmp(*limits.CPU) > 0 {
		return fmt.Errorf("%d more nodes of shape %s would take NodePool %s to %s cpu, past its limit of %s", delta, shape.Name, pool.Name, cpu.String(), limits.CPU.String())
	}
	if limits.Memory != nil && memory.Cmp(*limits.Memory) > 0 {
		return fmt.Errorf("%d more nodes of shape %s would take NodePool %s to %s memory, past its limit of %s", delta, shape.Name, pool.Name, memory.String(), limits.Memory.String())
	}
	return nil
}

// NodeGroupDeleteNodes deletes the claims of the nodes, after checking that
// every one belongs to the group: a mapping bug must not delete a machine
// of another pool, so one stranger refuses the whole request.
func (c *cloudProvider) NodeGroupDeleteNodes(ctx context.Context, request *protos.NodeGroupDeleteNodesRequest) (*protos.NodeGroupDeleteNodesResponse, error) {
	const operation = "delete_nodes"
	id := request.GetId()
	g, err := c.mustGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	defer c.lock(g.pool.Name)()
	var doomed []*v1alpha1.NodeClaim
	for _, node := range request.GetNodes() {
		found, err := c.ownerOf(ctx, node)
		if err != nil {
			return nil, internal(err)
		}
		if !found.belongsTo(id) {
			return nil, c.refuse(g.pool.Name, operation, codes.InvalidArgument, "node %s (providerID %q) does not belong to node group %s; nothing was deleted", node.GetName(), node.GetProviderID(), id)
		}
		if found.claim != nil && found.claim.DeletionTimestamp.IsZero() {
			doomed = append(doomed, found.claim)
		}
	}
	if err := c.deleteClaims(ctx, g.pool.Name, doomed); err != nil {
		return nil, err
	}
	metrics.ExternalGRPCScaleRequests.WithLabelValues(g.pool.Name, operation, "accepted").Inc()
	return &protos.NodeGroupDeleteNodesResponse{}, nil
}

// NodeGroupDecreaseTargetSize withdraws claims whose node has not
// registered, newest and least advanced first; it never touches a
// registered node and refuses to withdraw more claims than are waiting.
func (c *cloudProvider) NodeGroupDecreaseTargetSize(ctx context.Context, request *protos.NodeGroupDecreaseTargetSizeRequest) (*protos.NodeGroupDecreaseTargetSizeResponse, error) {
	const operation = "decrease_target"
	id, delta := request.GetId(), request.GetDelta()
	g, err := c.mustGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	if delta >= 0 {
		return nil, c.refuse(g.pool.Name, operation, codes.InvalidArgument, "size decrease must be negative, got %d", delta)
	}
	defer c.lock(g.pool.Name)()
	claims, err := c.claimsOf(ctx, g.pool.Name)
	if err != nil {
		return nil, internal(err)
	}
	claims = ofShape(claims, g.shape.Name)
	var waiting []*v1alpha1.NodeClaim
	for i := range claims {
		if claims[i].DeletionTimestamp.IsZero() && !registered(&claims[i]) {
			waiting = append(waiting, &claims[i])
		}
	}
	if int(-delta) > len(waiting) {
		return nil, c.refuse(g.pool.Name, operation, codes.FailedPrecondition,
			"attempt to delete existing nodes: target size %d, %d registered, decrease by %d would go below the registered count", targetSize(claims), int(targetSize(claims))-len(waiting), -delta)
	}
	// Claims not launched yet cost nothing to withdraw; among equals the
	// newest goes first.
	sort.SliceStable(waiting, func(i, j int) bool {
		a, b := waiting[i], waiting[j]
		if (a.Status.ProviderID == "") != (b.Status.ProviderID == "") {
			return a.Status.ProviderID == ""
		}
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	})
	if err := c.deleteClaims(ctx, g.pool.Name, waiting[:-delta]); err != nil {
		return nil, err
	}
	metrics.ExternalGRPCScaleRequests.WithLabelValues(g.pool.Name, operation, "accepted").Inc()
	return &protos.NodeGroupDecreaseTargetSizeResponse{}, nil
}

// deleteClaims deletes claims (their termination drains and deprovisions
// the nodes) and waits until the cache sees it.
func (c *cloudProvider) deleteClaims(ctx context.Context, id string, claims []*v1alpha1.NodeClaim) error {
	if len(claims) == 0 {
		return nil
	}
	names := make([]string, 0, len(claims))
	for _, claim := range claims {
		// The UID precondition: a claim recreated under the same name since
		// the check is not the one that was checked.
		if err := c.kube.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); err != nil && !apierrors.IsNotFound(err) {
			return status.Errorf(codes.Unavailable, "deleting claim %s of NodePool %s: %v", claim.Name, id, err)
		}
		names = append(names, claim.Name)
	}
	log.FromContext(ctx).Info("deleted claims for cluster-autoscaler", "nodePool", id, "nodeClaims", names)
	c.awaitCache(ctx, id, func(claims []v1alpha1.NodeClaim) bool {
		live := map[string]bool{}
		for i := range claims {
			live[claims[i].Name] = claims[i].DeletionTimestamp.IsZero()
		}
		for _, name := range names {
			if live[name] {
				return false
			}
		}
		return true
	})
	return nil
}

// awaitCache waits, within cacheWaitLimit, until the pool's claims in the
// cache satisfy done. Timing out is no error: the write happened, the
// cache is only late.
func (c *cloudProvider) awaitCache(ctx context.Context, pool string, done func([]v1alpha1.NodeClaim) bool) {
	err := c.writes.Await(ctx, cacheWaitLimit, func(ctx context.Context) (bool, error) {
		claims, err := c.claimsOf(ctx, pool)
		if err != nil {
			return false, nil //nolint:nilerr // keep waiting; the write happened
		}
		return done(claims), nil
	})
	if err != nil {
		log.FromContext(ctx).V(1).Info("cache did not show the writes in time", "nodePool", pool, "error", err.Error())
	}
}

// NodeGroupNodes lists one instance per claim of the group's shape.
// Failed claims stay (their machine deleted) until cluster-autoscaler
// deletes them, so it sees every failure.
func (c *cloudProvider) NodeGroupNodes(ctx context.Context, request *protos.NodeGroupNodesRequest) (*protos.NodeGroupNodesResponse, error) {
	g, err := c.mustGroup(ctx, request.GetId())
	if err != nil {
		return nil, err
	}
	claims, err := c.claimsOf(ctx, g.pool.Name)
	if err != nil {
		return nil, internal(err)
	}
	claims = ofShape(claims, g.shape.Name)
	response := &protos.NodeGroupNodesResponse{Instances: make([]*protos.Instance, 0, len(claims))}
	readyTimeout := DefaultReadyTimeout
	if t := g.pool.Spec.RegistrationTimeout; t != nil && t.Duration > 0 {
		readyTimeout = t.Duration
	}
	now := c.shapes.clock.Now()
	for i := range claims {
		response.Instances = append(response.Instances, instanceOf(&claims[i], now, readyTimeout))
	}
	return response, nil
}

// instanceOf is a claim as cluster-autoscaler sees an instance. A failure
// makes it a failed creation, even while the claim is being deleted: that
// is how cluster-autoscaler learns to back the group off. So does a node
// that registered and has not become Ready within readyTimeout.
func instanceOf(claim *v1alpha1.NodeClaim, now time.Time, readyTimeout time.Duration) *protos.Instance {
	instance := &protos.Instance{Id: instanceID(claim), Status: &protos.InstanceStatus{}}
	failed := instanceError(claim)
	if failed == nil {
		failed = neverReady(claim, now, readyTimeout)
	}
	switch {
	case failed != nil:
		instance.Status.InstanceState = protos.InstanceStatus_instanceCreating
		instance.Status.ErrorInfo = failed
	case !claim.DeletionTimestamp.IsZero():
		instance.Status.InstanceState = protos.InstanceStatus_instanceDeleting
	case registered(claim):
		instance.Status.InstanceState = protos.InstanceStatus_instanceRunning
	default:
		instance.Status.InstanceState = protos.InstanceStatus_instanceCreating
	}
	return instance
}

// NodeGroupTemplateNodeInfo is the scheduling core's template node for
// the group's pool and shape. It is never empty (cluster-autoscaler would
// crash on it): a template that cannot be built is Unimplemented.
func (c *cloudProvider) NodeGroupTemplateNodeInfo(ctx context.Context, request *protos.NodeGroupTemplateNodeInfoRequest) (*protos.NodeGroupTemplateNodeInfoResponse, error) {
	id := request.GetId()
	g, err := c.mustGroup(ctx, id)
	if status.Code(err) == codes.Unavailable {
		return nil, status.Errorf(codes.Unimplemented, "no template node for node group %s: %s", id, status.Convert(err).Message())
	}
	if err != nil {
		return nil, err
	}
	node, err := c.templateNode(ctx, g)
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "no template node for NodePool %s: %v", id, err)
	}
	nodeBytes, err := node.Marshal()
	if err != nil || len(nodeBytes) == 0 {
		return nil, status.Errorf(codes.Unimplemented, "no template node for NodePool %s: encoding: %v", id, err)
	}
	return &protos.NodeGroupTemplateNodeInfoResponse{NodeBytes: nodeBytes}, nil
}

// templateNode builds the Node a new instance of the group would register
// as, in the provider's zone when it has exactly one.
func (c *cloudProvider) templateNode(ctx context.Context, g *group) (*corev1.Node, error) {
	var nodeProvider v1alpha1.NodeProvider
	if err := c.kube.Get(ctx, client.ObjectKey{Name: g.pool.Spec.ProviderRef.Name}, &nodeProvider); err != nil {
		return nil, fmt.Errorf("reading NodeProvider %s: %w", g.pool.Spec.ProviderRef.Name, err)
	}
	return scheduling.TemplateNode(g.pool, g.shape, soleZone(&nodeProvider), g.pool.Name+"-"+g.shape.Name+"-template")
}

// soleZone is the zone every machine of the provider is in, "" when it
// has none or several (a template cannot say which one a node will get).
func soleZone(nodeProvider *v1alpha1.NodeProvider) string {
	switch {
	case nodeProvider.Spec.Cloudscale != nil && len(nodeProvider.Spec.Cloudscale.ZoneNames()) == 1:
		return nodeProvider.Spec.Cloudscale.ZoneNames()[0]
	case nodeProvider.Spec.Simulated != nil && len(nodeProvider.Spec.Simulated.Zones) == 1:
		return nodeProvider.Spec.Simulated.Zones[0]
	}
	return ""
}

// PricingNodePrice prices a node from its shape's hourly price, found
// through its claim or, for template nodes, its pool and instance-type
// labels. Pools whose prices are derived from size, not named, have no
// price to give.
func (c *cloudProvider) PricingNodePrice(ctx context.Context, request *protos.PricingNodePriceRequest) (*protos.PricingNodePriceResponse, error) {
	node := request.GetNode()
	found, err := c.ownerOf(ctx, node)
	if err != nil {
		return nil, internal(err)
	}
	poolName, shapeName := found.pool, node.GetLabels()[corev1.LabelInstanceTypeStable]
	var cpu, memory resource.Quantity
	if found.claim != nil {
		shapeName, cpu, memory = found.claim.Spec.Shape.Name, found.claim.Spec.Shape.CPU, found.claim.Spec.Shape.Memory
	} else if poolName == "" {
		poolName = node.GetLabels()[v1alpha1.LabelNodePool]
	}
	pool, err := c.groupPool(ctx, poolName)
	if err != nil {
		return nil, internal(err)
	}
	if pool == nil {
		return nil, status.Errorf(codes.Unimplemented, "node %s is in no node group, so has no price", node.GetName())
	}
	shapes, err := c.shapes.get(ctx, pool)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "resolving the shapes of NodePool %s: %v", pool.Name, err)
	}
	if shape, ok := shapes.shape(shapeName); found.claim == nil && ok {
		cpu, memory = shape.CPU, shape.Memory
	}
	hourly, ok := shapes.price(shapeName, cpu, memory)
	if !ok || (shapes.flexiblePriced && cpu.IsZero()) {
		return nil, status.Errorf(codes.Unimplemented, "NodePool %s names no price for shape %q", pool.Name, shapeName)
	}
	hours := request.GetEndTimestamp().AsTime().Sub(request.GetStartTimestamp().AsTime()).Hours()
	return &protos.PricingNodePriceResponse{Price: hourly * max(hours, 0)}, nil
}

// PricingPodPrice prices a pod as its share of a node's price: the larger
// of its cpu and memory requests' shares of the node's allocatable. A pod
// on one of claimscale's nodes is priced on that node; a pending pod on
// the cheapest served group whose template node it could go to (node
// selector and taints). A pod without a price anywhere is Unimplemented.
func (c *cloudProvider) PricingPodPrice(ctx context.Context, request *protos.PricingPodPriceRequest) (*protos.PricingPodPriceResponse, error) {
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(request.GetPodBytes()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "decoding the pod: %v", err)
	}
	hours := max(request.GetEndTimestamp().AsTime().Sub(request.GetStartTimestamp().AsTime()).Hours(), 0)
	candidates, err := c.podGroups(ctx, pod)
	if err != nil {
		return nil, internal(err)
	}
	best, found := 0.0, false
	for _, g := range candidates {
		hourly, ok := g.shapes.price(g.shape.Name, g.shape.CPU, g.shape.Memory)
		if !ok {
			continue
		}
		template, err := scheduling.TemplateNode(g.pool, g.shape, "", "pricing")
		if err != nil {
			continue
		}
		share, ok := podShare(pod, template.Status.Allocatable)
		if !ok {
			continue
		}
		if price := hourly * share * hours; !found || price < best {
			best, found = price, true
		}
	}
	if !found {
		return nil, status.Errorf(codes.Unimplemented, "no priced node group could hold pod %s/%s", pod.Namespace, pod.Name)
	}
	return &protos.PricingPodPriceResponse{Price: best}, nil
}

// podGroups are the groups a pod is priced on: its node's, when it is on
// one of ours, else every served group whose template node admits it.
func (c *cloudProvider) podGroups(ctx context.Context, pod *corev1.Pod) ([]*group, error) {
	if pod.Spec.NodeName != "" {
		found, err := c.ownerOf(ctx, &protos.ExternalGrpcNode{Name: pod.Spec.NodeName})
		if err != nil || found.group() == "" {
			return nil, err
		}
		g, err := c.group(ctx, found.pool, found.shape)
		if err != nil || g == nil {
			return nil, err
		}
		return []*group{g}, nil
	}
	var pools v1alpha1.NodePoolList
	if err := c.kube.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("listing NodePools: %w", err)
	}
	var groups []*group
	for i := range pools.Items {
		pool := &pools.Items[i]
		if !isGroupPool(pool) || !admits(pool, pod) {
			continue
		}
		shapes, err := c.shapes.get(ctx, pool)
		if err != nil {
			continue
		}
		for _, shape := range shapes.served {
			groups = append(groups, &group{pool: pool, shape: shape, shapes: shapes})
		}
	}
	return groups, nil
}

// admits says whether the pool's nodes would take the pod by its node
// selector and tolerations, the checks a price needs (the scheduler's
// other filters decide placement, not price).
func admits(pool *v1alpha1.NodePool, pod *corev1.Pod) bool {
	for key, value := range pod.Spec.NodeSelector {
		switch key {
		case v1alpha1.LabelNodePool:
			if value != pool.Name {
				return false
			}
		case corev1.LabelInstanceTypeStable, corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelOSStable, corev1.LabelArchStable:
		default:
			if pool.Spec.Template.Labels[key] != value {
				return false
			}
		}
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), pool.Spec.Template.Taints, pod.Spec.Tolerations,
		func(taint *corev1.Taint) bool { return taint.Effect != corev1.TaintEffectPreferNoSchedule }, false)
	return !untolerated
}

// podShare is the larger of the pod's cpu and memory requests' shares of
// allocatable, false when the pod does not fit.
func podShare(pod *corev1.Pod, allocatable corev1.ResourceList) (float64, bool) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpu, memory := allocatable.Cpu().MilliValue(), allocatable.Memory().Value()
	if cpu <= 0 || memory <= 0 {
		return 0, false
	}
	cpuShare := float64(requests.Cpu().MilliValue()) / float64(cpu)
	memoryShare := float64(requests.Memory().Value()) / float64(memory)
	share := max(cpuShare, memoryShare)
	return share, share <= 1
}

// GPULabel is the label of GPU nodes: the configured one, by default
// claimscale.io/gpu, which the nodes of every shape with a GPU carry
// (v1alpha1.LabelGPU).
func (c *cloudProvider) GPULabel(context.Context, *protos.GPULabelRequest) (*protos.GPULabelResponse, error) {
	return &protos.GPULabelResponse{Label: c.gpuLabel}, nil
}

// GetAvailableGPUTypes lists the GPU types the pools make: the value of
// the GPU label of every shape served with a GPU (its name). Only the keys
// mean something to cluster-autoscaler.
func (c *cloudProvider) GetAvailableGPUTypes(ctx context.Context, _ *protos.GetAvailableGPUTypesRequest) (*protos.GetAvailableGPUTypesResponse, error) {
	var pools v1alpha1.NodePoolList
	if err := c.kube.List(ctx, &pools); err != nil {
		return nil, internal(fmt.Errorf("listing NodePools: %w", err))
	}
	response := &protos.GetAvailableGPUTypesResponse{GpuTypes: map[string]*anypb.Any{}}
	for i := range pools.Items {
		pool := &pools.Items[i]
		if !isGroupPool(pool) {
			continue
		}
		shapes, err := c.shapes.get(ctx, pool)
		if err != nil {
			// Its groups are not served either (NodeGroups).
			continue
		}
		for _, shape := range shapes.served {
			if gpu := v1alpha1.GPUType(shape.Name, shape.ExtendedResources); gpu != "" {
				response.GpuTypes[gpu] = &anypb.Any{}
			}
		}
	}
	return response, nil
}

// Cleanup acknowledges cluster-autoscaler's shutdown; nothing is held for it.
func (c *cloudProvider) Cleanup(context.Context, *protos.CleanupRequest) (*protos.CleanupResponse, error) {
	return &protos.CleanupResponse{}, nil
}

// Refresh has nothing to do: every answer comes from the live cache.
func (c *cloudProvider) Refresh(context.Context, *protos.RefreshRequest) (*protos.RefreshResponse, error) {
	return &protos.RefreshResponse{}, nil
}

// provisionSlack is what the group's max provision time exceeds the
// pool's registration timeout by, so that claimscale's own timeout, which
// reports the failed instance with its error code, comes first.
const provisionSlack = time.Minute

// NodeGroupGetOptions answers what a pool says: a machine that has not
// registered within the pool's registration timeout has failed, so the
// group's MaxNodeProvisionDuration is that timeout plus provisionSlack.
// Every other option echoes cluster-autoscaler's defaults, which it sends
// (an option left out would come back as zero, and be used). Without
// defaults to echo, or a timeout to give, it is Unimplemented: the
// defaults apply.
func (c *cloudProvider) NodeGroupGetOptions(ctx context.Context, request *protos.NodeGroupAutoscalingOptionsRequest) (*protos.NodeGroupAutoscalingOptionsResponse, error) {
	g, err := c.mustGroup(ctx, request.GetId())
	if err != nil {
		return nil, err
	}
	timeout := g.pool.Spec.RegistrationTimeout
	if request.GetDefaults() == nil || timeout == nil || timeout.Duration <= 0 {
		return nil, status.Error(codes.Unimplemented, "the NodePool sets no autoscaling options; use cluster-autoscaler's defaults")
	}
	options := proto.Clone(request.GetDefaults()).(*protos.NodeGroupAutoscalingOptions)
	options.MaxNodeProvisionDuration = durationpb.New(timeout.Duration + provisionSlack)
	return &protos.NodeGroupAutoscalingOptionsResponse{NodeGroupAutoscalingOptions: options}, nil
}

// mustGroup returns group id, or NotFound.
func (c *cloudProvider) mustGroup(ctx context.Context, id string) (*group, error) {
	poolName, shapeName, ok := splitGroupID(id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no node group %q: ids are <NodePool>/<shape>", id)
	}
	g, err := c.group(ctx, poolName, shapeName)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "resolving node group %s: %v", id, err)
	}
	if g == nil {
		return nil, status.Errorf(codes.NotFound, "no node group %q: no NodePool %s with limits.nodes that offers shape %s", id, poolName, shapeName)
	}
	return g, nil
}

// refuse counts and returns a refused scaling request of an existing
// group (so clients cannot make up metric labels).
func (c *cloudProvider) refuse(pool, operation string, code codes.Code, format string, args ...any) error {
	metrics.ExternalGRPCScaleRequests.WithLabelValues(pool, operation, "refused").Inc()
	return status.Errorf(code, format, args...)
}

func internal(err error) error {
	return status.Error(codes.Internal, err.Error())
}
