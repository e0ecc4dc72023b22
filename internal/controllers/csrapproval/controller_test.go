package csrapproval

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/testenv"
)

// One API server for the package, with bootstrap token authentication on,
// so the requests are made by the tokens' own users, as a kubelet makes
// them.
var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

// request is a certificate signing request to submit.
type request struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	signer       string
	usages       []certificatesv1.KeyUsage
}

func kubeletClient(node string) request {
	return request{
		commonName: "system:node:" + node, organization: []string{"system:nodes"},
		signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
	}
}

type scenario struct {
	t        *testing.T
	g        *WithT
	ctx      context.Context
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	c        *Controller
	tokens   *bootstrap.Tokens
}

func newScenario(t *testing.T) *scenario {
	clock := clocktesting.NewFakeClock(time.Now())
	s := &scenario{
		t: t, g: NewWithT(t), ctx: context.Background(), clock: clock,
		recorder: events.NewFakeRecorder(100),
		tokens:   &bootstrap.Tokens{Kube: env.Client, Reader: env.Client, Clock: clock},
	}
	s.c = &Controller{Kube: env.Client, Tokens: s.tokens, Recorder: s.recorder, Clock: clock}
	return s
}

// claim makes a claim and its token, valid for an hour.
func (s *scenario) claim(name string) (*v1alpha1.NodeClaim, bootstrap.Token) {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, claim)).To(Succeed())
	s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })
	token, err := s.tokens.Ensure(s.ctx, claim, s.clock.Now().Add(time.Hour), []string{bootstrap.GroupNodeToken})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.t.Cleanup(func() { _ = s.tokens.Revoke(context.Background(), claim.Name) })
	return claim, token
}

// submit creates the request as the token's user, and decides it.
func (s *scenario) submit(token string, name string, r request) *certificatesv1.CertificateSigningRequest {
	s.t.Helper()
	csr := s.create(token, name, r)
	s.decide(csr)
	return csr
}

// decide runs the controller on the request and reads it back.
func (s *scenario) decide(csr *certificatesv1.CertificateSigningRequest) {
	s.t.Helper()
	_, err := s.c.Reconcile(s.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(csr)})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(csr), csr)).To(Succeed())
}

// create creates the request as the token's user.
func (s *scenario) create(token string, name string, r request) *certificatesv1.CertificateSigningRequest {
	s.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s.g.Expect(err).NotTo(HaveOccurred())
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: r.commonName, Organization: r.organization},
		DNSNames: r.dnsNames, IPAddresses: r.ips,
	}, key)
	s.g.Expect(err).NotTo(HaveOccurred())
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: r.signer,
			Usages:     r.usages,
		},
	}
	config := rest.AnonymousClientConfig(env.Config)
	config.BearerToken = token
	as, err := client.New(config, client.Options{Scheme: env.Scheme})
	s.g.Expect(err).NotTo(HaveOccurred())
	// The API server's token authenticator reads token Secrets through an
	// informer: a token made a moment ago may not be known yet.
	s.g.Eventually(func() error { return as.Create(s.ctx, csr) }).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).
		Should(Succeed(), "the token may submit a certificate signing request")
	s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), csr) })
	return csr
}

