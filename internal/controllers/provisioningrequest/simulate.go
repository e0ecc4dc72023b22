package provisioningrequest

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// placement is where a simulation put a request's pods: on nodes there
// are and claims booting (by the name the simulation gave them), on new
// nodes, or nowhere.
type placement struct {
	picture *clusterstate.Picture
	// on names, per pod of the request (in order), the node or in-flight
	// claim it was placed on; "" for a pod on a new node or on none.
	on []string
	// newNodes are the new nodes that hold the request's pods.
	newNodes []scheduling.NewNode
	// unschedulable are the request's pods that fit nowhere.
	unschedulable []scheduling.Unschedulable
}

// fits says whether every pod of the request found a place.
func (p placement) fits() bool { return len(p.unschedulable) == 0 }

// inFlight says whether a simulated node is a booting claim.
func (p placement) inFlight(name string) bool {
	for _, claim := range p.picture.InFlight {
		if claim.Name == name {
			return true
		}
	}
	return false
}

// place simulates the request's pods on the cluster as provisioning sees
// it (the same picture, pools and packing), after every other request's
// booked pods: with newNodes, new nodes of the open pools may hold them;
// without, only the nodes there are and the claims booting.
func (c *Controller) place(ctx context.Context, request *autoscalingv1.ProvisioningRequest, pods requestPods, newNodes bool) (placement, error) {
	picture, err := (&clusterstate.Cluster{Kube: c.Kube, Objects: c.Objects, Writes: c.Writes}).Picture(ctx, c.Rounds)
	if err != nil {
		return placement{}, fmt.Errorf("reading the cluster: %w", err)
	}
	input := picture.Input
	if !newNodes {
		input.Pools = closed(input.Pools)
	}
	input.Pending = append(c.Bookings.placeholders(ctx, client.ObjectKeyFromObject(request)), pods.pods...)
	result, err := scheduling.Solve(ctx, input)
	if err != nil {
		return placement{}, fmt.Errorf("simulating the request's %d pods: %w", len(pods.pods), err)
	}
	out := placement{picture: picture, on: make([]string, len(pods.pods))}
	index := make(map[*corev1.Pod]int, len(pods.pods))
	for i, pod := range pods.pods {
		index[pod] = i
	}
	for _, placed := range result.Placements {
		if i, ok := index[placed.Pod]; ok {
			out.on[i] = placed.Node
		}
	}
	for _, node := range result.NewNodes {
		for _, pod := range node.Pods {
			if isRequestPod(request, pod) {
				out.newNodes = append(out.newNodes, node)
				break
			}
		}
	}
	for _, u := range result.Unschedulable {
		if isRequestPod(request, u.Pod) {
			out.unschedulable = append(out.unschedulable, u)
		}
	}
	return out, nil
}

// fitsEmptyPools says whether the request's pods would fit in the pools
// were they empty and every shape available: when not, the request is
// larger than every pool can ever be and waiting is no use. It returns
// why not.
func (c *Controller) fitsEmptyPools(ctx context.Context, request *autoscalingv1.ProvisioningRequest, pods requestPods, picture *clusterstate.Picture) (string, error) {
	empty := scheduling.Input{Cluster: scheduling.Cluster{DaemonSets: picture.DaemonSets, Namespaces: picture.Namespaces}}
	for _, pool := range picture.Input.Pools {
		pool.InUse = scheduling.Usage{CPU: resource.Quantity{}, Memory: resource.Quantity{}}
		// Every shape open, an inventory's servers all off.
		pool.Unavailable, pool.UnavailableIn, pool.NoneFree, pool.Free = nil, nil, nil, nil
		empty.Pools = append(empty.Pools, pool)
	}
	empty.Pending = pods.pods
	result, err := scheduling.Solve(ctx, empty)
	if err != nil {
		return "", fmt.Errorf("simulating the request's %d pods on empty pools: %w", len(pods.pods), err)
	}
	var refused []scheduling.Unschedulable
	for _, u := range result.Unschedulable {
		if isRequestPod(request, u.Pod) {
			refused = append(refused, u)
		}
	}
	if len(refused) == 0 {
		return "", nil
	}
	return describe(refused, len(pods.pods)), nil
}

// closed is pools with every shape closed to new nodes: their booting
// claims still count as room.
func closed(pools []scheduling.Pool) []scheduling.Pool {
	out := make([]scheduling.Pool, len(pools))
	for i, pool := range pools {
		pool.Unavailable = nil
		for _, shape := range pool.Shapes.Fixed {
			pool.Unavailable = append(pool.Unavailable, shape.Name)
		}
		if pool.Shapes.Flexible != nil {
			pool.Unavailable = append(pool.Unavailable, "flexible")
		}
		out[i] = pool
	}
	return out
}

// describe says how many of total pods fit nowhere and why the first one
// does not.
func describe(unschedulable []scheduling.Unschedulable, total int) string {
	first := unschedulable[0]
	reason := strings.TrimSpace(first.Reason)
	return fmt.Sprintf("%d of its %d pods fit nowhere (pod %s: %s)", len(unschedulable), total, first.Pod.Name, reason)
}
