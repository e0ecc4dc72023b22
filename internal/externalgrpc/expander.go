package externalgrpc

import (
	"context"
	"fmt"
	"math"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// expander answers cluster-autoscaler's gRPC expander (--expander=grpc):
// of the scale-up options it found, which are best. Each option is one node
// group (a pool's shape) and the pending pods it would schedule; claimscale
// packs those pods onto that shape with its own scheduling core, at its own
// prices, and keeps the options whose pods cost least. It only reads.
type expander struct {
	protos.UnimplementedExpanderServer

	kube   client.Client
	shapes *shapeCache
}

// costTolerance: costs per pod this close are equal, so float noise does
// not decide.
const costTolerance = 1e-9

// ranking is what packing an option's pods found.
type ranking struct {
	option *protos.Option
	// costPerPod is the hourly price of the nodes the pods need, divided
	// by the pods placed.
	costPerPod float64
	nodes      int
	placed     int
}

// better orders rankings: least cost per pod, then fewest nodes, then most
// pods placed.
func (r ranking) better(other ranking) bool {
	if math.Abs(r.costPerPod-other.costPerPod) > costTolerance*max(r.costPerPod, other.costPerPod) {
		return r.costPerPod < other.costPerPod
	}
	if r.nodes != other.nodes {
		return r.nodes < other.nodes
	}
	return r.placed > other.placed
}

func (r ranking) equal(other ranking) bool { return !r.better(other) && !other.better(r) }

// BestOptions returns the options whose pods cost least per pod on
// claimscale's packing, ties broken by fewest nodes. When options schedule
// the same pods that is the least cost for them. It never filters
// everything away: options it cannot judge (a group it does not serve,
// pods it cannot decode or place) are dropped only when another can be
// judged, and with none judged all are returned, as an error would.
func (e *expander) BestOptions(ctx context.Context, request *protos.BestOptionsRequest) (*protos.BestOptionsResponse, error) {
	options := request.GetOptions()
	var daemonSets []*appsv1.DaemonSet
	var list appsv1.DaemonSetList
	if err := e.kube.List(ctx, &list); err == nil {
		for i := range list.Items {
			daemonSets = append(daemonSets, &list.Items[i])
		}
	}
	var rankings []ranking
	for _, option := range options {
		if option == nil {
			continue
		}
		ranked, err := e.rank(ctx, option, daemonSets)
		if err != nil {
			log.FromContext(ctx).V(1).Info("cannot judge a scale-up option", "nodeGroup", option.GetNodeGroupId(), "reason", err.Error())
			continue
		}
		rankings = append(rankings, ranked)
	}
	if len(rankings) == 0 {
		return &protos.BestOptionsResponse{Options: options}, nil
	}
	best := rankings[0]
	for _, r := range rankings[1:] {
		if r.better(best) {
			best = r
		}
	}
	response := &protos.BestOptionsResponse{}
	for _, r := range rankings {
		if r.equal(best) {
			response.Options = append(response.Options, r.option)
		}
	}
	log.FromContext(ctx).V(1).Info("ranked scale-up options", "options", len(options), "best", response.Options[0].GetNodeGroupId(),
		"nodes", best.nodes, "pods", best.placed, "costPerPod", best.costPerPod)
	return response, nil
}

// rank packs the option's pods onto new nodes of its group's shape, within
// what the pool's limits leave.
func (e *expander) rank(ctx context.Context, option *protos.Option, daemonSets []*appsv1.DaemonSet) (ranking, error) {
	poolName, shapeName, ok := splitGroupID(option.GetNodeGroupId())
	if !ok {
		return ranking{}, fmt.Errorf("not a claimscale node group")
	}
	pool := &v1alpha1.NodePool{}
	if err := e.kube.Get(ctx, client.ObjectKey{Name: poolName}, pool); err != nil || !isGroupPool(pool) {
		return ranking{}, fmt.Errorf("no NodePool %s with limits.nodes", poolName)
	}
	shapes, err := e.shapes.get(ctx, pool)
	if err != nil {
		return ranking{}, err
	}
	shape, ok := shapes.shape(shapeName)
	if !ok {
		return ranking{}, fmt.Errorf("NodePool %s serves no shape %s", poolName, shapeName)
	}
	pods, err := optionPods(option)
	if err != nil {
		return ranking{}, err
	}
	var nodeProvider v1alpha1.NodeProvider
	if err := e.kube.Get(ctx, client.ObjectKey{Name: pool.Spec.ProviderRef.Name}, &nodeProvider); err != nil {
		return ranking{}, fmt.Errorf("reading NodeProvider %s: %w", pool.Spec.ProviderRef.Name, err)
	}
	var claims v1alpha1.NodeClaimList
	if err := e.kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool.Name}); err != nil {
		return ranking{}, fmt.Errorf("listing claims of NodePool %s: %w", pool.Name, err)
	}
	nodes, resources := poolclaims.InUse(claims.Items)
	var zones []string
	if zone := soleZone(&nodeProvider); zone != "" {
		zones = []string{zone}
	}
	result, err := scheduling.Solve(ctx, scheduling.Input{
		Cluster: scheduling.Cluster{
			Pools: []scheduling.Pool{{
				NodePool: pool,
				Shapes:   scheduling.Shapes{Fixed: []scheduling.Shape{shape}},
				Zones:    zones,
				InUse:    scheduling.Usage{Nodes: int64(nodes), CPU: resources[corev1.ResourceCPU], Memory: resources[corev1.ResourceMemory]},
			}},
			DaemonSets: daemonSets,
		},
		Pending: pods,
	})
	if err != nil {
		return ranking{}, fmt.Errorf("packing the pods of node group %s: %w", option.GetNodeGroupId(), err)
	}
	placed := len(pods) - len(result.Unschedulable)
	if placed <= 0 || len(result.NewNodes) == 0 {
		return ranking{}, fmt.Errorf("none of its %d pods fit a new node of shape %s", len(pods), shapeName)
	}
	var cost float64
	for _, node := range result.NewNodes {
		cost += node.Shape.Price
	}
	return ranking{option: option, costPerPod: cost / float64(placed), nodes: len(result.NewNodes), placed: placed}, nil
}

// optionPods decodes the pods an option would schedule, as pending pods.
func optionPods(option *protos.Option) ([]*corev1.Pod, error) {
	encoded := option.GetPodBytes()
	if len(encoded) == 0 {
		encoded = option.GetPod()
	}
	if len(encoded) == 0 {
		return nil, fmt.Errorf("the option carries no pods")
	}
	pods := make([]*corev1.Pod, 0, len(encoded))
	for _, podBytes := range encoded {
		pod := &corev1.Pod{}
		if err := pod.Unmarshal(podBytes); err != nil {
			return nil, fmt.Errorf("decoding a pod: %w", err)
		}
		pod.Spec.NodeName = ""
		pods = append(pods, pod)
	}
	return pods, nil
}
