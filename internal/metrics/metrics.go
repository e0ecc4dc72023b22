// Package metrics defines every claimscale metric in one place, registered
// on controller-runtime's registry so the manager's metrics endpoint serves
// them. docs/metrics.md describes each.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const namespace = "claimscale"

var (
	// NodeClaimsCreated counts claims written, by pool and reason
	// (provisioning, minNodes, replacement, externalgrpc).
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
	// NodeClaimsTerminated counts claims whose machine was removed, by
	// reason (deleted, registration_timeout, insufficient_capacity, empty,
	// garbage_collected, …).
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
