// Command dashboards writes claimscale's Grafana dashboards, built with
// Grafana's Foundation SDK, as JSON into the directory given (the chart's
// dashboards/, which `make dashboards` regenerates and `make verify`
// checks). Every query names only metrics internal/metrics serves; the
// monitoring e2e test evaluates each against a real Prometheus.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboards OUTPUT-DIR")
		os.Exit(2)
	}
	for name, builder := range map[string]*dashboard.DashboardBuilder{
		"overview":     overview(),
		"disruption":   disruption(),
		"externalgrpc": externalGRPC(),
	} {
		if err := write(filepath.Join(os.Args[1], name+".json"), builder); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func write(path string, builder *dashboard.DashboardBuilder) error {
	built, err := builder.Build()
	if err != nil {
		return fmt.Errorf("building %s: %w", path, err)
	}
	out, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// datasource is the dashboard's Prometheus, picked by a variable so one
// dashboard serves any Grafana.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func newDashboard(uid, title, description string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"claimscale"}).
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
}

type query struct{ expr, legend string }

func graph(title, description, unit string, stacked bool, queries ...query) *timeseries.PanelBuilder {
	panel := timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Min(0).
		Height(8).
		Span(12)
	if stacked {
		panel.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(30)
	}
	for _, q := range queries {
		panel.WithTarget(prometheus.NewDataqueryBuilder().Expr(q.expr).LegendFormat(q.legend))
	}
	return panel
}

func single(title, description, unit string, q query) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Height(4).
		Span(6).
		WithTarget(prometheus.NewDataqueryBuilder().Expr(q.expr).LegendFormat(q.legend).Instant())
}

