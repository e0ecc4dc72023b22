package disruption

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

// reader reads what a round looks at, all at the round's start: from the
// caches through kube, and the pods and nodes from objects when set. It is
// the one place a round lists the cluster.
type reader struct {
	kube      client.Client
	objects   provisioning.ObjectSource
	providers provisioning.ProviderResolver
	capacity  provisioning.CapacityChecker
	// warm says the pools' warm capacity now; nil reads their schedules
	// at clock.
	warm  *warmcapacity.Source
	clock clock.WithTicker
}

// gather reads everything a round looks at from the caches.
func (in *reader) gather(ctx context.Context) (*state, error) {
	// A pool that cannot provision is provisioning's to report; here it
	// would be said every second.
	quiet := log.IntoContext(ctx, log.FromContext(ctx).V(1))
	input, _, err := provisioning.ClusterFromObjects(quiet, in.kube, in.objects, in.providers, in.capacity)
	if err != nil {
		return nil, err
	}
	var (
		pools     v1alpha1.NodePoolList
		claims    v1alpha1.NodeClaimList
		budgets   policyv1.PodDisruptionBudgetList
		providers v1alpha1.NodeProviderList
	)
	// Nodes and pods are only read: no copies of the cache's objects.
	for _, list := range []struct {
		what string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"pools", &pools, nil},
		// Claims are the cache's own too; a write copies first (state.own).
		{"claims", &claims, []client.ListOption{client.UnsafeDisableDeepCopy}},
		{"PodDisruptionBudgets", &budgets, []client.ListOption{client.UnsafeDisableDeepCopy}},
		{"providers", &providers, nil},
	} {
		if err := in.kube.List(ctx, list.list, list.opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", list.what, err)
		}
	}
	warm := in.warm
	if warm == nil {
		warm = &warmcapacity.Source{Clock: in.clock}
	}
	targets := map[string]warmcapacity.Target{}
	for i := range pools.Items {
		// A schedule that cannot be read leaves the pool's own values;
		// provisioning says so.
		targets[pools.Items[i].Name], _ = warm.Target(&pools.Items[i])
	}
	// Pods and nodes are only read: the cache's own objects, not copies.
	pods, nodes, err := in.podsAndNodes(ctx)
	if err != nil {
		return nil, err
	}
	return newState(in.clock.Now(), objects{
		input: input, pools: pools.Items, claims: claims.Items, nodes: nodes,
		pods: pods, budgets: budgets.Items, providers: providers.Items, targets: targets,
	}), nil
}

// podsAndNodes reads every pod and node, from Objects when set.
func (in *reader) podsAndNodes(ctx context.Context) ([]*corev1.Pod, []*corev1.Node, error) {
	return provisioning.PodsAndNodes(ctx, in.objects, in.kube)
}
