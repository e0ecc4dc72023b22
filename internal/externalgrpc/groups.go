package externalgrpc

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// PlaceholderPrefix starts the instance id of a claim that has no
// providerID yet (claimscale://<claim>): cluster-autoscaler needs an id for
// every instance and sends it back to delete one that never became a node.
const PlaceholderPrefix = "claimscale://"

// instanceID is the id cluster-autoscaler knows a claim's instance by: the
// providerID its Node carries, else the placeholder.
func instanceID(claim *v1alpha1.NodeClaim) string {
	if claim.Status.ProviderID != "" {
		return claim.Status.ProviderID
	}
	return PlaceholderPrefix + claim.Name
}

// isGroupPool says whether a pool's shapes are served as node groups:
// cluster-autoscaler needs a maximum, so only pools with limits.nodes are.
func isGroupPool(pool *v1alpha1.NodePool) bool {
	return pool.DeletionTimestamp.IsZero() && pool.Spec.Limits != nil && pool.Spec.Limits.Nodes != nil
}

// groupID is the id of the node group of a pool's shape. Pool names are
// DNS subdomains and hold no slash, so the first one splits it again.
func groupID(pool, shape string) string { return pool + "/" + shape }

// splitGroupID returns the pool and shape of a group id.
func splitGroupID(id string) (pool, shape string, ok bool) {
	return strings.Cut(id, "/")
}

// group is one served node group: a shape of a pool.
type group struct {
	pool   *v1alpha1.NodePool
	shape  scheduling.Shape
	shapes *poolShapes
}

func (g *group) id() string { return groupID(g.pool.Name, g.shape.Name) }

// message describes the group for cluster-autoscaler, given its pool's
// usage. The maximum is what the pool's limits leave for this shape on top
// of its current size, so the autoscaler's estimator never plans past a
// limit that spans the pool's groups; the pool's minNodes is the minimum
// of its cheapest group, less the nodes its other groups hold.
func (g *group) message(usage poolUsage) *protos.NodeGroup {
	size := usage.byShape[g.shape.Name]
	others := int32(usage.nodes) - size
	var minSize int32
	if g.shape.Name == g.shapes.served[0].Name {
		minSize = max(g.pool.Spec.MinNodes-others, 0)
	}
	maxSize := size + g.room(usage)
	return &protos.NodeGroup{
		Id:      g.id(),
		MinSize: minSize,
		MaxSize: max(maxSize, minSize),
		Debug: fmt.Sprintf("NodePool %s shape %s (%s cpu, %s memory; provider %s; pool nodes %d-%d)",
			g.pool.Name, g.shape.Name, g.shape.CPU.String(), g.shape.Memory.String(), g.pool.Spec.ProviderRef.Name, g.pool.Spec.MinNodes, *g.pool.Spec.Limits.Nodes),
	}
}

// room is how many more nodes of the group's shape the pool's limits
// (nodes, cpu, memory) allow, and for an inventory's shape no more than
// it has machines free.
func (g *group) room(usage poolUsage) int32 {
	limits := g.pool.Spec.Limits
	room := max(int64(*limits.Nodes)-usage.nodes, 0)
	if free, counted := g.shapes.free[g.shape.Name]; counted {
		room = min(room, int64(max(free, 0)))
	}
	if limits.CPU != nil && g.shape.CPU.MilliValue() > 0 {
		room = min(room, max(limits.CPU.MilliValue()-usage.milliCPU, 0)/g.shape.CPU.MilliValue())
	}
	if limits.Memory != nil && g.shape.Memory.Value() > 0 {
		room = min(room, max(limits.Memory.Value()-usage.memory, 0)/g.shape.Memory.Value())
	}
	return int32(room)
}

// poolUsage is what a pool's live claims hold, in shapes.
type poolUsage struct {
	nodes    int64
	milliCPU int64
	memory   int64
	byShape  map[string]int32
}

