package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/pkg/provider"
)

func newSimulateCommand(o *options) *cobra.Command {
	var files []string
	var from, output string
	var scaleDown bool
	cmd := &cobra.Command{
		Use:   "simulate (-f WORKLOAD.yaml | --scale-down)",
		Short: "Say what claimscale would buy for more pods, deciding as the controller does, without writing anything",
		Long: `simulate reads the cluster (nodes, pods, pools, claims, DaemonSets, LimitRanges) and what each pool
can make from the controller, adds the pods of the Deployments, StatefulSets, ReplicaSets, Jobs,
CronJobs and Pods in the files, as the API server would store them (requests defaulted from limits,
the LimitRanges of the cluster and of the files), and decides with the controller's own code where they would go:
which new nodes (pool, shape, count, hourly cost) and which pods would stay pending, and why. A
DaemonSet in the files runs on every node it selects: simulate says on how many existing nodes it
would run, where it would not fit, and what it takes of each node; new nodes are sized with it.
Other objects (Namespaces, Services, ConfigMaps, ...) are skipped with a note. It writes nothing.

With --scale-down it decides as a disruption round would now instead: which nodes consolidation
would delete or replace (with the new node's pool, shape and the hourly saving), and why each other
node stays.`,
		Example: `  kubectl claimscale simulate -f web.yaml -n shop
  helm template my-app ./chart | kubectl claimscale simulate -f - -n shop
  kubectl claimscale simulate -f manifests/ -o yaml
  kubectl claimscale simulate --scale-down`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if scaleDown && len(files) > 0 {
				return fmt.Errorf("--scale-down takes no workload: it says what consolidation would do with the cluster as it is")
			}
			if !scaleDown && len(files) == 0 {
				return fmt.Errorf("give a workload with -f, or --scale-down")
			}
			namespace, _, err := o.config.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return fmt.Errorf("reading the namespace: %w", err)
			}
			w := &workload{}
			if len(files) > 0 {
				if w, err = readWorkloads(files, o.streams.In, namespace); err != nil {
					return err
				}
			}
			var kube client.Reader
			var offers []decisions.PoolOffer
			var clk clock.WithTicker = clock.RealClock{}
			if from != "" {
				snapshot, err := readSnapshot(from)
				if err != nil {
					return err
				}
				kube, offers = snapshotReader{snapshot}, snapshot.Offers
				clk = fixedClock{WithTicker: clock.RealClock{}, now: snapshot.Taken.Time}
			} else {
				if kube, err = o.kubeClient(); err != nil {
					return err
				}
				endpoint, err := o.endpointClient(cmd.Context())
				if err != nil {
					return err
				}
				defer endpoint.Close()
				if err := endpoint.get(cmd.Context(), "pools", &offers); err != nil {
					return fmt.Errorf("reading what each pool can make: %w", err)
				}
			}
			if scaleDown {
				plan, leftOut, err := planScaleDown(cmd.Context(), kube, offers, clk)
				if err != nil {
					return err
				}
				if output != "" {
					return printStructured(o.streams.Out, output, scaleDownReportOf(plan, leftOut))
				}
				writePlan(o.streams.Out, plan, leftOut)
				return nil
			}
			report, err := simulate(cmd.Context(), kube, offers, w)
			if err != nil {
				return err
			}
			if output != "" {
				return printStructured(o.streams.Out, output, report)
			}
			return writeSimulation(o.streams.Out, report)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "replay a file written by `kubectl claimscale snapshot` instead of reading the cluster (no cluster or controller needed)")
	cmd.Flags().BoolVar(&scaleDown, "scale-down", false, "say what consolidation would remove or replace now, and why every other node stays")
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file, directory or - (stdin) of YAML or JSON workloads to add (repeatable); objects that make no pods are skipped")
	addOutputFlag(cmd, &output)
	return cmd
}