func overview() *dashboard.DashboardBuilder {
	return newDashboard("claimscale-overview", "claimscale / Overview",
		"What claimscale's nodes cost and whether it keeps up with pending pods.").
		WithRow(dashboard.NewRowBuilder("Now")).
		WithPanel(single("Hourly cost", "Summed shape prices of all claims not being deleted, per hour, in the currency of the prices.", "none",
			query{`sum(claimscale_nodepool_hourly_cost) or vector(0)`, "cost/h"})).
		WithPanel(single("Nodes", "Claims not being deleted, all pools.", "none",
			query{`sum(claimscale_nodepool_nodes)`, "nodes"})).
		WithPanel(single("Unschedulable pods", "Pending pods no pool could hold in the last provisioning round.", "none",
			query{`max(claimscale_provisioning_unschedulable_pods)`, "pods"})).
		WithPanel(single("Last provisioning round", "Seconds since a provisioning round last finished without error.", "s",
			query{`time() - max(claimscale_provisioning_last_success_timestamp_seconds)`, "age"})).
		WithRow(dashboard.NewRowBuilder("Capacity and cost")).
		WithPanel(graph("Nodes by pool", "Claims not being deleted.", "none", true,
			query{`sum by (nodepool) (claimscale_nodepool_nodes)`, "{{nodepool}}"})).
		WithPanel(graph("Hourly cost by pool and shape", "Shape prices of the claims that run, per hour. Unpriced shapes count zero.", "none", true,
			query{`sum by (nodepool, shape) (claimscale_nodepool_hourly_cost)`, "{{nodepool}} / {{shape}}"})).
		WithPanel(graph("Claims by phase", "Each pool's claims from launching to terminating.", "none", true,
			query{`sum by (phase) (claimscale_nodeclaims)`, "{{phase}}"})).
		WithPanel(graph("Pool limit usage", "Share of each pool's spec.limits in use; 1 is full.", "percentunit", false,
			query{`max by (nodepool, resource) (claimscale_nodepool_limit_usage_ratio)`, "{{nodepool}} {{resource}}"})).
		WithRow(dashboard.NewRowBuilder("Keeping up")).
		WithPanel(graph("Pending pods", "Pods no pool could hold, per provisioning round.", "none", false,
			query{`max(claimscale_provisioning_unschedulable_pods)`, "unschedulable"})).
		WithPanel(graph("Node launch to Ready", "Seconds from claim creation to Ready, percentiles over 10 minutes.", "s", false,
			query{`histogram_quantile(0.5, sum by (le) (rate(claimscale_nodeclaims_launch_to_ready_seconds_bucket[10m])))`, "p50"},
			query{`histogram_quantile(0.9, sum by (le) (rate(claimscale_nodeclaims_launch_to_ready_seconds_bucket[10m])))`, "p90"},
			query{`histogram_quantile(0.99, sum by (le) (rate(claimscale_nodeclaims_launch_to_ready_seconds_bucket[10m])))`, "p99"})).
		WithPanel(graph("Pod scheduling latency", "Seconds from creation to binding of the pods claimscale made a claim for, percentiles over 10 minutes.", "s", false,
			query{`histogram_quantile(0.5, sum by (le) (rate(claimscale_provisioning_pod_bound_duration_seconds_bucket[10m])))`, "p50"},
			query{`histogram_quantile(0.9, sum by (le) (rate(claimscale_provisioning_pod_bound_duration_seconds_bucket[10m])))`, "p90"},
			query{`histogram_quantile(0.99, sum by (le) (rate(claimscale_provisioning_pod_bound_duration_seconds_bucket[10m])))`, "p99"})).
		WithPanel(graph("Pod scheduling latency by pool", "p90 seconds from creation to binding over 10 minutes, by the pool of the pod's claim.", "s", false,
			query{`histogram_quantile(0.9, sum by (le, nodepool) (rate(claimscale_provisioning_pod_bound_duration_seconds_bucket[10m])))`, "{{nodepool}}"})).
		WithPanel(graph("Claims created and terminated", "Per minute, by reason.", "none", false,
			query{`sum by (reason) (increase(claimscale_nodeclaims_created_total[5m])) / 5`, "created {{reason}}"},
			query{`sum by (reason) (increase(claimscale_nodeclaims_terminated_total[5m])) / 5`, "terminated {{reason}}"})).
		WithPanel(graph("Scheduling simulation", "Seconds one provisioning round's scheduling simulation took.", "s", false,
			query{`histogram_quantile(0.9, sum by (le) (rate(claimscale_provisioning_scheduling_duration_seconds_bucket[5m])))`, "p90"})).
		WithRow(dashboard.NewRowBuilder("ProvisioningRequests and CapacityBuffers")).
		WithPanel(graph("ProvisioningRequest outcomes", "Conditions requests reached per hour, by class, outcome and reason (Provisioned, Failed, BookingExpired, CapacityRevoked, Waiting, NotAccepted).", "none", true,
			query{`sum by (class, outcome, reason) (increase(claimscale_provisioningrequests_outcomes_total[1h]))`, "{{class}} {{outcome}} {{reason}}"})).
		WithPanel(graph("Time to Provisioned", "Seconds from a request's creation to Provisioned=True, p90 over an hour, by class.", "s", false,
			query{`histogram_quantile(0.9, sum by (le, class) (rate(claimscale_provisioningrequests_provisioned_seconds_bucket[1h])))`, "{{class}}"})).
		WithPanel(graph("Booked requests and buffer pods", "Requests whose capacity is booked now, by class, and the placeholder pods CapacityBuffers keep room for.", "none", false,
			query{`sum by (class) (claimscale_provisioningrequests_booked)`, "booked {{class}}"},
			query{`max(claimscale_capacitybuffers_placeholder_pods)`, "buffer pods"})).
		WithRow(dashboard.NewRowBuilder("Sleeping machines")).
		WithPanel(graph("Sleeping machines by pool", "Machines stopped instead of deleted, with no Node, that a scale-up may wake.", "none", true,
			query{`sum by (nodepool) (claimscale_nodepool_sleeping_machines)`, "{{nodepool}}"})).
		WithPanel(graph("Suspends and wakes", "Per minute, by pool and result.", "none", false,
			query{`sum by (nodepool, result) (increase(claimscale_nodeclaims_suspends_total[5m])) / 5`, "suspend {{nodepool}} {{result}}"},
			query{`sum by (nodepool, result) (increase(claimscale_nodeclaims_wakes_total[5m])) / 5`, "wake {{nodepool}} {{result}}"})).
		WithPanel(graph("Wake to registered", "Seconds from starting a sleeping machine to its Node registering again, percentiles over 10 minutes; compare with Node launch to Ready.", "s", false,
			query{`histogram_quantile(0.5, sum by (le) (rate(claimscale_nodeclaims_wake_to_registered_seconds_bucket[10m])))`, "p50"},
			query{`histogram_quantile(0.9, sum by (le) (rate(claimscale_nodeclaims_wake_to_registered_seconds_bucket[10m])))`, "p90"})).
		WithRow(dashboard.NewRowBuilder("Provider")).
		WithPanel(graph("Provider calls", "Calls per second by provider, operation and result.", "reqps", true,
			query{`sum by (provider, operation, result) (rate(claimscale_provider_calls_total[5m]))`, "{{provider}} {{operation}} {{result}}"})).
		WithPanel(graph("Provider errors", "Failed calls per second by provider and kind (retryable, terminal, insufficient_capacity).", "reqps", true,
			query{`sum by (provider, result) (rate(claimscale_provider_calls_total{result=~"retryable|terminal|insufficient_capacity"}[5m]))`, "{{provider}} {{result}}"})).
		WithPanel(graph("Provider call duration", "p90 seconds by provider and operation.", "s", false,
			query{`histogram_quantile(0.9, sum by (le, provider, operation) (rate(claimscale_provider_call_duration_seconds_bucket[5m])))`, "{{provider}} {{operation}}"}))
}

