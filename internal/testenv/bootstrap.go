package testenv

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// clientCA is the control plane's client-certificate CA: the API server
// trusts it (--client-ca-file) and kube-controller-manager's csrsigning
// controller signs kubelet client certificates with it, as in a kubeadm
// cluster, where both use the cluster CA. envtest's own CA keeps its key in
// memory, so this one replaces it (envtest.Authn).
type clientCA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certDir string
}

var _ envtest.Authn = (*clientCA)(nil)

func newClientCA() (*clientCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "claimscale-testenv-ca"}, key)
	if err != nil {
		return nil, err
	}
	return &clientCA{cert: cert, key: key}, nil
}

func (c *clientCA) certPath() string { return filepath.Join(c.certDir, "client-ca.crt") }
func (c *clientCA) keyPath() string  { return filepath.Join(c.certDir, "client-ca.key") }

// Configure points the API server at the CA.
func (c *clientCA) Configure(workDir string, args *envtest.Arguments) error {
	c.certDir = workDir
	args.Set("client-ca-file", c.certPath())
	return nil
}

// Start writes the CA's certificate and key where the API server and the
// controller manager read them.
func (c *clientCA) Start() error {
	keyDER, err := x509.MarshalECPrivateKey(c.key.(*ecdsa.PrivateKey))
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.certPath(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(c.keyPath(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// AddUser issues a client certificate for the user.
func (c *clientCA) AddUser(user envtest.User, base *rest.Config) (*rest.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user.Name, Organization: user.Groups},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("issuing a client certificate for %s: %w", user.Name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cfg.KeyData = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return cfg, nil
}

// Stop does nothing: the files go with the work directory.
func (c *clientCA) Stop() error { return nil }

// kubeadmBootstrapObjects are what `kubeadm init` publishes for nodes that
// join with a bootstrap token (kubeadm init phase bootstrap-token and
// upload-config): the ClusterRoleBindings that let
// system:bootstrappers:kubeadm:default-node-token submit CSRs and have them
// auto-approved, that let nodes renew their own certificate, and the
// kube-public/cluster-info ConfigMap with the API server's address and CA.
// Besides, what claimscale's install binds for its own tokens (the chart,
// docs/install.md): the group of claimscale's per-claim tokens may submit
// a CSR, and nothing auto-approves it; claimscale's approver does.
func kubeadmBootstrapObjects(cfg *rest.Config) ([]client.Object, error) {
	const nodeTokenGroup = "system:bootstrappers:kubeadm:default-node-token"
	// bootstrap.GroupNodeToken; testenv stays free of claimscale's packages.
	const claimscaleTokenGroup = "system:bootstrappers:claimscale:default-node-token"
	binding := func(name, role string, group string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
		}
	}
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
	})
	if err != nil {
		return nil, err
	}
	return []client.Object{
		binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", nodeTokenGroup),
		binding("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", nodeTokenGroup),
		binding("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
		binding("claimscale:node-bootstrapper", "system:node-bootstrapper", claimscaleTokenGroup),
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: "cluster-info"},
			Data:       map[string]string{"kubeconfig": string(kubeconfig)},
		},
	}, nil
}

// publishKubeadmBootstrap creates the kubeadm objects, waiting for the API
// server to have made kube-public.
func (e *Environment) publishKubeadmBootstrap() error {
	objects, err := kubeadmBootstrapObjects(e.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, object := range objects {
		// kube-public is made by the API server just after it starts.
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			err := e.Client.Create(ctx, object)
			switch {
			case err == nil, apierrors.IsAlreadyExists(err):
				return true, nil
			case apierrors.IsNotFound(err):
				return false, nil
			}
			return false, err
		})
		if err != nil {
			return fmt.Errorf("creating %T %s: %w", object, object.GetName(), err)
		}
	}
	return nil
}