// SimulationReport is simulate's answer, as -o json|yaml print it.
type SimulationReport struct {
	// NewNodes are the nodes it would buy, counted by pool, shape and zone.
	NewNodes []SimulatedNodes `json:"newNodes"`
	// NewNodeCount and PricePerHour sum NewNodes.
	NewNodeCount int     `json:"newNodeCount"`
	PricePerHour float64 `json:"pricePerHour"`
	// Woken are the sleeping machines it would wake instead of buying
	// nodes, by claim.
	Woken []SimulatedWake `json:"woken,omitempty"`
	// Placed counts the pods that would go on existing or booting nodes.
	Placed int `json:"placed"`
	// Pending are the pods that would stay pending, with the reason.
	Pending []PodReason `json:"pending,omitempty"`
	// Refused are the pods the API server would refuse (a LimitRange's
	// maximum, say): they would never be pending.
	Refused []PodReason `json:"refused,omitempty"`
	// DaemonSets of the workload: where they would run.
	DaemonSets []DaemonSetCost `json:"daemonSets,omitempty"`
	// LeftOut are pools the simulation could not use: the controller has
	// no offer of theirs (not resolved yet, or their provider fails).
	LeftOut []string `json:"leftOut,omitempty"`
	// Skipped are the objects of the files that make no pods.
	Skipped []string `json:"skipped,omitempty"`
}

// SimulatedWake is a sleeping machine the simulation would wake.
type SimulatedWake struct {
	NodeClaim string `json:"nodeClaim"`
	Pool      string `json:"pool"`
	Shape     string `json:"shape"`
	Zone      string `json:"zone,omitempty"`
	// Pods it would be woken for, namespace/name.
	Pods []string `json:"pods,omitempty"`
}

// SimulatedNodes is a count of new nodes of one pool, shape and zone.
type SimulatedNodes struct {
	Pool  string `json:"pool"`
	Shape string `json:"shape"`
	Zone  string `json:"zone,omitempty"`
	Count int    `json:"count"`
	// PricePerHour of all Count nodes.
	PricePerHour float64 `json:"pricePerHour"`
	// Pods each node was opened for, namespace/name.
	Pods []string `json:"pods"`
}

// PodReason is a pod and why it would not run.
type PodReason struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// DaemonSetCost says where a DaemonSet of the workload would run.
type DaemonSetCost struct {
	DaemonSet string `json:"daemonSet"`
	// PodRequests are what each of its pods requests.
	PodRequests corev1.ResourceList `json:"podRequests"`
	// ExistingNodes is how many existing nodes it selects; NoRoom those of
	// them whose free room is too small, where its pod would stay pending
	// (a DaemonSet's pod buys no node).
	ExistingNodes int      `json:"existingNodes"`
	NoRoom        []string `json:"noRoom,omitempty"`
	// PricePerHour is the share of those nodes' prices its pods take, by
	// their cpu requests.
	PricePerHour float64 `json:"pricePerHour"`
}

