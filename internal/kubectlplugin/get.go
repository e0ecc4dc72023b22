package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheme"
)

func newGetCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "List pools, their claims and nodes in one table: shape, zone, age, utilisation, price per hour, phase",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube, err := o.kubeClient()
			if err != nil {
				return err
			}
			view, err := readClusterView(cmd.Context(), kube)
			if err != nil {
				return err
			}
			return view.write(o.streams.Out, time.Now())
		},
	}
}

// kubeClient is a client with the caller's credentials; the plugin only
// reads through it.
func (o *options) kubeClient() (client.Reader, error) {
	config, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	kube, err := client.New(config, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return kube, nil
}

// clusterView is what `get` shows.
type clusterView struct {
	pools  []v1alpha1.NodePool
	claims []v1alpha1.NodeClaim
	nodes  map[string]*corev1.Node
	// requested sums the requests of the pods bound to each node.
	requested map[string]corev1.ResourceList
}

func readClusterView(ctx context.Context, kube client.Reader) (*clusterView, error) {
	var pools v1alpha1.NodePoolList
	if err := kube.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	var nodes corev1.NodeList
	if err := kube.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var pods corev1.PodList
	if err := kube.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	view := &clusterView{pools: pools.Items, claims: claims.Items, nodes: map[string]*corev1.Node{}, requested: map[string]corev1.ResourceList{}}
	for i := range nodes.Items {
		view.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		sum := view.requested[pod.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			view.requested[pod.Spec.NodeName] = sum
		}
		for _, container := range pod.Spec.Containers {
			for name, quantity := range container.Resources.Requests {
				total := sum[name]
				total.Add(quantity)
				sum[name] = total
			}
		}
	}
	sort.Slice(view.claims, func(i, j int) bool {
		a, b := view.claims[i], view.claims[j]
		if a.Spec.NodePoolRef.Name != b.Spec.NodePoolRef.Name {
			return a.Spec.NodePoolRef.Name < b.Spec.NodePoolRef.Name
		}
		return a.Name < b.Name
	})
	return view, nil
}

func (v *clusterView) write(w io.Writer, now time.Time) error {
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "POOL\tCLAIM\tNODE\tSHAPE\tZONE\tAGE\tCPU\tMEMORY\tPRICE/H\tPHASE")
	byPool := map[string][]v1alpha1.NodeClaim{}
	for _, claim := range v.claims {
		byPool[claim.Spec.NodePoolRef.Name] = append(byPool[claim.Spec.NodePoolRef.Name], claim)
	}
	for _, pool := range v.pools {
		total := 0.0
		for _, claim := range byPool[pool.Name] {
			price, _ := strconv.ParseFloat(claim.Spec.Shape.Price, 64)
			total += price
		}
		limit := "no node limit"
		if pool.Spec.Limits != nil && pool.Spec.Limits.Nodes != nil {
			limit = fmt.Sprintf("limit %d nodes", *pool.Spec.Limits.Nodes)
		}
		fmt.Fprintf(table, "%s\t(pool: %d claims, %s)\t\t\t\t%s\t\t\t%s\t%s\n", pool.Name, len(byPool[pool.Name]), limit,
			duration.HumanDuration(now.Sub(pool.CreationTimestamp.Time)), formatPrice(total), poolPhase(&pool))
		for _, claim := range byPool[pool.Name] {
			node := v.nodes[claim.Status.NodeName]
			cpu, memory := "-", "-"
			if node != nil {
				cpu = utilisation(v.requested[node.Name], node.Status.Allocatable, corev1.ResourceCPU)
				memory = utilisation(v.requested[node.Name], node.Status.Allocatable, corev1.ResourceMemory)
			}
			price, _ := strconv.ParseFloat(claim.Spec.Shape.Price, 64)
			fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pool.Name, claim.Name, orDash(claim.Status.NodeName),
				claim.Spec.Shape.Name, orDash(zoneOfClaim(&claim, node)), duration.HumanDuration(now.Sub(claim.CreationTimestamp.Time)),
				cpu, memory, formatPrice(price), ClaimPhase(&claim))
		}
	}
	return table.Flush()
}

// ClaimPhase is the furthest a claim got in its lifecycle, read from its
// conditions: Terminating, Disrupting, Failed, Ready, Initialized,
// Registered, Launched or Pending.
func ClaimPhase(claim *v1alpha1.NodeClaim) string {
	conditions := claim.Status.Conditions
	switch {
	case !claim.DeletionTimestamp.IsZero():
		return "Terminating"
	case meta.IsStatusConditionTrue(conditions, v1alpha1.ConditionDisrupting):
		return "Disrupting"
	case meta.IsStatusConditionTrue(conditions, v1alpha1.ConditionFailed):
		return "Failed"
	}
	for _, phase := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionInitialized, v1alpha1.ConditionRegistered, v1alpha1.ConditionLaunched} {
		if meta.IsStatusConditionTrue(conditions, phase) {
			return phase
		}
	}
	return "Pending"
}

func poolPhase(pool *v1alpha1.NodePool) string {
	if !pool.DeletionTimestamp.IsZero() {
		return "Terminating"
	}
	if ready := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionReady); ready != nil {
		if ready.Status == "True" {
			return "Ready"
		}
		return "NotReady: " + ready.Reason
	}
	return "-"
}

func utilisation(requested, allocatable corev1.ResourceList, name corev1.ResourceName) string {
	capacity, ok := allocatable[name]
	if !ok || capacity.IsZero() {
		return "-"
	}
	used := requested[name]
	return fmt.Sprintf("%d%%", int64(float64(used.MilliValue())/float64(capacity.MilliValue())*100+0.5))
}

func zoneOfClaim(claim *v1alpha1.NodeClaim, node *corev1.Node) string {
	if node != nil && node.Labels[corev1.LabelTopologyZone] != "" {
		return node.Labels[corev1.LabelTopologyZone]
	}
	for _, requirement := range claim.Spec.Requirements.NodeSelector {
		if requirement.Key == corev1.LabelTopologyZone && len(requirement.Values) == 1 {
			return requirement.Values[0]
		}
	}
	return ""
}

// formatPrice writes a price to six significant digits, as the
// controller's messages do: a decision's price and saving are sums, and
// 0.2 three times is 0.6000000000000001 in floating point.
func formatPrice(price float64) string {
	if price == 0 {
		return "-"
	}
	return strconv.FormatFloat(price, 'g', 6, 64)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
