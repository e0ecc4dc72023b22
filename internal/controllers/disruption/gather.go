package disruption

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

// reader reads what a round looks at, all at the round's start: from the
// caches through kube, and the pods and nodes from objects when set. It is
// the one place a round lists the cluster.
type reader struct {
	kube    client.Client
	objects clusterstate.ObjectSource
	// pools says which pools can provision now; writes, the claims the
	// controller created and deleted that the cache may not show yet.
	pools  clusterstate.PoolUsability
	writes *clusterstate.Writes
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
	picture, err := (&clusterstate.Cluster{Kube: in.kube, Objects: in.objects, Writes: in.writes}).Picture(quiet, in.pools)
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
		if err := in.kube.List(ctx, list.list, list.opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", list.what, err)
		}
	}
	warm := in.warm
	if warm == nil {
		warm = &warmcapacity.Source{Clock: in.clock}
	}
	targets := map[string]warmcapacity.Target{}
	for i := range picture.Pools {
		// A schedule that cannot be read leaves the pool's own values;
		// provisioning says so.
		targets[picture.Pools[i].Name], _ = warm.Target(&picture.Pools[i])
	}
	return newState(in.clock.Now(), objects{
		input: picture.Input, pools: picture.Pools, claims: picture.Claims, nodes: picture.AllNodes,
		pods: picture.AllPods, budgets: budgets.Items, providers: providers.Items, targets: targets,
		reserved: warm.Reserved(ctx),
	}), nil
}