// decision is the request's Approved or Denied condition, or nil.
func decision(csr *certificatesv1.CertificateSigningRequest) *certificatesv1.CertificateSigningRequestCondition {
	for i, condition := range csr.Status.Conditions {
		if condition.Type == certificatesv1.CertificateApproved || condition.Type == certificatesv1.CertificateDenied {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

func (s *scenario) recorded() []string {
	var found []string
	for {
		select {
		case event := <-s.recorder.Events:
			found = append(found, event)
		default:
			return found
		}
	}
}

// A claim's token gets the kubelet client certificate of its claim's node,
// once; every other request it makes is denied with a reason on the
// request and a warning on the claim.
func TestATokenServesItsOneNode(t *testing.T) {
	s := newScenario(t)
	extraUsages := kubeletClient("claim-usages")
	extraUsages.usages = append(extraUsages.usages, certificatesv1.UsageServerAuth)
	wrongOrganization := kubeletClient("claim-org")
	wrongOrganization.organization = []string{"system:masters"}
	withSANs := kubeletClient("claim-sans")
	withSANs.ips = []net.IP{net.ParseIP("10.0.0.7")}
	keyEncipherment := kubeletClient("claim-rsa")
	keyEncipherment.usages = append(keyEncipherment.usages, certificatesv1.UsageKeyEncipherment)
	for _, tc := range []struct {
		name    string
		claim   string
		request request
		// prepare runs between making the claim and submitting.
		prepare func(claim *v1alpha1.NodeClaim)
		// denied is a part of the denial's message; empty: approved.
		denied string
	}{
		{name: "its own node's kubelet client certificate is approved", claim: "claim-own", request: kubeletClient("claim-own")},
		{name: "key encipherment besides is a kubelet client's too", claim: "claim-rsa", request: keyEncipherment},
		{name: "another node's name is denied", claim: "claim-thief", request: kubeletClient("claim-victim"), denied: `asks for subject "system:node:claim-victim", but the token of NodeClaim claim-thief joins node claim-thief only`},
		{name: "a control-plane name is denied", claim: "claim-admin", request: request{commonName: "system:node:claim-admin", organization: []string{"system:nodes", "system:masters"}, signer: certificatesv1.KubeAPIServerClientKubeletSignerName, usages: kubeletClient("").usages}, denied: "organization"},
		{name: "another organization is denied", claim: "claim-org", request: wrongOrganization, denied: "organization"},
		{name: "extra usages are denied", claim: "claim-usages", request: extraUsages, denied: "are not exactly a kubelet client's"},
		{name: "subject alternative names are denied", claim: "claim-sans", request: withSANs, denied: "no subject alternative names"},
		{name: "a registered claim's token is denied", claim: "claim-registered", request: kubeletClient("claim-registered"),
			prepare: func(claim *v1alpha1.NodeClaim) {
				claim.SetCondition(v1alpha1.ConditionRegistered, metav1.ConditionTrue, "Registered", "node claim-registered registered", time.Now())
				claim.Status.NodeName = claim.Name
				NewWithT(t).Expect(env.Client.Status().Update(context.Background(), claim)).To(Succeed())
			}, denied: "already has its node"},
		{name: "a claim whose node name is taken is denied", claim: "claim-taken", request: kubeletClient("claim-taken"),
			prepare: func(claim *v1alpha1.NodeClaim) {
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: claim.Name}}
				NewWithT(t).Expect(env.Client.Create(context.Background(), node)).To(Succeed())
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
			}, denied: "a Node named claim-taken exists"},
		{name: "a claim being deleted is denied", claim: "claim-leaving", request: kubeletClient("claim-leaving"),
			prepare: func(claim *v1alpha1.NodeClaim) {
				g := NewWithT(t)
				patch := client.MergeFrom(claim.DeepCopy())
				claim.Finalizers = []string{"test.claimscale.io/hold"}
				g.Expect(env.Client.Patch(context.Background(), claim, patch)).To(Succeed())
				g.Expect(env.Client.Delete(context.Background(), claim)).To(Succeed())
				t.Cleanup(func() {
					held := &v1alpha1.NodeClaim{}
					if env.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), held) == nil {
						patch := client.MergeFrom(held.DeepCopy())
						held.Finalizers = nil
						_ = env.Client.Patch(context.Background(), held, patch)
					}
				})
			}, denied: "is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.t, s.g = t, NewWithT(t)
			claim, token := s.claim(tc.claim)
			if tc.prepare != nil {
				tc.prepare(claim)
			}
			csr := s.submit(token.String(), "csr-"+tc.claim, tc.request)
			got := decision(csr)
			s.g.Expect(got).NotTo(BeNil(), "the request is decided")
			events := s.recorded()
			if tc.denied == "" {
				s.g.Expect(got.Type).To(Equal(certificatesv1.CertificateApproved))
				s.g.Expect(got.Reason).To(Equal(ReasonApproved))
				s.g.Expect(events).To(ConsistOf(HavePrefix("Normal " + EventApproved)))
				return
			}
			s.g.Expect(got.Type).To(Equal(certificatesv1.CertificateDenied))
			s.g.Expect(got.Reason).To(Equal(ReasonDenied))
			s.g.Expect(got.Message).To(ContainSubstring(tc.denied))
			s.g.Expect(events).To(ConsistOf(And(HavePrefix("Warning "+EventDenied), ContainSubstring(tc.denied))), "the claim is told")
			s.g.Expect(strings.Join(events, "\n")).NotTo(ContainSubstring(token.Secret), "events never carry the token's secret")
		})
	}
}

