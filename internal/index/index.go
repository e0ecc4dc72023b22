// Package index registers the field indexes the controllers look objects up
// by, so lookups hit the informer cache instead of scanning it.
package index

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

const (
	// NodeProviderID indexes Nodes by spec.providerID.
	NodeProviderID = "spec.providerID"
	// PodNodeName indexes Pods by spec.nodeName.
	PodNodeName = "spec.nodeName"
	// NodeClaimProviderID indexes NodeClaims by status.providerID.
	NodeClaimProviderID = "status.providerID"
	// NodeClaimNodePool indexes NodeClaims by spec.nodePoolRef.name.
	NodeClaimNodePool = "spec.nodePoolRef.name"
	// UnclaimedNodeSystemUUID indexes the Nodes that carry no providerID by
	// status.nodeInfo.systemUUID, lower case: a bare-metal server's Node
	// is found by it (v1alpha1.SystemUUIDOf).
	UnclaimedNodeSystemUUID = "status.nodeInfo.systemUUID"
)

// Setup registers every index on the manager's cache.
func Setup(ctx context.Context, indexer client.FieldIndexer) error {
	indexes := []struct {
		object  client.Object
		field   string
		extract client.IndexerFunc
	}{
		{&corev1.Node{}, NodeProviderID, func(o client.Object) []string {
			return nonEmpty(o.(*corev1.Node).Spec.ProviderID)
		}},
		{&corev1.Node{}, UnclaimedNodeSystemUUID, func(o client.Object) []string {
			node := o.(*corev1.Node)
			if node.Spec.ProviderID != "" {
				return nil
			}
			return nonEmpty(strings.ToLower(node.Status.NodeInfo.SystemUUID))
		}},
		{&corev1.Pod{}, PodNodeName, func(o client.Object) []string {
			return nonEmpty(o.(*corev1.Pod).Spec.NodeName)
		}},
		{&v1alpha1.NodeClaim{}, NodeClaimProviderID, func(o client.Object) []string {
			return nonEmpty(o.(*v1alpha1.NodeClaim).Status.ProviderID)
		}},
		{&v1alpha1.NodeClaim{}, NodeClaimNodePool, func(o client.Object) []string {
			return nonEmpty(o.(*v1alpha1.NodeClaim).Spec.NodePoolRef.Name)
		}},
	}
	for _, idx := range indexes {
		if err := indexer.IndexField(ctx, idx.object, idx.field, idx.extract); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", idx.object, idx.field, err)
		}
	}
	return nil
}

func nonEmpty(value string) []string {
	if value == "" {
		return nil
	}
	return []string{value}
}
