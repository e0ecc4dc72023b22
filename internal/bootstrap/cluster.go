package bootstrap

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClusterInfo is what a joining machine needs to find and trust the API
// server.
type ClusterInfo struct {
	// Endpoint is host:port.
	Endpoint string
	// CAPEM is the CA bundle; CACertificates the same, parsed.
	CAPEM          []byte
	CACertificates []*x509.Certificate
}

// ClusterSource finds the API endpoint and CA, in this order: the pool's
// own endpoint; kubeadm's public kube-public/cluster-info ConfigMap (what
// `kubeadm join` itself discovers with a token); the controller's flags.
// The CA comes from cluster-info when it exists, else from the flags.
type ClusterSource struct {
	// Reader reads kube-public/cluster-info uncached.
	Reader client.Reader
	// Endpoint and CAPEM are the controller's fallback (flags; the CA
	// defaults to the one the controller trusts the API server with).
	Endpoint string
	CAPEM    []byte
}

// Lookup returns the cluster's endpoint and CA (a pool's own endpoint is
// applied with WithEndpoint).
func (s *ClusterSource) Lookup(ctx context.Context) (ClusterInfo, error) {
	endpoint, caPEM := s.Endpoint, s.CAPEM
	var cm corev1.ConfigMap
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo}, &cm)
	switch {
	case err == nil:
		server, ca, err := parseClusterInfo(cm.Data[bootstrapapi.KubeConfigKey])
		if err != nil {
			return ClusterInfo{}, fmt.Errorf("reading kube-public/cluster-info: %w", err)
		}
		endpoint, caPEM = server, ca
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		// Not a kubeadm cluster, or installed without the kube-public
		// Role: the flags say.
	default:
		return ClusterInfo{}, fmt.Errorf("reading kube-public/cluster-info: %w", err)
	}
	return newClusterInfo(endpoint, caPEM)
}

// WithEndpoint returns info with the endpoint replaced, when one is given.
func (info ClusterInfo) WithEndpoint(endpoint string) ClusterInfo {
	if endpoint != "" {
		info.Endpoint = endpoint
	}
	return info
}

func newClusterInfo(endpoint string, caPEM []byte) (ClusterInfo, error) {
	if len(caPEM) == 0 {
		return ClusterInfo{}, errors.New("no cluster CA: kube-public/cluster-info is missing and the controller has no --bootstrap-ca-file or CA of its own")
	}
	certs, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		return ClusterInfo{}, fmt.Errorf("parsing the cluster CA: %w", err)
	}
	return ClusterInfo{Endpoint: endpoint, CAPEM: caPEM, CACertificates: certs}, nil
}

// parseClusterInfo reads the server (as host:port) and CA of the one
// cluster in cluster-info's kubeconfig.
func parseClusterInfo(kubeconfig string) (string, []byte, error) {
	config, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return "", nil, fmt.Errorf("parsing its kubeconfig: %w", err)
	}
	for _, cluster := range config.Clusters {
		u, err := url.Parse(cluster.Server)
		if err != nil || u.Host == "" {
			return "", nil, fmt.Errorf("server %q is not a URL", cluster.Server)
		}
		return u.Host, cluster.CertificateAuthorityData, nil
	}
	return "", nil, errors.New("its kubeconfig names no cluster")
}
