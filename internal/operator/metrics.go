package operator

import (
	"crypto/tls"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsOptions serve the metrics endpoint at address. Secure is how
// Kubebuilder scaffolds it: HTTPS with a self-signed certificate, and each
// scrape's bearer token checked with a TokenReview and a
// SubjectAccessReview for GET /metrics, so only a caller granted that
// (the chart's metrics-reader ClusterRole) reads it; a client certificate
// signed by the cluster's client CA is accepted too, for kubeconfigs
// without a token (kubectl claimscale). Not secure is plain HTTP to
// anyone who reaches the address: bind it to localhost then.
func MetricsOptions(address string, secure bool) metricsserver.Options {
	options := metricsserver.Options{BindAddress: address, SecureServing: secure}
	if secure {
		options.FilterProvider = authenticateAndAuthorize
		options.TLSOpts = []func(*tls.Config){requestClientCertificates}
	}
	return options
}