func disruption() *dashboard.DashboardBuilder {
	return newDashboard("claimscale-disruption", "claimscale / Disruption",
		"Which nodes claimscale could remove, what it decided and how much room the budgets leave.").
		WithRow(dashboard.NewRowBuilder("Candidates and budgets")).
		WithPanel(graph("Eligible nodes", "Nodes that qualify for disruption by pool and reason, before safety rules, budgets and simulation.", "none", true,
			query{`sum by (nodepool, reason) (claimscale_disruption_eligible_nodes)`, "{{nodepool}} {{reason}}"})).
		WithPanel(graph("Budget headroom", "Nodes each pool's budgets let be disrupting at once now, by reason.", "none", false,
			query{`min by (nodepool, reason) (claimscale_disruption_allowed_disruptions)`, "{{nodepool}} {{reason}}"})).
		WithPanel(graph("Blocked nodes", "Nodes that qualify but are kept, by pool and the reason on their Consolidatable condition: DoNotDisrupt, PodDisruptionBudget, PodWithoutController, DisruptionBudget.", "none", true,
			query{`sum by (nodepool, reason) (claimscale_disruption_blocked_nodes)`, "{{nodepool}} {{reason}}"})).
		WithRow(dashboard.NewRowBuilder("Decisions")).
		WithPanel(graph("Disruption decisions", "Nodes per hour by reason and action.", "none", true,
			query{`sum by (reason, action) (increase(claimscale_disruption_decisions_total[1h]))`, "{{reason}} {{action}}"})).
		WithPanel(graph("Claims terminated", "Per hour by pool and reason.", "none", true,
			query{`sum by (nodepool, reason) (increase(claimscale_nodeclaims_terminated_total[1h]))`, "{{nodepool}} {{reason}}"})).
		WithRow(dashboard.NewRowBuilder("Repair")).
		WithPanel(graph("Unhealthy nodes", "Nodes of each pool with repair set that are unhealthy now.", "none", false,
			query{`sum by (nodepool) (claimscale_repair_unhealthy_nodes)`, "{{nodepool}}"})).
		WithPanel(graph("Repair paused", "1 while too many of a pool's nodes are unhealthy to repair one more.", "none", false,
			query{`max by (nodepool) (claimscale_repair_paused)`, "{{nodepool}}"}))
}

func externalGRPC() *dashboard.DashboardBuilder {
	return newDashboard("claimscale-externalgrpc", "claimscale / externalgrpc",
		"cluster-autoscaler's calls to claimscale's externalgrpc provider, and the node group changes it refused.").
		WithRow(dashboard.NewRowBuilder("Calls")).
		WithPanel(graph("Calls by method", "cluster-autoscaler's gRPC calls per second by method and status code.", "reqps", true,
			query{`sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total[5m]))`, "{{grpc_method}} {{grpc_code}}"})).
		WithPanel(graph("Call duration", "p90 seconds by method.", "s", false,
			query{`histogram_quantile(0.9, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket[5m])))`, "{{grpc_method}}"})).
		WithRow(dashboard.NewRowBuilder("Node group changes")).
		WithPanel(graph("Scale requests", "Node group changes asked for per minute, by pool, operation and result.", "none", true,
			query{`sum by (nodepool, operation, result) (increase(claimscale_externalgrpc_scale_requests_total[5m])) / 5`, "{{nodepool}} {{operation}} {{result}}"})).
		WithPanel(graph("Refusals", "Requests claimscale refused per minute, by pool and operation.", "none", true,
			query{`sum by (nodepool, operation) (increase(claimscale_externalgrpc_scale_requests_total{result="refused"}[5m])) / 5`, "{{nodepool}} {{operation}}"}))
}