// simulate gathers the cluster as a provisioning round does, through a
// reader that cannot write, adds the workload as pending pods (as the API
// server would admit them) and its DaemonSets, and decides with the
// scheduling package, as the controller does.
func simulate(ctx context.Context, kube client.Reader, offers []decisions.PoolOffer, w *workload) (*SimulationReport, error) {
	byPool := map[string]decisions.PoolOffer{}
	for _, offer := range offers {
		byPool[offer.Pool] = offer
	}
	picture, err := (&clusterstate.Cluster{Kube: kube}).Picture(ctx, offerPools{offers: byPool, kube: kube})
	if err != nil {
		return nil, fmt.Errorf("reading the cluster: %w", err)
	}
	input, pools := picture.Input, picture.Open
	// What the controller would wake, it wakes before it buys.
	input.Sleeping = picture.Asleep
	report := &SimulationReport{Skipped: w.skipped}
	// Pools the controller could not resolve are left out by gathering,
	// as the controller leaves them out of its rounds; say which.
	var poolList v1alpha1.NodePoolList
	if err := kube.List(ctx, &poolList); err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	for _, pool := range poolList.Items {
		if _, ok := pools[pool.Name]; !ok && pool.DeletionTimestamp.IsZero() {
			report.LeftOut = append(report.LeftOut, pool.Name)
		}
	}
	templates, err := w.clusterTemplates(ctx, kube)
	if err != nil {
		return nil, err
	}
	input.DRA = w.withDevices(input.DRA)
	limitRanges := map[string][]corev1.LimitRange{}
	for _, pod := range w.pods {
		ranges, ok := limitRanges[pod.Namespace]
		if !ok {
			var list corev1.LimitRangeList
			if err := kube.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
				return nil, fmt.Errorf("listing the LimitRanges of namespace %s: %w", pod.Namespace, err)
			}
			for _, lr := range append(list.Items, w.limitRanges...) {
				if lr.Namespace == pod.Namespace {
					ranges = append(ranges, lr)
				}
			}
			limitRanges[pod.Namespace] = ranges
		}
		if err := admit(pod, ranges); err != nil {
			report.Refused = append(report.Refused, PodReason{Pod: pod.Namespace + "/" + pod.Name, Reason: "the API server would refuse it: " + err.Error()})
			continue
		}
		claims, err := w.claimsFor(pod, templates)
		if err != nil {
			report.Refused = append(report.Refused, PodReason{Pod: pod.Namespace + "/" + pod.Name, Reason: "no ResourceClaim would be made for it: " + err.Error()})
			continue
		}
		input.DRA.ResourceClaims = append(input.DRA.ResourceClaims, claims...)
		input.Pending = append(input.Pending, pod)
	}
	prices := map[string]float64{}
	if len(w.daemonSets) > 0 {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			return nil, fmt.Errorf("listing claims: %w", err)
		}
		for _, claim := range claims.Items {
			if price, err := strconv.ParseFloat(claim.Spec.Shape.Price, 64); err == nil && claim.Status.NodeName != "" {
				prices[claim.Status.NodeName] = price
			}
		}
	}
	for _, ds := range w.daemonSets {
		cost, err := daemonSetCost(ctx, input.Cluster, prices, ds)
		if err != nil {
			return nil, err
		}
		report.DaemonSets = append(report.DaemonSets, cost)
		input.DaemonSets = append(input.DaemonSets, ds)
	}
	if len(input.Pending) == 0 {
		return report, nil
	}
	sim, err := scheduling.New(ctx, input.Cluster)
	if err != nil {
		return nil, fmt.Errorf("building the simulation: %w", err)
	}
	result, err := sim.Solve(ctx, input.Pending)
	if err != nil {
		return nil, fmt.Errorf("scheduling %d pods: %w", len(input.Pending), err)
	}
	report.add(result)
	return report, nil
}

// add counts a provisioning decision's new nodes by pool, shape and zone.
func (r *SimulationReport) add(result scheduling.Result) {
	type key struct{ pool, shape, zone string }
	index := map[key]int{}
	for _, n := range result.NewNodes {
		if n.Wake != "" {
			wake := SimulatedWake{NodeClaim: n.Wake, Pool: n.Pool, Shape: n.Shape.Name, Zone: n.Zone}
			for _, pod := range n.Pods {
				wake.Pods = append(wake.Pods, pod.Namespace+"/"+pod.Name)
			}
			r.Woken = append(r.Woken, wake)
			continue
		}
		k := key{n.Pool, n.Shape.Name, n.Zone}
		i, ok := index[k]
		if !ok {
			i = len(r.NewNodes)
			index[k] = i
			r.NewNodes = append(r.NewNodes, SimulatedNodes{Pool: n.Pool, Shape: n.Shape.Name, Zone: n.Zone})
		}
		r.NewNodes[i].Count++
		r.NewNodes[i].PricePerHour += n.Shape.Price
		for _, pod := range n.Pods {
			r.NewNodes[i].Pods = append(r.NewNodes[i].Pods, pod.Namespace+"/"+pod.Name)
		}
		r.NewNodeCount++
		r.PricePerHour += n.Shape.Price
	}
	sort.Slice(r.NewNodes, func(i, j int) bool {
		a, b := r.NewNodes[i], r.NewNodes[j]
		if a.Pool != b.Pool {
			return a.Pool < b.Pool
		}
		if a.Shape != b.Shape {
			return a.Shape < b.Shape
		}
		return a.Zone < b.Zone
	})
	r.Placed = len(result.Placements)
	for _, u := range result.Unschedulable {
		r.Pending = append(r.Pending, PodReason{Pod: u.Pod.Namespace + "/" + u.Pod.Name, Reason: u.Reason})
	}
}

