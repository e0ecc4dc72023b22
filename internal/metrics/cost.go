package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Claim phases, the values of claimscale_nodeclaims{phase}: a bounded set
// derived from a claim's conditions, furthest first.
const (
	PhaseTerminating = "terminating"
	PhaseFailed      = "failed"
	PhaseReady       = "ready"
	PhaseRegistered  = "registered"
	PhaseLaunched    = "launched"
	PhaseLaunching   = "launching"
	// PhaseAsleep is a claim whose machine sleeps: launched, with no Node
	// on purpose, so not among the launches an alert waits on.
	PhaseAsleep       = "asleep"
	shapeUnknownLabel = "unknown"
)

var phases = []string{PhaseLaunching, PhaseLaunched, PhaseRegistered, PhaseReady, PhaseAsleep, PhaseFailed, PhaseTerminating}

var (
	// NodeClaimsByPhase counts each pool's claims per phase now.
	NodeClaimsByPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "nodeclaims",
		Help: "NodeClaims of each pool by phase (launching, launched, registered, ready, asleep, failed, terminating).",
	}, []string{"nodepool", "phase"})
	// NodePoolHourlyCost is the summed price per hour of a pool's claims
	// that are not being deleted or asleep, by shape. The shape label is bounded by
	// the pool's shapes; claims without a price count zero.
	NodePoolHourlyCost = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "nodepool", Name: "hourly_cost",
		Help: "Price per hour of each pool's claims that are not being deleted or asleep, by shape, in the currency of the shape prices.",
	}, []string{"nodepool", "shape"})
	// ProvisioningLastSuccess is when a provisioning round last ran to
	// its end, as Unix seconds; time() minus it is the age the
	// not-reconciling alert watches.
	ProvisioningLastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "provisioning", Name: "last_success_timestamp_seconds",
		Help: "Unix time the last provisioning round finished without error.",
	})
)

// NodePoolLimitUsage is, per pool and limited resource (nodes, cpu,
// memory), the share of spec.limits its claims use: 1 means the pool can
// buy nothing more of it. Pools without that limit have no series.
var NodePoolLimitUsage = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: namespace, Subsystem: "nodepool", Name: "limit_usage_ratio",
	Help: "Share of each pool's limit its claims use, by resource (nodes, cpu, memory).",
}, []string{"nodepool", "resource"})

func init() {
	crmetrics.Registry.MustRegister(NodeClaimsByPhase, NodePoolHourlyCost, ProvisioningLastSuccess, NodePoolLimitUsage)
}

// ObservePoolLimits sets a pool's limit usage from what its claims hold.
func ObservePoolLimits(pool string, limits *v1alpha1.Limits, nodes int, resources corev1.ResourceList) {
	NodePoolLimitUsage.DeletePartialMatch(prometheus.Labels{"nodepool": pool})
	if limits == nil {
		return
	}
	ratio := func(used, limit float64) float64 {
		if limit <= 0 {
			return 1 // a zero limit admits nothing: always at the limit
		}
		return used / limit
	}
	if limits.Nodes != nil {
		NodePoolLimitUsage.WithLabelValues(pool, "nodes").Set(ratio(float64(nodes), float64(*limits.Nodes)))
	}
	if limits.CPU != nil {
		NodePoolLimitUsage.WithLabelValues(pool, "cpu").Set(ratio(resources.Cpu().AsApproximateFloat64(), limits.CPU.AsApproximateFloat64()))
	}
	if limits.Memory != nil {
		NodePoolLimitUsage.WithLabelValues(pool, "memory").Set(ratio(resources.Memory().AsApproximateFloat64(), limits.Memory.AsApproximateFloat64()))
	}
}

// Phase names where a claim is in its life, from its conditions.
func Phase(claim *v1alpha1.NodeClaim) string {
	has := func(conditionType string) bool {
		for _, c := range claim.Status.Conditions {
			if c.Type == conditionType {
				return c.Status == "True"
			}
		}
		return false
	}
	switch {
	case !claim.DeletionTimestamp.IsZero() || has(v1alpha1.ConditionTerminating):
		return PhaseTerminating
	case has(v1alpha1.ConditionFailed):
		return PhaseFailed
	case has(v1alpha1.ConditionSuspended):
		return PhaseAsleep
	case has(v1alpha1.ConditionReady):
		return PhaseReady
	case has(v1alpha1.ConditionRegistered):
		return PhaseRegistered
	case has(v1alpha1.ConditionLaunched):
		return PhaseLaunched
	}
	return PhaseLaunching
}

// ObservePoolClaims sets a pool's claims-by-phase, sleeping machines and
// hourly cost gauges from all its claims. Every phase is written, zero included, so alerts
// on a phase see 0 rather than no data; a shape with no claims left is
// dropped, so the cost sums only what runs.
func ObservePoolClaims(pool string, claims []v1alpha1.NodeClaim) {
	counts := map[string]int{}
	for _, phase := range phases {
		counts[phase] = 0
	}
	cost := map[string]float64{}
	sleeping := 0
	for i := range claims {
		claim := &claims[i]
		phase := Phase(claim)
		counts[phase]++
		if phase == PhaseAsleep {
			// A stopped machine is not billed at its shape's price; what
			// it does cost (its disk) is the pool's sleep.price, which
			// this gauge does not know.
			sleeping++
			continue
		}
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		shape := claim.Spec.Shape.Name
		if shape == "" {
			shape = shapeUnknownLabel
		}
		price, err := strconv.ParseFloat(claim.Spec.Shape.Price, 64)
		if err != nil {
			price = 0 // unpriced: the API pattern admits only numbers or nothing
		}
		cost[shape] += price
	}
	for phase, n := range counts {
		NodeClaimsByPhase.WithLabelValues(pool, phase).Set(float64(n))
	}
	NodePoolSleepingMachines.WithLabelValues(pool).Set(float64(sleeping))
	NodePoolHourlyCost.DeletePartialMatch(prometheus.Labels{"nodepool": pool})
	for shape, c := range cost {
		NodePoolHourlyCost.WithLabelValues(pool, shape).Set(c)
	}
}

// ForgetPool drops a deleted pool's per-pool gauges.
func ForgetPool(pool string) {
	for _, v := range []*prometheus.GaugeVec{NodeClaimsByPhase, NodePoolHourlyCost, NodePoolNodes, NodePoolLimitUsage, NodePoolSleepingMachines} {
		v.DeletePartialMatch(prometheus.Labels{"nodepool": pool})
	}
}
