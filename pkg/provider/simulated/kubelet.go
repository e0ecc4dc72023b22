package simulated

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of a machine's user-data Secret.
const (
	secretUserData   = "userData"
	secretKubeletKey = "kubeletKey"
	// secretKubeletCert is the client certificate the machine's bootstrap
	// was issued, kept as a kubelet keeps kubelet-client-current.pem: a
	// machine started again after sleeping registers with it, its
	// bootstrap token long revoked.
	secretKubeletCert = "kubeletCert"
)

// The token a machine's user data carries, found the way a person reading
// it would: the bootstrap token syntax, [a-z0-9]{6}.[a-z0-9]{16}
// (k8s.io/cluster-bootstrap/token/api.BootstrapTokenPattern), anywhere in
// the text (kubeadm's JoinConfiguration, k3s's K10…::<token>).
var tokenInUserData = regexp.MustCompile(`\b([a-z0-9]{6})\.([a-z0-9]{16})\b`)

// bootstrapKubelet plays a kubelet's TLS bootstrap for one machine, as
// https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/
// describes it:
//
//  1. authenticate with the bootstrap token from the user data (the API
//     server maps it to system:bootstrap:<id> in the token's groups);
//  2. submit a CertificateSigningRequest for signer
//     kubernetes.io/kube-apiserver-client-kubelet with CN system:node:<name>,
//     O system:nodes, usages digital signature and client auth: what
//     claimscale's approver (internal/controllers/csrapproval) approves for
//     a claim's token, for the claim's own node name only;
//  3. wait for the approval and for the csrsigning controller to issue the
//     certificate;
//  4. register the Node with that certificate, as system:node:<name>.
//
// Its private key is kept in the machine's user-data Secret so a restarted
// registrar continues the same request. A token that was revoked or has
// expired fails step 1, and the machine never registers, as a real one
// would not.
//
// The issued certificate is kept beside the key, and a kubelet that has
// one still valid skips the bootstrap: a machine woken from sleep
// registers its Node again as system:node:<name> with it. That is what a
// kubelet does on start: kubernetes pkg/kubelet/certificate/bootstrap
// (LoadClientCert, isClientConfigStillValid, v1.37.0) uses the --kubeconfig
// whose client certificate has not expired (now not after NotAfter) and
// goes to the bootstrap kubeconfig only otherwise. Once the certificate
// has expired the simulated kubelet falls back to the bootstrap, whose
// token is revoked by then, and the machine never registers: the
// certificate's lifetime bounds how long a machine may sleep. Assumption:
// the simulated kubelet never rotates its certificate while it runs (a
// real one with rotateCertificates renews it at 70 to 90% of its
// lifetime), so here the bound counts from its first join, not from when
// it went to sleep.
type bootstrapKubelet struct {
	kube   client.Client
	config *rest.Config
	secret *corev1.Secret
	m      *machine
	now    time.Time
}

// errWaitingForCertificate: the request is pending; try on the next pass.
var errWaitingForCertificate = errors.New("waiting for the kubelet client certificate")

