package externalgrpc

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/index"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
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

// isGroup says whether a pool is served as a node group: cluster-autoscaler
// needs a maximum, so only pools with limits.nodes are.
func isGroup(pool *v1alpha1.NodePool) bool {
	return pool.DeletionTimestamp.IsZero() && pool.Spec.Limits != nil && pool.Spec.Limits.Nodes != nil
}

// nodeGroup is the group a pool is served as.
func nodeGroup(pool *v1alpha1.NodePool) *protos.NodeGroup {
	return &protos.NodeGroup{
		Id:      pool.Name,
		MinSize: pool.Spec.MinNodes,
		MaxSize: *pool.Spec.Limits.Nodes,
		Debug:   debugOf(pool),
	}
}

// debugOf summarises a pool for cluster-autoscaler's status page and logs.
func debugOf(pool *v1alpha1.NodePool) string {
	var shapes string
	if f := pool.Spec.Shapes.Flexible; f != nil {
		shapes = fmt.Sprintf("flexible cpu %s-%s memory %s-%s", f.MinCPU.String(), f.MaxCPU.String(), f.MinMemory.String(), f.MaxMemory.String())
	} else {
		names := make([]string, 0, len(pool.Spec.Shapes.Fixed))
		for _, shape := range pool.Spec.Shapes.Fixed {
			names = append(names, shape.Name)
		}
		shapes = strings.Join(names, ",")
	}
	return fmt.Sprintf("NodePool %s (provider %s, shapes %s, nodes %d-%d)",
		pool.Name, pool.Spec.ProviderRef.Name, shapes, pool.Spec.MinNodes, *pool.Spec.Limits.Nodes)
}

// groupPool returns the pool served as group id, or nil when there is no
// such group.
func (c *cloudProvider) groupPool(ctx context.Context, id string) (*v1alpha1.NodePool, error) {
	if id == "" {
		return nil, nil
	}
	pool := &v1alpha1.NodePool{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: id}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading NodePool %s: %w", id, err)
	}
	if !isGroup(pool) {
		return nil, nil
	}
	return pool, nil
}

// claimsOf lists a pool's claims, deleted ones included, oldest first.
func (c *cloudProvider) claimsOf(ctx context.Context, pool string) ([]v1alpha1.NodeClaim, error) {
	var list v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &list, client.MatchingFields{index.NodeClaimNodePool: pool}); err != nil {
		return nil, fmt.Errorf("listing claims of NodePool %s: %w", pool, err)
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := &list.Items[i], &list.Items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return list.Items, nil
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
// behind it, or, once that is gone, the pool its Node says it is in.
type owner struct {
	claim *v1alpha1.NodeClaim
	// pool is the claim's pool, else the pool label of the Node of that
	// name, else "" when nothing is left of the node.
	pool string
	// labelled is the pool label cluster-autoscaler sent with the node.
	labelled string
	// foreign: a Node of that name exists that claimscale did not make.
	foreign bool
}

// ownerOf finds the claim behind a node cluster-autoscaler sent: by the
// placeholder id, by providerID in the claims index, else through the Node
// of that name. Stand-in nodes for instances that never registered carry
// only the instance id as providerID and name, which the first two find.
func (c *cloudProvider) ownerOf(ctx context.Context, node *protos.ExternalGrpcNode) (owner, error) {
	found := owner{labelled: node.GetLabels()[v1alpha1.LabelNodePool]}
	providerID := node.GetProviderID()
	if name, ok := strings.CutPrefix(providerID, PlaceholderPrefix); ok {
		claim, err := c.claimNamed(ctx, name)
		if err != nil {
			return owner{}, err
		}
		if claim == nil {
			// Gone already: the lifecycle controller deletes a claim whose
			// launch found no capacity; its remembered failure names the pool.
			found.pool = c.failures.poolOf(name)
			return found, nil
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
	found.foreign = found.pool == ""
	return found, nil
}

func (o owner) with(claim *v1alpha1.NodeClaim) owner {
	o.claim = claim
	o.pool = claim.Spec.NodePoolRef.Name
	return o
}

// belongsTo says whether the node may be deleted as part of group id:
// neither its claim, its Node nor the labels sent with it name another
// pool, and it is not a Node claimscale did not make. A node of which
// nothing is left belongs anywhere: deleting it deletes nothing.
func (o owner) belongsTo(id string) bool {
	switch {
	case o.foreign:
		return false
	case o.labelled != "" && o.labelled != id:
		return false
	}
	return o.pool == "" || o.pool == id
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