// usageOf totals a pool's claims that are not being deleted. It reads the
// cache's objects without copying them (it only counts): it runs for every
// node on every loop of the autoscaler.
func (c *cloudProvider) usageOf(ctx context.Context, pool string) (poolUsage, error) {
	var list v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &list, client.MatchingFields{index.NodeClaimNodePool: pool}, client.UnsafeDisableDeepCopy); err != nil {
		return poolUsage{}, fmt.Errorf("listing claims of NodePool %s: %w", pool, err)
	}
	usage := poolUsage{byShape: map[string]int32{}}
	for i := range list.Items {
		claim := &list.Items[i]
		if !claim.DeletionTimestamp.IsZero() || sleeping(claim) {
			continue
		}
		usage.nodes++
		usage.milliCPU += claim.Spec.Shape.CPU.MilliValue()
		usage.memory += claim.Spec.Shape.Memory.Value()
		usage.byShape[claim.Spec.Shape.Name]++
	}
	return usage, nil
}

// groupPool returns a pool whose shapes are served, or nil when there is
// no such pool.
func (c *cloudProvider) groupPool(ctx context.Context, name string) (*v1alpha1.NodePool, error) {
	if name == "" {
		return nil, nil
	}
	pool := &v1alpha1.NodePool{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading NodePool %s: %w", name, err)
	}
	if !isGroupPool(pool) {
		return nil, nil
	}
	return pool, nil
}

// group returns the served group of a pool's shape, or nil when the pool
// serves none of that name.
func (c *cloudProvider) group(ctx context.Context, poolName, shapeName string) (*group, error) {
	pool, err := c.groupPool(ctx, poolName)
	if err != nil || pool == nil {
		return nil, err
	}
	shapes, err := c.shapes.get(ctx, pool)
	if err != nil {
		return nil, err
	}
	shape, ok := shapes.shape(shapeName)
	if !ok {
		return nil, nil
	}
	return &group{pool: pool, shape: shape, shapes: shapes}, nil
}

// claimsOf lists a pool's claims, deleted ones included, oldest first.
// Every shape's: the pool's limits span its groups. The claims whose
// machine sleeps or is being put to sleep are left out (sleeping).
func (c *cloudProvider) claimsOf(ctx context.Context, pool string) ([]v1alpha1.NodeClaim, error) {
	var list v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &list, client.MatchingFields{index.NodeClaimNodePool: pool}); err != nil {
		return nil, fmt.Errorf("listing claims of NodePool %s: %w", pool, err)
	}
	list.Items = slices.DeleteFunc(list.Items, func(claim v1alpha1.NodeClaim) bool { return sleeping(&claim) })
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := &list.Items[i], &list.Items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return list.Items, nil
}

// sleeping says whether a claim's machine sleeps, or is being put to
// sleep, in native mode before the switch to externalgrpc (this mode
// never suspends: cluster-autoscaler decides, and it deletes). Such a
// claim is no instance of its group: it has, or soon has, no Node, and
// cluster-autoscaler would count an instance without a Node as
// unregistered and delete it after its max-node-provision-time. Nor is it
// part of the target size or the pool's usage, as a sleeping machine is
// not part of the pool's InUse. The claim lifecycle deletes it after the
// pool's sleep.deleteAfter.
func sleeping(claim *v1alpha1.NodeClaim) bool {
	return claim.SleepRequested()
}

// ofShape keeps the claims of one shape.
func ofShape(claims []v1alpha1.NodeClaim, shape string) []v1alpha1.NodeClaim {
	var out []v1alpha1.NodeClaim
	for i := range claims {
		if claims[i].Spec.Shape.Name == shape {
			out = append(out, claims[i])
		}
	}
	return out
}

// targetSize counts the claims that are not being deleted.
func targetSize(claims []v1alpha1.NodeClaim) int32 {
	var size int32
	for i := range claims {
		if claims[i].DeletionTimestamp.IsZero() {
			size++
		}
	}
	return size
}

// registered says whether a claim's Node joined.
func registered(claim *v1alpha1.NodeClaim) bool {
	return claim.Status.NodeName != "" || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered)
}

