package operator

import (
	"context"
	"crypto/tls"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/internal/metrics"
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

// watchPodLatency times the binding of the pods provisioning makes claims
// for, from the manager's pod informer; in externalgrpc mode and in a dry
// run no claim is made for a pod, and nothing is timed.
func watchPodLatency(ctx context.Context, mgr manager.Manager, opts Options) (*metrics.PodLatency, error) {
	if opts.Mode == ModeExternalGRPC || opts.DryRun {
		return nil, nil
	}
	informer, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting the pod informer for pod latency: %w", err)
	}
	latency := metrics.NewPodLatency()
	if opts.Clock != nil {
		latency.Clock = opts.Clock
	}
	if _, err := informer.AddEventHandler(latency); err != nil {
		return nil, fmt.Errorf("watching pods for pod latency: %w", err)
	}
	return latency, nil
}
