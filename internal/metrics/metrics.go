// Package metrics defines every claimscale metric in one place, registered
// on controller-runtime's registry so the manager's metrics endpoint serves
// them. docs/metrics.md describes each.
package metrics

import (
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

const namespace = "claimscale"

// Values of the reason label of the claim counters, in the style of the
// disruption reasons and condition reasons they sit beside (Empty,
// Underutilized, Unhealthy, …): one style for every reason label.
const (
	ReasonProvisioning            = "Provisioning"
	ReasonMinNodes                = "MinNodes"
	ReasonHeadroom                = "Headroom"
	ReasonReplacement             = "Replacement"
	ReasonRepair                  = "Repair"
	ReasonExternalGRPC            = "ExternalGRPC"
	ReasonDeleted                 = "Deleted"
	ReasonRegistrationTimeout     = "RegistrationTimeout"
	ReasonInsufficientCapacity    = "InsufficientCapacity"
	ReasonMachineGone             = "MachineGone"
	ReasonGarbageCollectedMachine = "GarbageCollectedMachine"
	// ReasonSleepLimit: a machine slept longer than its pool's
	// sleep.deleteAfter.
	ReasonSleepLimit = "SleepLimit"
)

var (
	// NodeClaimsCreated counts claims written, by pool and reason
	// (Provisioning, MinNodes, Headroom, Replacement, Repair,
	// ExternalGRPC, ProvisioningRequest).
	NodeClaimsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "created_total",
		Help: "NodeClaims created, by pool and reason.",
	}, []string{"nodepool", "reason"})
	// NodeClaimsLaunched counts machines made (or adopted) for claims.
	NodeClaimsLaunched = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "launched_total",
		Help: "NodeClaims whose machine was launched, by pool.",
	}, []string{"nodepool"})
	// NodeClaimsRegistered counts claims whose Node joined.
	NodeClaimsRegistered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "registered_total",
		Help: "NodeClaims whose Node registered, by pool.",
	}, []string{"nodepool"})
	// NodeClaimsTerminated counts claims whose machine was removed, once
	// each, by reason (Deleted, a disruption reason such as Empty,
	// RegistrationTimeout, InsufficientCapacity, MachineGone), and
	// machines without a claim (GarbageCollectedMachine).
	NodeClaimsTerminated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "terminated_total",
		Help: "NodeClaims terminated, by pool and reason.",
	}, []string{"nodepool", "reason"})
	// LaunchToReadySeconds measures from claim creation to Ready.
	LaunchToReadySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "launch_to_ready_seconds",
		Help:    "Seconds from NodeClaim creation to its Ready condition, by pool.",
		Buckets: []float64{1, 5, 10, 20, 30, 60, 120, 180, 300, 600, 900, 1800},
	}, []string{"nodepool"})
	// ProviderCalls counts provider calls by provider type, operation and
	// result (success, not_found, insufficient_capacity, terminal, retryable).
	ProviderCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "provider", Name: "calls_total",
		Help: "Provider calls, by provider, operation and result.",
	}, []string{"provider", "operation", "result"})
	// ProviderCallSeconds measures provider call durations.
	ProviderCallSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "provider", Name: "call_duration_seconds",
		Help:    "Provider call durations, by provider and operation.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10),
	}, []string{"provider", "operation"})
	// PodsUnschedulable is the number of pending pods no pool can hold, as
	// of the last provisioning round.
	PodsUnschedulable = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "provisioning", Name: "unschedulable_pods",
		Help: "Pending pods that no pool could hold in the last provisioning round.",
	})
	// SchedulingSeconds measures the scheduling simulation of a batch.
	SchedulingSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "provisioning", Name: "scheduling_duration_seconds",
		Help:    "Seconds the scheduling simulation of one batch took.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	})
	// DisruptionDecisions counts voluntary disruption decisions.
	DisruptionDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "disruption", Name: "decisions_total",
		Help: "Disruption decisions, by reason and action.",
	}, []string{"reason", "action"})
	// NodePoolNodes is the node count of each pool.
	NodePoolNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "nodepool", Name: "nodes",
		Help: "Claims of each pool that are not being deleted.",
	}, []string{"nodepool"})
)

func init() {
	crmetrics.Registry.MustRegister(
		NodeClaimsCreated, NodeClaimsLaunched, NodeClaimsRegistered, NodeClaimsTerminated,
		LaunchToReadySeconds, ProviderCalls, ProviderCallSeconds,
		PodsUnschedulable, SchedulingSeconds, DisruptionDecisions, NodePoolNodes,
	)
}