// daemonSetCost says on which existing nodes a DaemonSet would run, as
// the scheduling package decides it for template nodes (node affinity,
// the tolerations the DaemonSet controller adds), whether its pod fits in
// what the node's pods leave free, and what share of the nodes' prices
// (from their claims) its pods take.
func daemonSetCost(ctx context.Context, cluster scheduling.Cluster, prices map[string]float64, ds *appsv1.DaemonSet) (DaemonSetCost, error) {
	probe := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	requests := resourcehelper.PodRequests(probe, resourcehelper.PodResourcesOptions{})
	cost := DaemonSetCost{DaemonSet: ds.Namespace + "/" + ds.Name, PodRequests: requests}
	used := map[string]corev1.ResourceList{}
	for _, pod := range cluster.Pods {
		if pod.Spec.NodeName == "" || scheduling.Terminated(pod) {
			continue
		}
		sum := used[pod.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
		}
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
		used[pod.Spec.NodeName] = sum
	}
	for _, node := range cluster.Nodes {
		// Whether it selects the node, judged on the node with room for
		// anything: room is checked below against what runs there.
		roomy := node.DeepCopy()
		roomy.Status.Allocatable = corev1.ResourceList{}
		for name, q := range node.Status.Allocatable {
			roomy.Status.Allocatable[name] = q
		}
		for name, q := range requests {
			roomy.Status.Allocatable[name] = *resource.NewQuantity(q.Value()+1<<40, q.Format)
		}
		roomy.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(1<<20, resource.DecimalSI)
		pods, err := scheduling.DaemonSetPods(ctx, roomy, []*appsv1.DaemonSet{ds})
		if err != nil {
			return cost, fmt.Errorf("placing DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
		}
		if len(pods) == 0 {
			continue
		}
		cost.ExistingNodes++
		fits := true
		for name, want := range requests {
			free := node.Status.Allocatable[name].DeepCopy()
			taken := used[node.Name][name]
			free.Sub(taken)
			if free.Cmp(want) < 0 {
				fits = false
			}
		}
		if !fits {
			cost.NoRoom = append(cost.NoRoom, node.Name)
			continue
		}
		allocatable := node.Status.Allocatable[corev1.ResourceCPU]
		if price := prices[node.Name]; price > 0 && !allocatable.IsZero() {
			cost.PricePerHour += price * float64(requests.Cpu().MilliValue()) / float64(allocatable.MilliValue())
		}
	}
	sort.Strings(cost.NoRoom)
	return cost, nil
}

func writeSimulation(w io.Writer, r *SimulationReport) error {
	if len(r.NewNodes) > 0 {
		table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(table, "POOL\tSHAPE\tZONE\tCOUNT\tPRICE/H")
		for _, n := range r.NewNodes {
			fmt.Fprintf(table, "%s\t%s\t%s\t%d\t%s\n", n.Pool, n.Shape, orDash(n.Zone), n.Count, formatPrice(n.PricePerHour))
		}
		if err := table.Flush(); err != nil {
			return err
		}
	}
	if r.NewNodeCount == 0 {
		fmt.Fprintf(w, "would buy no node; %d %s would go on existing or booting nodes\n", r.Placed, plural(r.Placed, "pod", "pods"))
	} else {
		fmt.Fprintf(w, "would buy %d %s for %s/h; %d %s would go on existing or booting nodes\n", r.NewNodeCount, plural(r.NewNodeCount, "node", "nodes"),
			formatPrice(r.PricePerHour), r.Placed, plural(r.Placed, "pod", "pods"))
	}
	for _, wake := range r.Woken {
		fmt.Fprintf(w, "would wake sleeping claim %s (pool %s, shape %s", wake.NodeClaim, wake.Pool, wake.Shape)
		if wake.Zone != "" {
			fmt.Fprintf(w, ", zone %s", wake.Zone)
		}
		fmt.Fprintf(w, ") for %d %s\n", len(wake.Pods), plural(len(wake.Pods), "pod", "pods"))
	}
	for _, ds := range r.DaemonSets {
		fmt.Fprintf(w, "DaemonSet %s: a pod (%s) on each of %d existing %s and on every new node it selects",
			ds.DaemonSet, formatResources(ds.PodRequests), ds.ExistingNodes, plural(ds.ExistingNodes, "node", "nodes"))
		if ds.PricePerHour > 0 {
			fmt.Fprintf(w, ", taking %s/h of the existing nodes' price", formatPrice(ds.PricePerHour))
		}
		fmt.Fprintln(w)
		if len(ds.NoRoom) > 0 {
			fmt.Fprintf(w, "  its pod would stay pending on %d %s without room (a DaemonSet's pod buys no node): %s\n",
				len(ds.NoRoom), plural(len(ds.NoRoom), "node", "nodes"), strings.Join(ds.NoRoom, ", "))
		}
	}
	if len(r.LeftOut) > 0 {
		fmt.Fprintf(w, "pools left out, as the controller leaves them out now (no shapes resolved; see their events): %s\n", strings.Join(r.LeftOut, ", "))
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "%d %s the API server would refuse:\n", len(r.Refused), plural(len(r.Refused), "pod", "pods"))
		for _, p := range r.Refused {
			fmt.Fprintf(w, "  %s: %s\n", p.Pod, p.Reason)
		}
	}
	if len(r.Pending) > 0 {
		fmt.Fprintf(w, "%d %s would stay pending:\n", len(r.Pending), plural(len(r.Pending), "pod", "pods"))
		for _, p := range r.Pending {
			fmt.Fprintf(w, "  %s: no pool can hold the pod: %s\n", p.Pod, p.Reason)
		}
	}
	if len(r.Skipped) > 0 {
		skipped := append([]string(nil), r.Skipped...)
		sort.Strings(skipped)
		fmt.Fprintf(w, "skipped %d %s that make no pods: %s\n", len(skipped), plural(len(skipped), "object", "objects"), strings.Join(skipped, ", "))
	}
	return nil
}