// owner is what is known of a node cluster-autoscaler names: the claim
// behind it, or, once that is gone, the pool and shape its Node says.
type owner struct {
	claim *v1alpha1.NodeClaim
	// pool and shape are the claim's, else the labels of the Node of that
	// name, else "" when nothing is left of the node.
	pool, shape string
	// labelledPool and labelledShape are the pool and instance-type labels
	// cluster-autoscaler sent with the node.
	labelledPool, labelledShape string
	// foreign: a Node of that name exists that claimscale did not make.
	foreign bool
}

// group is the id of the group the node is in, "" when unknown.
func (o owner) group() string {
	if o.pool == "" || o.shape == "" {
		return ""
	}
	return groupID(o.pool, o.shape)
}

// ownerOf finds the claim behind a node cluster-autoscaler sent: by the
// placeholder id, by providerID in the claims index, else through the Node
// of that name. Stand-in nodes for instances that never registered carry
// only the instance id as providerID and name, which the first two find.
func (c *cloudProvider) ownerOf(ctx context.Context, node *protos.ExternalGrpcNode) (owner, error) {
	found := owner{labelledPool: node.GetLabels()[v1alpha1.LabelNodePool], labelledShape: node.GetLabels()[corev1.LabelInstanceTypeStable]}
	providerID := node.GetProviderID()
	if name, ok := strings.CutPrefix(providerID, PlaceholderPrefix); ok {
		claim, err := c.claimNamed(ctx, name)
		if err != nil || claim == nil {
			return found, err
		}
		return found.with(claim), nil
	}
	if providerID != "" {
		var list v1alpha1.NodeClaimList
		if err := c.kube.List(ctx, &list, client.MatchingFields{index.NodeClaimProviderID: providerID}); err != nil {
			return owner{}, fmt.Errorf("listing claims with providerID %s: %w", providerID, err)
		}
		if len(list.Items) > 0 {
			return found.with(&list.Items[0]), nil
		}
	}
	if node.GetName() == "" {
		return found, nil
	}
	existing := &corev1.Node{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: node.GetName()}, existing); err != nil {
		if apierrors.IsNotFound(err) {
			return found, nil
		}
		return owner{}, fmt.Errorf("reading Node %s: %w", node.GetName(), err)
	}
	if providerID != "" && existing.Spec.ProviderID != "" && existing.Spec.ProviderID != providerID {
		// Another machine's Node under the same name says nothing of this one.
		return found, nil
	}
	if claimName := existing.Labels[v1alpha1.LabelNodeClaim]; claimName != "" {
		claim, err := c.claimNamed(ctx, claimName)
		if err != nil {
			return owner{}, err
		}
		if claim != nil {
			return found.with(claim), nil
		}
	}
	found.pool = existing.Labels[v1alpha1.LabelNodePool]
	found.shape = existing.Labels[corev1.LabelInstanceTypeStable]
	found.foreign = found.pool == ""
	return found, nil
}

func (o owner) with(claim *v1alpha1.NodeClaim) owner {
	o.claim = claim
	o.pool = claim.Spec.NodePoolRef.Name
	o.shape = claim.Spec.Shape.Name
	return o
}

// belongsTo says whether the node may be deleted as part of group id:
// neither its claim, its Node nor the labels sent with it name another
// pool or shape, and it is not a Node claimscale did not make. A node of
// which nothing is left belongs anywhere: deleting it deletes nothing.
func (o owner) belongsTo(id string) bool {
	pool, shape, _ := splitGroupID(id)
	switch {
	case o.foreign:
		return false
	case o.labelledPool != "" && o.labelledPool != pool:
		return false
	case o.labelledPool != "" && o.labelledShape != "" && o.labelledShape != shape:
		return false
	case o.pool != "" && o.pool != pool:
		return false
	}
	return o.shape == "" || o.shape == shape
}

func (c *cloudProvider) claimNamed(ctx context.Context, name string) (*v1alpha1.NodeClaim, error) {
	claim := &v1alpha1.NodeClaim{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading NodeClaim %s: %w", name, err)
	}
	return claim, nil
}
