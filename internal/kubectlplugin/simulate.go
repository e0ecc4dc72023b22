package kubectlplugin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/pkg/provider"
)

func newSimulateCommand(o *options) *cobra.Command {
	var files []string
	var from string
	var scaleDown bool
	cmd := &cobra.Command{
		Use:   "simulate (-f WORKLOAD.yaml | --scale-down)",
		Short: "Say what claimscale would buy for more pods, deciding as the controller does, without writing anything",
		Long: `simulate reads the cluster (nodes, pods, pools, claims, DaemonSets) and what each pool can make
from the controller, adds the pods of the Deployments, StatefulSets, Jobs and Pods in the files, and
decides with the controller's own code where they would go: which new nodes (pool, shape, count, hourly
cost) and which pods would stay pending, and why. It writes nothing.

With --scale-down it decides as a disruption round would now instead: which nodes consolidation
would delete or replace (with the new node's pool, shape and the hourly saving), and why each other
node stays.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			var workload []*corev1.Pod
			for _, file := range files {
				pods, err := readWorkload(file, namespace)
				if err != nil {
					return err
				}
				workload = append(workload, pods...)
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
				writePlan(o.streams.Out, plan, leftOut)
				return nil
			}
			result, err := simulate(cmd.Context(), kube, offers, workload)
			if err != nil {
				return err
			}
			return writeSimulation(o.streams.Out, result)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "replay a file written by `kubectl claimscale snapshot` instead of reading the cluster (no cluster or controller needed)")
	cmd.Flags().BoolVar(&scaleDown, "scale-down", false, "say what consolidation would remove or replace now, and why every other node stays")
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "YAML or JSON file of Deployments, StatefulSets, Jobs and Pods to add (repeatable)")
	return cmd
}

// simulation is a provisioning decision and the pools it was taken with.
type simulation struct {
	result scheduling.Result
	pools  map[string]*v1alpha1.NodePool
	// leftOut are pools the simulation could not use: the controller has
	// no offer of theirs (not resolved yet, or their provider fails).
	leftOut []string
}

// simulate gathers the cluster as a provisioning round does, through a
// reader that cannot write, adds the workload as pending pods, and
// decides with the scheduling package, as the controller does.
func simulate(ctx context.Context, kube client.Reader, offers []decisions.PoolOffer, workload []*corev1.Pod) (simulation, error) {
	byPool := map[string]decisions.PoolOffer{}
	for _, offer := range offers {
		byPool[offer.Pool] = offer
	}
	input, pools, err := provisioning.ClusterFromCache(ctx, readOnly{Reader: kube}, offerResolver(byPool), offerCapacity(byPool))
	if err != nil {
		return simulation{}, fmt.Errorf("reading the cluster: %w", err)
	}
	// Pools the controller could not resolve are left out by gathering,
	// as the controller leaves them out of its rounds; say which.
	var leftOut []string
	var poolList v1alpha1.NodePoolList
	if err := kube.List(ctx, &poolList); err != nil {
		return simulation{}, fmt.Errorf("listing pools: %w", err)
	}
	for _, pool := range poolList.Items {
		if _, ok := pools[pool.Name]; !ok && pool.DeletionTimestamp.IsZero() {
			leftOut = append(leftOut, pool.Name)
		}
	}
	input.Pending = append(input.Pending, workload...)
	if len(input.Pending) == 0 {
		return simulation{pools: pools, leftOut: leftOut}, nil
	}
	sim, err := scheduling.New(ctx, input.Cluster)
	if err != nil {
		return simulation{}, fmt.Errorf("building the simulation: %w", err)
	}
	result, err := sim.Solve(ctx, input.Pending)
	if err != nil {
		return simulation{}, fmt.Errorf("scheduling %d pods: %w", len(input.Pending), err)
	}
	return simulation{result: result, pools: pools, leftOut: leftOut}, nil
}

func writeSimulation(w io.Writer, s simulation) error {
	type key struct{ pool, shape, zone string }
	counts := map[key]int{}
	prices := map[key]float64{}
	for _, n := range s.result.NewNodes {
		k := key{n.Pool, n.Shape.Name, n.Zone}
		counts[k]++
		prices[k] = n.Shape.Price
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.pool != b.pool {
			return a.pool < b.pool
		}
		if a.shape != b.shape {
			return a.shape < b.shape
		}
		return a.zone < b.zone
	})
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	total := 0.0
	fmt.Fprintln(table, "POOL\tSHAPE\tZONE\tCOUNT\tPRICE/H")
	for _, k := range keys {
		cost := prices[k] * float64(counts[k])
		total += cost
		fmt.Fprintf(table, "%s\t%s\t%s\t%d\t%s\n", k.pool, k.shape, orDash(k.zone), counts[k], formatPrice(cost))
	}
	if err := table.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "would buy %d nodes for %s/h; %d pods would go on existing or booting nodes\n", len(s.result.NewNodes), formatPrice(total), len(s.result.Placements))
	if len(s.leftOut) > 0 {
		fmt.Fprintf(w, "pools left out, as the controller leaves them out now (no shapes resolved; see their events): %s\n", strings.Join(s.leftOut, ", "))
	}
	if len(s.result.Unschedulable) > 0 {
		fmt.Fprintf(w, "%d pods would stay pending:\n", len(s.result.Unschedulable))
		for _, u := range s.result.Unschedulable {
			fmt.Fprintf(w, "  %s/%s: no pool can hold the pod: %s\n", u.Pod.Namespace, u.Pod.Name, u.Reason)
		}
	}
	return nil
}

// readWorkload turns the objects of a file into the pods they would make,
// pending: a Deployment's or StatefulSet's replicas, a Job's parallelism.
func readWorkload(path, namespace string) ([]*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	decoder := serializer.NewCodecFactory(scheme.New()).UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var pods []*corev1.Pod
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		object, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		switch o := object.(type) {
		case *appsv1.Deployment:
			pods = append(pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Replicas))...)
		case *appsv1.StatefulSet:
			pods = append(pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Replicas))...)
		case *batchv1.Job:
			pods = append(pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Parallelism))...)
		case *corev1.Pod:
			pods = append(pods, podsOf(o.ObjectMeta, namespace, corev1.PodTemplateSpec{ObjectMeta: o.ObjectMeta, Spec: o.Spec}, 1)...)
		default:
			return nil, fmt.Errorf("%s: %s is not a Deployment, StatefulSet, Job or Pod", path, object.GetObjectKind().GroupVersionKind().Kind)
		}
	}
	return pods, nil
}

func replicas(n *int32) int {
	if n == nil {
		return 1
	}
	return int(*n)
}

// podsOf makes n pending pods of a template, named after their owner.
func podsOf(owner metav1.ObjectMeta, namespace string, template corev1.PodTemplateSpec, n int) []*corev1.Pod {
	if owner.Namespace != "" {
		namespace = owner.Namespace
	}
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
		pod.Name = fmt.Sprintf("%s-%d", owner.Name, i)
		pod.Namespace = namespace
		pod.UID = types.UID("simulated-" + pod.Namespace + "-" + pod.Name)
		pod.Status.Phase = corev1.PodPending
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		pods = append(pods, pod)
	}
	return pods
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

// offerResolver answers each pool's shapes from the controller's record.
type offerResolver map[string]decisions.PoolOffer

func (r offerResolver) ForProviderName(context.Context, string) (provider.Provider, error) {
	return offerProvider(r), nil
}

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

// offerCapacity answers each pool's zones and backed-off shapes from the
// controller's record.
type offerCapacity map[string]decisions.PoolOffer

func (c offerCapacity) Narrow(pool string, _, _ []string) (available, unavailable []string, unavailableIn map[string][]string) {
	offer := c[pool]
	return offer.Zones, offer.Unavailable, offer.UnavailableIn
}
