package operator

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsOptions serve the metrics endpoint at address. Secure is how
// Kubebuilder scaffolds it: HTTPS with a self-signed certificate, and each
// scrape's bearer token checked with a TokenReview and a
// SubjectAccessReview for GET /metrics, so only a caller granted that
// (the chart's metrics-reader ClusterRole) reads it. Not secure is plain
// HTTP to anyone who reaches the address: bind it to localhost then.
func MetricsOptions(address string, secure bool) metricsserver.Options {
	options := metricsserver.Options{BindAddress: address, SecureServing: secure}
	if secure {
		options.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return options
}
