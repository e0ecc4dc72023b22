package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
)

// ReasonProvisioningRequest is the reason label of the claims bought for
// a ProvisioningRequest (best-effort-atomic-scale-up).
const ReasonProvisioningRequest = "ProvisioningRequest"

// ProvisioningRequests and CapacityBuffers: what became of the requests by
// class, how long provisioning took, and how much room bookings and
// buffers keep.
var (
	// ProvisioningRequestOutcomes counts the conditions requests reached,
	// by class, outcome (the condition that turned: Accepted=False,
	// Provisioned, Failed, BookingExpired, CapacityRevoked, or
	// CapacityIsNotFound for a Provisioned=False that waits for room) and
	// the condition's reason.
	ProvisioningRequestOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "provisioningrequests", Name: "outcomes_total",
		Help: "ProvisioningRequests reaching an outcome, by class, outcome and reason.",
	}, []string{"class", "outcome", "reason"})
	// ProvisioningRequestSeconds measures from a request's creation to its
	// Provisioned=True, by class.
	ProvisioningRequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "provisioningrequests", Name: "provisioned_seconds",
		Help:    "Seconds from a ProvisioningRequest's creation to Provisioned=True, by class.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800},
	}, []string{"class"})
	// ProvisioningRequestsBooked is how many requests' capacity is booked
	// now (kept from other pods and from consolidation), by class.
	ProvisioningRequestsBooked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "provisioningrequests", Name: "booked",
		Help: "ProvisioningRequests whose capacity is booked now, by class.",
	}, []string{"class"})
	// CapacityBufferPlaceholderPods is how many placeholder pods the
	// CapacityBuffers keep room for now, in all.
	CapacityBufferPlaceholderPods = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "capacitybuffers", Name: "placeholder_pods",
		Help: "Placeholder pods the CapacityBuffers keep room for, in all.",
	})
)

// Outcomes of ProvisioningRequestOutcomes besides the condition types.
const (
	// OutcomeNotAccepted: Accepted=False (a PodTemplate is missing).
	OutcomeNotAccepted = "NotAccepted"
	// OutcomeWaiting: Provisioned=False, the request waits for room.
	OutcomeWaiting = "Waiting"
)

func init() {
	crmetrics.Registry.MustRegister(ProvisioningRequestOutcomes, ProvisioningRequestSeconds, ProvisioningRequestsBooked, CapacityBufferPlaceholderPods)
	// Both classes from the start: none booked is a value, not a gap.
	for _, class := range []string{autoscalingv1.ClassCheckCapacity, autoscalingv1.ClassBestEffortAtomicScaleUp} {
		ProvisioningRequestsBooked.WithLabelValues(class).Set(0)
	}
}