// A token gets one certificate: a second request, even a valid one, is
// denied; so is a request made before the token expired but decided
// after.
func TestATokenGetsOneCertificateWhileItLives(t *testing.T) {
	s := newScenario(t)
	_, token := s.claim("claim-once")
	first := s.submit(token.String(), "csr-once-1", kubeletClient("claim-once"))
	s.g.Expect(decision(first).Type).To(Equal(certificatesv1.CertificateApproved))
	second := s.submit(token.String(), "csr-once-2", kubeletClient("claim-once"))
	s.g.Expect(decision(second).Type).To(Equal(certificatesv1.CertificateDenied))
	s.g.Expect(decision(second).Message).To(ContainSubstring("csr-once-1 of the same token was already approved"))

	_, late := s.claim("claim-late")
	s.clock.Step(2 * time.Hour)
	expired := s.submit(late.String(), "csr-late", kubeletClient("claim-late"))
	s.g.Expect(decision(expired).Type).To(Equal(certificatesv1.CertificateDenied))
	s.g.Expect(decision(expired).Message).To(ContainSubstring("expired"))
}

// Requests of users that are not claimscale's tokens stay undecided: a
// bootstrap token claimscale did not issue (kubeadm's own), and a claim
// token's request for another signer, which claimscale may not decide; the
// claim is told about the latter.
func TestRequestsNotClaimscalesToDecideStayPending(t *testing.T) {
	s := newScenario(t)
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-kubadm"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{
			"token-id": "kubadm", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
			"expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "auth-extra-groups": bootstrap.GroupKubeadmNodeToken,
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, foreign)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), foreign) })
	csr := s.submit("kubadm.0123456789abcdef", "csr-kubeadm", kubeletClient("some-node"))
	s.g.Expect(decision(csr)).To(BeNil(), "kubeadm's token is kubeadm's business")

	_, token := s.claim("claim-signer")
	other := kubeletClient("claim-signer")
	other.signer = certificatesv1.KubeAPIServerClientSignerName
	csr = s.submit(token.String(), "csr-signer", other)
	s.g.Expect(decision(csr)).To(BeNil())
	s.g.Expect(s.recorded()).To(ConsistOf(And(HavePrefix("Warning "+EventIgnored), ContainSubstring("claimscale never approves signer kubernetes.io/kube-apiserver-client"))))
}

// When another approver got there first (kube-controller-manager, with
// auto-approval bound to system:bootstrappers), a request claimscale denies
// cannot be denied any more: the claim gets a warning that says what to
// remove. A request claimscale would approve too gets none.
func TestAnApprovalByAnotherApproverIsReported(t *testing.T) {
	s := newScenario(t)
	_, token := s.claim("claim-elsewhere")
	approveAsControllerManager := func(csr *certificatesv1.CertificateSigningRequest) {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AutoApproved",
			Message: "Auto approving kubelet client certificate after SubjectAccessReview.",
		})
		s.g.Expect(env.Client.SubResource("approval").Update(s.ctx, csr)).To(Succeed())
	}
	own := s.create(token.String(), "csr-elsewhere-own", kubeletClient("claim-elsewhere"))
	approveAsControllerManager(own)
	s.decide(own)
	s.g.Expect(s.recorded()).To(BeEmpty())

	stolen := s.create(token.String(), "csr-elsewhere-stolen", kubeletClient("claim-victim"))
	approveAsControllerManager(stolen)
	s.decide(stolen)
	s.g.Expect(decision(stolen).Reason).To(Equal("AutoApproved"))
	s.g.Expect(s.recorded()).To(ConsistOf(And(HavePrefix("Warning "+EventApprovedElsewhere),
		ContainSubstring("csr-elsewhere-stolen"), ContainSubstring("joins node claim-elsewhere only"), ContainSubstring("remove the binding"))))
}