// ObserveProviderCall records one provider call's result and duration.
func ObserveProviderCall(providerName, operation string, started time.Time, result string) {
	ProviderCalls.WithLabelValues(providerName, operation, result).Inc()
	ProviderCallSeconds.WithLabelValues(providerName, operation).Observe(time.Since(started).Seconds())
}

// The externalgrpc shim's metrics.
var (
	// GRPCServer counts and times the externalgrpc server's calls by
	// method and status code (grpc_server_started_total,
	// grpc_server_handled_total, grpc_server_handling_seconds, …), the
	// names gRPC dashboards expect.
	GRPCServer = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}),
	))
	// ExternalGRPCScaleRequests counts cluster-autoscaler's requests to
	// change a node group, by pool, operation (increase, delete_nodes,
	// decrease_target) and result (accepted, refused).
	ExternalGRPCScaleRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "externalgrpc", Name: "scale_requests_total",
		Help: "Node group changes cluster-autoscaler asked for, by pool, operation and result.",
	}, []string{"nodepool", "operation", "result"})
)

func init() {
	crmetrics.Registry.MustRegister(GRPCServer, ExternalGRPCScaleRequests)
}

// Disruption gauges, set by every disruption round.
var (
	// DisruptionEligibleNodes counts, per pool and reason (Empty,
	// Underutilized, Drifted, Expired), the nodes that qualify for
	// disruption before safety rules, budgets and simulation.
	DisruptionEligibleNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "disruption", Name: "eligible_nodes",
		Help: "Nodes that qualify for disruption, by pool and reason, as of the last disruption round.",
	}, []string{"nodepool", "reason"})
	// DisruptionAllowedDisruptions is how many of each pool's nodes its
	// budgets let be disrupting at once now, per budget reason (Empty,
	// Underutilized, Drifted), at most the pool's node count.
	DisruptionAllowedDisruptions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "disruption", Name: "allowed_disruptions",
		Help: "Nodes each pool's disruption budgets allow to be disrupting at once now, by reason.",
	}, []string{"nodepool", "reason"})
)

func init() {
	crmetrics.Registry.MustRegister(DisruptionEligibleNodes, DisruptionAllowedDisruptions)
}

// Node repair metrics, set by the repair controller.
var (
	// RepairUnhealthyNodes is, per pool with repair set, how many of its
	// nodes are unhealthy (NotReady, Unknown or with an expired heartbeat
	// lease) now, however long.
	RepairUnhealthyNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "repair", Name: "unhealthy_nodes",
		Help: "Nodes of each pool that are unhealthy now, as of the pool's last repair check.",
	}, []string{"nodepool"})
	// RepairPaused is 1 for a pool whose repair is paused because more
	// than its maxUnhealthy share of nodes is unhealthy, else 0.
	RepairPaused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "repair", Name: "paused",
		Help: "1 when a pool's repair is paused because too many of its nodes are unhealthy at once.",
	}, []string{"nodepool"})
	// NodesRepaired counts unhealthy nodes whose replacement was made and
	// whose claim was deleted, by pool.
	NodesRepaired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "repair", Name: "repaired_nodes_total",
		Help: "Unhealthy nodes replaced, by pool.",
	}, []string{"nodepool"})
)

func init() {
	crmetrics.Registry.MustRegister(RepairUnhealthyNodes, RepairPaused, NodesRepaired)
}

// DisruptionBlockedNodes counts, per pool and reason, the nodes that
// qualify for disruption but that a safety rule or the pool's budget
// keeps; the reasons are those of the claims' Consolidatable=False
// condition (see ObserveDisruptionBlocked).
var DisruptionBlockedNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: namespace, Subsystem: "disruption", Name: "blocked_nodes",
	Help: "Nodes that qualify for disruption but are kept, by pool and reason (DoNotDisrupt, PodDisruptionBudget, PodWithoutController, DisruptionBudget), as of the last disruption round.",
}, []string{"nodepool", "reason"})

// blockedReasons are the values of DisruptionBlockedNodes' reason label.
var blockedReasons = []string{
	v1alpha1.ConsolidatableReasonDoNotDisrupt,
	v1alpha1.ConsolidatableReasonPodDisruptionBudget,
	v1alpha1.ConsolidatableReasonPodWithoutController,
	v1alpha1.ConsolidatableReasonDisruptionBudget,
}

func init() {
	crmetrics.Registry.MustRegister(DisruptionBlockedNodes)
}

// ObserveDisruptionBlocked sets a pool's blocked nodes by reason. Every
// reason is written, zero included, so a query sees 0 rather than no data;
// a reason outside the bounded set is left out.
func ObserveDisruptionBlocked(pool string, blocked map[string]int) {
	for _, reason := range blockedReasons {
		DisruptionBlockedNodes.WithLabelValues(pool, reason).Set(float64(blocked[reason]))
	}
}
