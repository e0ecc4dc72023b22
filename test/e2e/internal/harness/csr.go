package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"time"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SubmitCSR creates a kubelet client CSR as the token's user.
func SubmitCSR(g *WithT, token, name, commonName string) *certificatesv1.CertificateSigningRequest {
	return SubmitCSRWithUsages(g, token, name, commonName, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth)
}

// SubmitCSRWithUsages creates a CSR for the kubelet client signer with the
// usages, as the token's user.
func SubmitCSRWithUsages(g *WithT, token, name, commonName string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName, Organization: []string{"system:nodes"}},
	}, key)
	g.Expect(err).NotTo(HaveOccurred())
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     usages,
		},
	}
	as, err := client.New(Bearer(token), client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	// The API server's token authenticator reads token Secrets through an
	// informer: a token made a moment ago may not be known yet.
	g.Eventually(func() error { return as.Create(context.Background(), csr) }, 10*time.Second, 100*time.Millisecond).
		Should(Succeed(), "the token may submit a CSR")
	return csr
}

// DecisionOf is a request's Approved or Denied condition as type/reason,
// or "" while it is pending.
func DecisionOf(g *WithT, name string) string {
	var csr certificatesv1.CertificateSigningRequest
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &csr)).To(Succeed())
	var found []string
	for _, condition := range csr.Status.Conditions {
		if condition.Type == certificatesv1.CertificateApproved || condition.Type == certificatesv1.CertificateDenied {
			found = append(found, string(condition.Type)+"/"+condition.Reason)
		}
	}
	return strings.Join(found, " ")
}