// join returns a client authenticated as the node, or
// errWaitingForCertificate.
func (k *bootstrapKubelet) join(ctx context.Context) (client.Client, error) {
	if k.config == nil {
		return nil, fmt.Errorf("machine %s has user data but the registrar has no REST config to authenticate with its token", k.m.name)
	}
	if kept, ok := k.keptCertificate(); ok {
		return k.nodeClient(kept)
	}
	token := tokenInUserData.FindStringSubmatch(string(k.secret.Data[secretUserData]))
	if token == nil {
		return nil, fmt.Errorf("machine %s: its user data carries no bootstrap token", k.m.name)
	}
	key, err := k.privateKey(ctx)
	if err != nil {
		return nil, err
	}
	bootstrapConfig := rest.AnonymousClientConfig(k.config)
	bootstrapConfig.BearerToken = token[0]
	// The registrar's own mapper: a client of its own would ask the API
	// server for its discovery documents, once for every machine.
	bootstrapClient, err := client.New(bootstrapConfig, client.Options{Scheme: k.kube.Scheme(), Mapper: k.kube.RESTMapper()})
	if err != nil {
		return nil, err
	}
	csr, err := k.request(ctx, bootstrapClient, key, token[1])
	if err != nil {
		return nil, err
	}
	for _, c := range csr.Status.Conditions {
		if (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && c.Status == corev1.ConditionTrue {
			return nil, fmt.Errorf("machine %s: certificate request %s %s: %s", k.m.name, csr.Name, c.Type, c.Message)
		}
	}
	if len(csr.Status.Certificate) == 0 {
		return nil, errWaitingForCertificate
	}
	if err := k.keepCertificate(ctx, csr.Status.Certificate); err != nil {
		return nil, err
	}
	return k.nodeClient(csr.Status.Certificate)
}

// nodeClient is a client authenticated as the node with certificate and
// the machine's kept key.
func (k *bootstrapKubelet) nodeClient(certificate []byte) (client.Client, error) {
	nodeConfig := rest.AnonymousClientConfig(k.config)
	nodeConfig.CertData = certificate
	nodeConfig.KeyData = k.secret.Data[secretKubeletKey]
	return client.New(nodeConfig, client.Options{Scheme: k.kube.Scheme(), Mapper: k.kube.RESTMapper()})
}

// keptCertificate answers the client certificate an earlier join was
// issued, if it is still valid now.
func (k *bootstrapKubelet) keptCertificate() ([]byte, bool) {
	kept := k.secret.Data[secretKubeletCert]
	block, _ := pem.Decode(kept)
	if block == nil || len(k.secret.Data[secretKubeletKey]) == 0 {
		return nil, false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || k.now.After(cert.NotAfter) {
		return nil, false
	}
	return kept, true
}

// keepCertificate stores the issued client certificate beside the key.
func (k *bootstrapKubelet) keepCertificate(ctx context.Context, certificate []byte) error {
	if string(k.secret.Data[secretKubeletCert]) == string(certificate) {
		return nil
	}
	patch := client.MergeFrom(k.secret.DeepCopy())
	k.secret.Data[secretKubeletCert] = certificate
	if err := k.kube.Patch(ctx, k.secret, patch); err != nil {
		return fmt.Errorf("machine %s: keeping its kubelet client certificate: %w", k.m.name, err)
	}
	return nil
}

// request creates (or finds) the machine's certificate signing request,
// named after the machine and the token, as the bootstrap user.
func (k *bootstrapKubelet) request(ctx context.Context, kube client.Client, key *ecdsa.PrivateKey, tokenID string) (*certificatesv1.CertificateSigningRequest, error) {
	name := "node-csr-" + k.m.name + "-" + tokenID
	csr := &certificatesv1.CertificateSigningRequest{}
	err := kube.Get(ctx, client.ObjectKey{Name: name}, csr)
	if err == nil {
		return csr, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("machine %s: reading certificate request %s: %w", k.m.name, name, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + k.m.name, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	csr = &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	if err := kube.Create(ctx, csr); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("machine %s: submitting certificate request %s: %w", k.m.name, name, err)
	}
	return csr, nil
}

// privateKey returns the machine's kubelet key, making and keeping it on
// first use.
func (k *bootstrapKubelet) privateKey(ctx context.Context) (*ecdsa.PrivateKey, error) {
	if block, _ := pem.Decode(k.secret.Data[secretKubeletKey]); block != nil {
		return x509.ParseECPrivateKey(block.Bytes)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	patch := client.MergeFromWithOptions(k.secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
	k.secret.Data[secretKubeletKey] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := k.kube.Patch(ctx, k.secret, patch); err != nil {
		return nil, fmt.Errorf("machine %s: keeping its kubelet key: %w", k.m.name, err)
	}
	return key, nil
}

// userDataSecret is the Secret holding a machine's user data: it carries a
// join token, so it is no ConfigMap.
func userDataSecret(namespace string, m *machine, userData []byte) *corev1.Secret {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.name, Namespace: namespace,
			Labels:      map[string]string{LabelMachine: "true"},
			Annotations: map[string]string{},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{secretUserData: userData},
	}
	for k, v := range m.tags {
		secret.Labels[k] = labelValue(v)
		secret.Annotations[k] = v
	}
	return secret
}
