package decisions

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// PodDecisions counts provisioning decisions about pending pods, by
	// outcome, reason and whether the controller runs dry. The reason is
	// NewNode for a pod that got a new node, SleepingMachine for one a
	// sleeping machine was woken for; for an unschedulable pod, each
	// pool's refusal kind (Filter, TooSmall, Limit, Backoff) is counted
	// once, NoPool when there is no pool, NoRoom when the reason concerns
	// no pool.
	PodDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "claimscale", Subsystem: "decisions", Name: "pods_total",
		Help: "Provisioning decisions about pending pods, by outcome, reason and dry_run.",
	}, []string{"outcome", "reason", "dry_run"})
	// NodeDecisions counts disruption decisions about nodes, by outcome,
	// reason (one of the NodeReason constants) and dry_run.
	NodeDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "claimscale", Subsystem: "decisions", Name: "nodes_total",
		Help: "Disruption decisions about nodes, by outcome, reason and dry_run.",
	}, []string{"outcome", "reason", "dry_run"})
)

func init() {
	crmetrics.Registry.MustRegister(PodDecisions, NodeDecisions)
}

func dryRunLabel(dryRun bool) string {
	if dryRun {
		return "true"
	}
	return "false"
}

func countPod(record PodRecord, dryRun bool) {
	label := dryRunLabel(dryRun)
	switch {
	case record.Outcome == PodWoken:
		PodDecisions.WithLabelValues(record.Outcome, podReasonSleepingMachine, label).Inc()
	case record.Outcome != PodUnschedulable:
		PodDecisions.WithLabelValues(record.Outcome, podReasonNewNode, label).Inc()
	case len(record.Pools) == 0 && record.Reason == noPoolReason:
		PodDecisions.WithLabelValues(record.Outcome, podReasonNoPool, label).Inc()
	case len(record.Pools) == 0:
		PodDecisions.WithLabelValues(record.Outcome, podReasonNoRemainingNode, label).Inc()
	default:
		seen := map[string]bool{}
		for _, refusal := range record.Pools {
			if !seen[refusal.Kind] {
				seen[refusal.Kind] = true
				PodDecisions.WithLabelValues(record.Outcome, refusal.Kind, label).Inc()
			}
		}
	}
}

// noPoolReason is the scheduling package's reason when there is no pool.
const noPoolReason = "no node pool to open a node in"
