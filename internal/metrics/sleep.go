package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of the suspend and wake counters: a bounded set, one per way a
// power operation of the lifecycle ends.
const (
	SleepResultSuccess              = "success"
	SleepResultFailed               = "failed"
	SleepResultNotSupported         = "not_supported"
	SleepResultMachineGone          = "machine_gone"
	SleepResultInsufficientCapacity = "insufficient_capacity"
	SleepResultRegistrationTimeout  = "registration_timeout"
)

// Sleeping machines: how many sleep, how often they are put to sleep and
// woken, and how long a woken machine takes to be a node again.
var (
	// NodePoolSleepingMachines is, per pool, how many claims' machines
	// sleep now (Suspended=True, no Node).
	NodePoolSleepingMachines = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "nodepool", Name: "sleeping_machines",
		Help: "Machines of each pool that sleep (stopped, no Node), as of the pool's last status pass.",
	}, []string{"nodepool"})
	// NodeClaimSuspends counts the lifecycle's attempts to put a machine
	// to sleep, by pool and result (success, failed, not_supported,
	// machine_gone): a failed attempt that is retried counts each time.
	NodeClaimSuspends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "suspends_total",
		Help: "Attempts to put a claim's machine to sleep, by pool and result.",
	}, []string{"nodepool", "result"})
	// NodeClaimWakes counts wakes of sleeping machines, by pool and result:
	// success once the Node registered again; failed per start that
	// failed and is retried; insufficient_capacity, registration_timeout,
	// not_supported and machine_gone when the claim is deleted instead.
	NodeClaimWakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "wakes_total",
		Help: "Wakes of sleeping machines, by pool and result.",
	}, []string{"nodepool", "result"})
	// WakeToRegisteredSeconds measures from a sleeping machine's start
	// (the claim's Suspended=False/Waking) to its Node registering again.
	WakeToRegisteredSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "nodeclaims", Name: "wake_to_registered_seconds",
		Help:    "Seconds from waking a sleeping machine to its Node registering again, by pool.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
	}, []string{"nodepool"})
)

func init() {
	crmetrics.Registry.MustRegister(NodePoolSleepingMachines, NodeClaimSuspends, NodeClaimWakes, WakeToRegisteredSeconds)
}
