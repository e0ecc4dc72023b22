package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheme"
)

func newGetCommand(o *options) *cobra.Command {
	var pools []string
	var watch bool
	var output string
	cmd := &cobra.Command{
		Use:   "get [--pool POOL] [-w]",
		Short: "List pools, their claims and nodes in one table: shape, zone, age, utilisation, price per hour, phase",
		Example: `  kubectl claimscale get
  kubectl claimscale get --pool general -w
  kubectl claimscale get -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if watch && output != "" {
				return fmt.Errorf("-w prints the table's changed rows; it takes no -o")
			}
			config, err := o.config.ToRESTConfig()
			if err != nil {
				return fmt.Errorf("reading the kubeconfig: %w", err)
			}
			kube, err := client.NewWithWatch(config, client.Options{Scheme: scheme.New()})
			if err != nil {
				return fmt.Errorf("connecting to the API server: %w", err)
			}
			view, err := readClusterView(cmd.Context(), kube, pools)
			if err != nil {
				return err
			}
			switch {
			case output != "":
				return printStructured(o.streams.Out, output, view.report(time.Now()))
			case watch:
				return watchClusterView(cmd.Context(), kube, pools, view, o.streams.Out)
			}
			return view.write(o.streams.Out, time.Now())
		},
	}
	cmd.Flags().StringArrayVar(&pools, "pool", nil, "only this pool (repeatable)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the table, print each row again when its claim, node or pool changes")
	addOutputFlag(cmd, &output)
	return cmd
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

// readClusterView reads the pools (only, when set) and their claims and
// nodes.
func readClusterView(ctx context.Context, kube client.Reader, only []string) (*clusterView, error) {
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
	wanted := func(pool string) bool { return len(only) == 0 || slices.Contains(only, pool) }
	view := &clusterView{nodes: map[string]*corev1.Node{}, requested: map[string]corev1.ResourceList{}}
	for _, pool := range pools.Items {
		if wanted(pool.Name) {
			view.pools = append(view.pools, pool)
		}
	}
	for _, claim := range claims.Items {
		if wanted(claim.Spec.NodePoolRef.Name) {
			view.claims = append(view.claims, claim)
		}
	}
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
		for name, quantity := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			total := sum[name]
			total.Add(quantity)
			sum[name] = total
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

// ClusterReport is get's answer, as -o json|yaml print it.
type ClusterReport struct {
	Pools  []PoolRow  `json:"pools"`
	Claims []ClaimRow `json:"claims"`
}

// PoolRow is a pool: its claims, node limit, price and phase.
type PoolRow struct {
	Name   string `json:"name"`
	Claims int    `json:"claims"`
	// NodeLimit is the pool's limit of nodes, if it has one.
	NodeLimit    *int32  `json:"nodeLimit,omitempty"`
	PricePerHour float64 `json:"pricePerHour"`
	Age          string  `json:"age"`
	Phase        string  `json:"phase"`
	// Gone is set for a pool that no longer exists but still has claims.
	Gone bool `json:"gone,omitempty"`
}

// ClaimRow is a claim and its node.
type ClaimRow struct {
	Pool      string `json:"pool"`
	NodeClaim string `json:"nodeClaim"`
	Node      string `json:"node,omitempty"`
	Shape     string `json:"shape"`
	Zone      string `json:"zone,omitempty"`
	Age       string `json:"age"`
	// CPU and Memory are the shares of the node's allocatable the pods on
	// it request ("-" before the node exists).
	CPU          string  `json:"cpu"`
	Memory       string  `json:"memory"`
	PricePerHour float64 `json:"pricePerHour"`
	Phase        string  `json:"phase"`
}

// report is the view as rows: each pool (and each pool named by a claim
// that is gone), then its claims.
func (v *clusterView) report(now time.Time) ClusterReport {
	report := ClusterReport{Pools: []PoolRow{}, Claims: []ClaimRow{}}
	byPool := map[string][]v1alpha1.NodeClaim{}
	for _, claim := range v.claims {
		byPool[claim.Spec.NodePoolRef.Name] = append(byPool[claim.Spec.NodePoolRef.Name], claim)
	}
	rows := make([]PoolRow, 0, len(v.pools))
	seen := map[string]bool{}
	for _, pool := range v.pools {
		row := PoolRow{Name: pool.Name, Age: duration.HumanDuration(now.Sub(pool.CreationTimestamp.Time)), Phase: poolPhase(&pool)}
		if pool.Spec.Limits != nil && pool.Spec.Limits.Nodes != nil {
			row.NodeLimit = pool.Spec.Limits.Nodes
		}
		rows = append(rows, row)
		seen[pool.Name] = true
	}
	for name := range byPool {
		if !seen[name] {
			rows = append(rows, PoolRow{Name: name, Age: "-", Phase: "Gone", Gone: true})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	for _, row := range rows {
		for _, claim := range byPool[row.Name] {
			node := v.nodes[claim.Status.NodeName]
			cpu, memory := "-", "-"
			if node != nil {
				cpu = utilisation(v.requested[node.Name], node.Status.Allocatable, corev1.ResourceCPU)
				memory = utilisation(v.requested[node.Name], node.Status.Allocatable, corev1.ResourceMemory)
			}
			price, _ := strconv.ParseFloat(claim.Spec.Shape.Price, 64)
			row.Claims++
			row.PricePerHour += price
			report.Claims = append(report.Claims, ClaimRow{
				Pool: row.Name, NodeClaim: claim.Name, Node: claim.Status.NodeName, Shape: claim.Spec.Shape.Name,
				Zone: zoneOfClaim(&claim, node), Age: duration.HumanDuration(now.Sub(claim.CreationTimestamp.Time)),
				CPU: cpu, Memory: memory, PricePerHour: price, Phase: ClaimPhase(&claim),
			})
		}
		report.Pools = append(report.Pools, row)
	}
	return report
}

const tableHeader = "POOL\tCLAIM\tNODE\tSHAPE\tZONE\tAGE\tCPU\tMEMORY\tPRICE/H\tPHASE"

// rows are the table's lines, without the header, keyed by pool and
// claim (a pool's own line has an empty claim).
func (r ClusterReport) rows() (keys []string, lines map[string]string) {
	lines = map[string]string{}
	claims := map[string][]ClaimRow{}
	for _, c := range r.Claims {
		claims[c.Pool] = append(claims[c.Pool], c)
	}
	for _, p := range r.Pools {
		limit := "no node limit"
		if p.NodeLimit != nil {
			limit = fmt.Sprintf("limit %d %s", *p.NodeLimit, plural(int(*p.NodeLimit), "node", "nodes"))
		}
		if p.Gone {
			limit = "pool deleted"
		}
		key := p.Name + "/"
		keys = append(keys, key)
		lines[key] = fmt.Sprintf("%s\t(pool: %d %s, %s)\t\t\t\t%s\t\t\t%s\t%s", p.Name, p.Claims, plural(p.Claims, "claim", "claims"), limit, p.Age, formatPrice(p.PricePerHour), p.Phase)
		for _, c := range claims[p.Name] {
			key := p.Name + "/" + c.NodeClaim
			keys = append(keys, key)
			lines[key] = fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", c.Pool, c.NodeClaim, orDash(c.Node), c.Shape, orDash(c.Zone), c.Age,
				c.CPU, c.Memory, formatPrice(c.PricePerHour), c.Phase)
		}
	}
	return keys, lines
}

func (v *clusterView) write(w io.Writer, now time.Time) error {
	report := v.report(now)
	if len(report.Pools) == 0 {
		fmt.Fprintln(w, "No pools found.")
		return nil
	}
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, tableHeader)
	keys, lines := report.rows()
	for _, key := range keys {
		fmt.Fprintln(table, lines[key])
	}
	return table.Flush()
}

// watchClusterView prints the table, then, as kubectl get -w does, each
// row again when it changes (its age aside), in the table's columns,
// until the context ends. Claims, nodes and pools are watched;
// utilisation is read anew then.
func watchClusterView(ctx context.Context, kube client.WithWatch, only []string, view *clusterView, w io.Writer) error {
	changes := make(chan struct{}, 1)
	for _, list := range []client.ObjectList{&v1alpha1.NodeClaimList{}, &v1alpha1.NodePoolList{}, &corev1.NodeList{}} {
		watcher, err := kube.Watch(ctx, list)
		if err != nil {
			return fmt.Errorf("watching %T: %w", list, err)
		}
		defer watcher.Stop()
		go func() {
			for range watcher.ResultChan() {
				select {
				case changes <- struct{}{}:
				default:
				}
			}
		}()
	}
	keys, shown := view.report(time.Now()).rows()
	columns := &columns{}
	columns.fit(tableHeader)
	for _, key := range keys {
		columns.fit(shown[key])
	}
	columns.print(w, tableHeader)
	for _, key := range keys {
		columns.print(w, shown[key])
	}
	stable := func(line string) string {
		// The age column moves by itself; a row is printed again when
		// something else changed.
		fields := strings.Split(line, "\t")
		if len(fields) > 5 {
			fields[5] = ""
		}
		return strings.Join(fields, "\t")
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		}
		next, err := readClusterView(ctx, kube, only)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		keys, lines := next.report(time.Now()).rows()
		for _, key := range keys {
			if old, ok := shown[key]; !ok || stable(old) != stable(lines[key]) {
				columns.print(w, lines[key])
			}
		}
		for key, old := range shown {
			if _, ok := lines[key]; !ok && !strings.HasSuffix(key, "/") {
				// A claim that went: its last row, as deleted.
				fields := strings.Split(old, "\t")
				fields[len(fields)-1] = "Deleted"
				columns.print(w, strings.Join(fields, "\t"))
			}
		}
		shown = lines
	}
}

// columns are the widths of a table's tab-separated columns, so that rows
// printed one at a time line up under the header.
type columns struct{ widths []int }

func (c *columns) fit(line string) {
	for i, field := range strings.Split(line, "\t") {
		if i == len(c.widths) {
			c.widths = append(c.widths, 0)
		}
		c.widths[i] = max(c.widths[i], len(field))
	}
}

func (c *columns) print(w io.Writer, line string) {
	fields := strings.Split(line, "\t")
	var b strings.Builder
	for i, field := range fields {
		if i == len(fields)-1 {
			b.WriteString(field)
			break
		}
		width := len(field)
		if i < len(c.widths) {
			width = max(width, c.widths[i])
		}
		b.WriteString(field)
		b.WriteString(strings.Repeat(" ", width-len(field)+2))
	}
	fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
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