// formatResources writes a resource list as name=quantity, by name.
func formatResources(list corev1.ResourceList) string {
	names := make([]string, 0, len(list))
	for name := range list {
		names = append(names, string(name))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		q := list[corev1.ResourceName(name)]
		parts = append(parts, name+"="+q.String())
	}
	if len(parts) == 0 {
		return "no requests"
	}
	return strings.Join(parts, ", ")
}

// readOnly is a client whose every write fails: the simulation must not
// change the cluster, whatever code it runs.
type readOnly struct {
	client.Reader
}

var errReadOnly = errors.New("the simulation writes nothing")

func (readOnly) Create(context.Context, client.Object, ...client.CreateOption) error {
	return errReadOnly
}
func (readOnly) Delete(context.Context, client.Object, ...client.DeleteOption) error {
	return errReadOnly
}
func (readOnly) Update(context.Context, client.Object, ...client.UpdateOption) error {
	return errReadOnly
}
func (readOnly) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return errReadOnly
}
func (readOnly) Apply(context.Context, runtime.ApplyConfiguration, ...client.ApplyOption) error {
	return errReadOnly
}
func (readOnly) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return errReadOnly
}
func (readOnly) Status() client.SubResourceWriter            { return nil }
func (readOnly) SubResource(string) client.SubResourceClient { return nil }
func (readOnly) Scheme() *runtime.Scheme                     { return scheme.New() }
func (readOnly) RESTMapper() meta.RESTMapper                 { return nil }
func (readOnly) GroupVersionKindFor(runtime.Object) (schema.GroupVersionKind, error) {
	return schema.GroupVersionKind{}, errReadOnly
}
func (readOnly) IsObjectNamespaced(runtime.Object) (bool, error) { return false, errReadOnly }

type offerProvider map[string]decisions.PoolOffer

func (p offerProvider) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	offer, ok := p[pool.Name]
	if !ok {
		return nil, fmt.Errorf("the controller has not resolved pool %s's shapes yet", pool.Name)
	}
	shapes := make([]provider.Shape, 0, len(offer.Shapes))
	for _, shape := range offer.Shapes {
		shapes = append(shapes, provider.Shape{Name: shape.Name, Capacity: shape.Capacity, Price: shape.Price})
	}
	return shapes, nil
}

func (offerProvider) Create(context.Context, *v1alpha1.NodeClaim, provider.CreateOptions) (*provider.Instance, error) {
	return nil, errReadOnly
}
func (offerProvider) Delete(context.Context, string) error { return errReadOnly }
func (offerProvider) Get(context.Context, string) (*provider.Instance, error) {
	return nil, errReadOnly
}
func (offerProvider) List(context.Context) ([]*provider.Instance, error) { return nil, errReadOnly }

// offerPools says which pools can provision from the controller's record
// of what it resolved for each (its shapes, zones and backed-off shapes),
// checked as a provisioning round checks a pool it resolves afresh: a pool
// the controller has no offer of, whose shapes or template can make no
// node, or whose NodeProvider is gone, is left out.
type offerPools struct {
	offers map[string]decisions.PoolOffer
	kube   client.Reader
}

func (o offerPools) UsablePools(ctx context.Context, pools []v1alpha1.NodePool, claimsByPool map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool) {
	open = map[string]scheduling.Pool{}
	for i := range pools {
		pool := &pools[i]
		if !pool.DeletionTimestamp.IsZero() {
			continue
		}
		schedulingPool, err := o.resolve(ctx, pool, claimsByPool[pool.Name])
		if err != nil {
			log.FromContext(ctx).V(1).Info("pool left out", "nodePool", pool.Name, "reason", err.Error())
			continue
		}
		open[pool.Name] = schedulingPool
	}
	return open, nil
}

func (o offerPools) resolve(ctx context.Context, pool *v1alpha1.NodePool, claims []*v1alpha1.NodeClaim) (scheduling.Pool, error) {
	offered, err := offerProvider(o.offers).Shapes(ctx, pool)
	if err != nil {
		return scheduling.Pool{}, err
	}
	shapes, err := scheduling.PoolShapes(pool, offered)
	if err != nil {
		return scheduling.Pool{}, fmt.Errorf("template invalid: %w", err)
	}
	var nodeProvider v1alpha1.NodeProvider
	if err := o.kube.Get(ctx, client.ObjectKey{Name: pool.Spec.ProviderRef.Name}, &nodeProvider); err != nil {
		return scheduling.Pool{}, fmt.Errorf("reading NodeProvider %s: %w", pool.Spec.ProviderRef.Name, err)
	}
	if err := poolclaims.TemplateProblem(pool, shapes); err != nil {
		return scheduling.Pool{}, fmt.Errorf("template invalid: %w", err)
	}
	offer := o.offers[pool.Name]
	nodes, resources := poolclaims.InUseOf(claims)
	return scheduling.Pool{
		NodePool: pool,
		Shapes:   shapes,
		Zones:    offer.Zones,
		InUse: scheduling.Usage{
			Nodes: int64(nodes), CPU: resources[corev1.ResourceCPU], Memory: resources[corev1.ResourceMemory],
		},
		Unavailable:   offer.Unavailable,
		UnavailableIn: offer.UnavailableIn,
	}, nil
}
