package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/controllers/csrapproval"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// A pool with a bootstrap section joins its nodes the way kubeadm's nodes
// join: the claim gets a token of its own before the machine is made; the
// token authenticates as system:bootstrap:<id> in claimscale's node-token
// group (not kubeadm's, which kubeadm binds auto-approval to) and may submit
// a CSR, which claimscale denies when it names another node; the simulated
// kubelet joins with it through a CSR claimscale approved; once the Node has
// registered the token's Secret is gone and the token no longer works. Nothing of the token's secret or the
// user data shows in the controllers' logs, events or object statuses.
func TestBootstrapTokenJoinsTheNode(t *testing.T) {
	logs := harness.TapControllerLogs(t)
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "bootstrap-join")
	defer s.Cleanup()
	// The boot delay leaves time to look at the token before the node joins.
	s.CreateProvider(v1alpha1.SimulatedSettings{BootDelay: &metav1.Duration{Duration: 5 * time.Second}})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
	})
	s.CreateDeployment("join", 1, "1", nil)

	var claim v1alpha1.NodeClaim
	s.G.Eventually(func() *v1alpha1.BootstrapTokenStatus {
		claims := s.Claims()
		if len(claims) == 0 {
			return nil
		}
		claim = claims[0]
		return claim.Status.BootstrapToken
	}).ShouldNot(BeNil())
	tokenID := claim.Status.BootstrapToken.ID
	g := s.G
	g.Expect(claim.Status.BootstrapToken.ExpiresAt.Time).To(BeTemporally("~", claim.CreationTimestamp.Add(15*time.Minute), time.Second),
		"the token expires at the pool's registration timeout")

	var secret corev1.Secret
	g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + tokenID}, &secret)).To(Succeed())
	g.Expect(secret.Type).To(Equal(corev1.SecretType("bootstrap.kubernetes.io/token")))
	g.Expect(secret.Labels).To(HaveKeyWithValue(v1alpha1.LabelBootstrapToken, "true"))
	g.Expect(secret.Labels).To(HaveKeyWithValue(v1alpha1.LabelNodeClaim, claim.Name))
	g.Expect(string(secret.Data["auth-extra-groups"])).To(Equal(bootstrap.GroupNodeToken))
	g.Expect(string(secret.Data["usage-bootstrap-authentication"])).To(Equal("true"))
	g.Expect(string(secret.Data["usage-bootstrap-signing"])).To(Equal("true"))
	token := tokenID + "." + string(secret.Data["token-secret"])

	// The provider got the rendered user data, carrying this token.
	var userData corev1.Secret
	g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Namespace: harness.ControllerNamespace, Name: claim.Name}, &userData)).To(Succeed())
	g.Expect(string(userData.Data["userData"])).To(ContainSubstring(`token: "` + token + `"`))
	g.Expect(string(userData.Data["userData"])).To(ContainSubstring("kind: JoinConfiguration"))

	user, err := whoAmI(token)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(user.Username).To(Equal("system:bootstrap:" + tokenID))
	g.Expect(user.Groups).To(ConsistOf("system:bootstrappers", bootstrap.GroupNodeToken, "system:authenticated"))
	probe := harness.SubmitCSR(g, token, "claimscale-probe-"+tokenID, "system:node:probe-"+tokenID)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), probe) })
	g.Eventually(func() string { return harness.DecisionOf(g, probe.Name) }).Should(Equal("Denied/"+csrapproval.ReasonDenied),
		"a claim's token gets no certificate for another node's name")
	g.Eventually(func() []string { return harness.EventsOf(g, "NodeClaim", claim.Name) }).Should(ContainElement(
		And(HavePrefix(csrapproval.EventDenied+":"), ContainSubstring(probe.Name), ContainSubstring("joins node "+claim.Name+" only"))))

	// The node joined by TLS bootstrap: a CSR by the token's user, approved
	// and signed, then the Node.
	g.Eventually(s.ReadyClaims).Should(Equal(1))
	var csr certificatesv1.CertificateSigningRequest
	g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: "node-csr-" + claim.Name + "-" + tokenID}, &csr)).To(Succeed())
	g.Expect(csr.Spec.Username).To(Equal("system:bootstrap:" + tokenID))
	g.Expect(csr.Spec.SignerName).To(Equal(certificatesv1.KubeAPIServerClientKubeletSignerName))
	g.Expect(csr.Status.Certificate).NotTo(BeEmpty())
	g.Expect(harness.DecisionOf(g, csr.Name)).To(Equal("Approved/"+csrapproval.ReasonApproved), "approved by claimscale")
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), &csr) })

	// Registered: the token is deleted and stops working.
	g.Eventually(func() bool {
		err := env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&secret), &corev1.Secret{})
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "the token's Secret is deleted once the node registered")
	g.Eventually(func() error { _, err := whoAmI(token); return err }).Should(Satisfy(apierrors.IsUnauthorized))
	g.Eventually(func() *metav1.Time {
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&claim), &claim)).To(Succeed())
		return claim.Status.BootstrapToken.RevokedAt
	}).ShouldNot(BeNil())

	assertNowhere(t, logs.String(), map[string]string{
		"the token's secret": string(secret.Data["token-secret"]),
		"the user data":      "kubeadm.k8s.io/v1beta4",
	})
}

// A controller run with its simulated kubelets elsewhere (make scale's, so
// the kubelets' joins are not counted as the controller's memory and CPU)
// launches the machine but registers no Node; a registrar of the test's
// own, standing in for the kubelet on the machine, joins it with the
// claim's bootstrap token, and the claim and its pod proceed.
func TestSimulatedKubeletsJoinFromOutsideTheController(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{SimulatedKubeletsElsewhere: true})
	s := harness.NewScenario(t, "kubelets-elsewhere")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
	})
	s.CreateDeployment("elsewhere", 1, "1", nil)

	s.G.Eventually(func() int { return len(s.Machines()) }).Should(Equal(1))
	// Its boot delay is a second; the controller's own registrar would
	// register it within a poll (250 ms) after that.
	s.G.Consistently(func() int { return len(s.Nodes()) }, 3*time.Second).Should(BeZero(),
		"no Node registers while nothing plays the kubelets")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kubelets := simulated.NewRegistrar(env.Client, harness.ControllerNamespace, harness.ClusterName, simulated.Config{RESTConfig: env.Config})
	go func() { _ = kubelets.Start(ctx) }()
	s.G.Eventually(s.ReadyClaims).Should(Equal(1))
	s.G.Eventually(func() int { return s.RunningPods("elsewhere") }).Should(Equal(1))
	node := s.Nodes()[0]
	s.G.Expect(node.Spec.ProviderID).To(Equal(simulated.ProviderID(s.Machines()[0].Name)))
	claim := s.Claims()[0]
	s.G.Expect(claim.Status.BootstrapToken).NotTo(BeNil())
	tokenID := claim.Status.BootstrapToken.ID
	var csr certificatesv1.CertificateSigningRequest
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: "node-csr-" + claim.Name + "-" + tokenID}, &csr)).To(Succeed(),
		"the node joined with its token, through a certificate request")
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), &csr) })
	s.G.Expect(csr.Spec.Username).To(Equal("system:bootstrap:" + tokenID))
}

// A token stops working when it expires, whether or not its Secret is
// still there (the API server reads the Secret's expiration), and garbage
// collection then deletes it; a bootstrap token that is not claimscale's is
// never touched.
func TestBootstrapTokenStopsAtExpiry(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-expiry"},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "no-such-pool"},
			Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: *harness.Qty("4"), Memory: *harness.Qty("16Gi")},
		},
	}
	g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })

	tokens := &bootstrap.Tokens{Kube: env.Client, Reader: env.Client, Clock: clock.RealClock{}}
	token, err := tokens.Ensure(ctx, claim, time.Now().Add(4*time.Second), []string{bootstrap.GroupNodeToken})
	g.Expect(err).NotTo(HaveOccurred())
	again, err := tokens.Ensure(ctx, claim, time.Now().Add(time.Hour), []string{bootstrap.GroupNodeToken})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(token), "a retried launch reuses the claim's token")

	user, err := whoAmI(token.String())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(user.Username).To(Equal("system:bootstrap:" + token.ID))
	g.Eventually(func() error { _, err := whoAmI(token.String()); return err }, 30*time.Second, 250*time.Millisecond).
		Should(Satisfy(apierrors.IsUnauthorized))
	secretKey := client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + token.ID}
	g.Expect(env.Client.Get(ctx, secretKey, &corev1.Secret{})).To(Succeed(), "the Secret outlives the token's validity")

	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-zzzzzz"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{"token-id": "zzzzzz", "token-secret": "zzzzzzzzzzzzzzzz", "expiration": "2000-01-01T00:00:00Z", "usage-bootstrap-authentication": "true"},
	}
	g.Expect(env.Client.Create(ctx, foreign)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), foreign) })

	deleted, err := tokens.Collect(ctx, func(string) bool { return true })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(deleted).To(BeNumerically(">=", 1))
	g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, secretKey, &corev1.Secret{}))).To(BeTrue(), "the expired token is collected")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.Secret{})).To(Succeed(), "a token that is not ours stays")
}

// whoAmI authenticates with a bearer token and returns who the API server
// says that is.
func whoAmI(token string) (authenticationv1.UserInfo, error) {
	cs, err := kubernetes.NewForConfig(harness.Bearer(token))
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return review.Status.UserInfo, nil
}

// assertNowhere fails when a needle shows in the controllers' logs, any
// event, or any claimscale object, Node, or simulated machine record.
func assertNowhere(t *testing.T, logs string, needles map[string]string) {
	t.Helper()
	ctx := context.Background()
	haystacks := map[string]string{"controller logs": logs}
	add := func(what string, list client.ObjectList, opts ...client.ListOption) {
		if err := env.Client.List(ctx, list, opts...); err != nil {
			t.Fatalf("listing %s: %v", what, err)
		}
		b, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		haystacks[what] = string(b)
	}
	add("events", &corev1.EventList{})
	add("nodeclaims", &v1alpha1.NodeClaimList{})
	add("nodepools", &v1alpha1.NodePoolList{})
	add("nodeproviders", &v1alpha1.NodeProviderList{})
	add("nodes", &corev1.NodeList{})
	add("machine records", &corev1.ConfigMapList{}, client.InNamespace(harness.ControllerNamespace))
	if len(logs) == 0 {
		t.Errorf("no controller logs were captured: the check would pass vacuously")
	}
	for what, needle := range needles {
		if needle == "" {
			t.Fatalf("empty needle %s", what)
		}
		for where, haystack := range haystacks {
			if strings.Contains(haystack, needle) {
				t.Errorf("%s found in %s", what, where)
			}
		}
	}
	size := 0
	for _, haystack := range haystacks {
		size += len(haystack)
	}
	t.Logf("searched %d bytes of logs, events and objects", size)
}

// Garbage collection deletes a claimscale bootstrap token whose claim is
// gone, before it expires, and leaves bootstrap tokens that are not
// claimscale's alone.
func TestGarbageCollectionRemovesOrphanedBootstrapTokens(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	harness.StartOperator(t, harness.OperatorOptions{})
	expiration := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	orphan := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-orphan",
			Labels: map[string]string{v1alpha1.LabelBootstrapToken: "true", v1alpha1.LabelNodeClaim: "claim-that-is-gone"}},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{"token-id": "orphan", "token-secret": "0123456789abcdef", "expiration": expiration, "usage-bootstrap-authentication": "true"},
	}
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-yyyyyy"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{"token-id": "yyyyyy", "token-secret": "yyyyyyyyyyyyyyyy", "expiration": expiration, "usage-bootstrap-authentication": "true"},
	}
	for _, secret := range []*corev1.Secret{orphan, foreign} {
		g.Expect(env.Client.Create(ctx, secret)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), secret) })
	}
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), &corev1.Secret{}))
	}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "the orphaned token is collected")
	g.Consistently(func() error {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.Secret{})
	}, 3*time.Second, 250*time.Millisecond).Should(Succeed(), "a token that is not claimscale's stays")
}

// A custom template that cannot be read stops the launch with a condition
// and an event that name it, and no machine is made; once the ConfigMap
// exists, the claim launches with the template rendered, and the machine
// joins with the token it carries.
func TestBootstrapCustomTemplate(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "bootstrap-custom")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{
			Method:              v1alpha1.JoinCustom,
			UserDataTemplateRef: &v1alpha1.KeyReference{Kind: "ConfigMap", Name: "bootstrap-custom", Key: "user-data"},
		}
	})
	s.CreateDeployment("custom", 1, "1", nil)

	g := s.G
	g.Eventually(func() string {
		for _, claim := range s.Claims() {
			for _, condition := range claim.Status.Conditions {
				if condition.Type == v1alpha1.ConditionLaunched && condition.Reason == "BootstrapFailed" {
					return condition.Message
				}
			}
		}
		return ""
	}).Should(ContainSubstring(`ConfigMap claimscale-system/bootstrap-custom`))
	g.Expect(s.Machines()).To(BeEmpty(), "no machine without its user data")

	template := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: harness.ControllerNamespace, Name: "bootstrap-custom"},
		Data: map[string]string{"user-data": "#!/bin/sh\n# {{ .NodeName }} in {{ .Pool }}\n" +
			"join --server {{ .APIServerURL }} --token {{ .Token }} {{ range .KubeletArgs }}--{{ .Name }}={{ .Value }} {{ end }}\n"},
	}
	g.Expect(env.Client.Create(s.Ctx, template)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), template) })
	g.Eventually(s.ReadyClaims).Should(Equal(1))
	claim := s.Claims()[0]
	var userData corev1.Secret
	g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Namespace: harness.ControllerNamespace, Name: claim.Name}, &userData)).To(Succeed())
	g.Expect(string(userData.Data["userData"])).To(HavePrefix("#!/bin/sh\n# " + claim.Name + " in " + s.Name + "\njoin --server https://"))
	g.Expect(string(userData.Data["userData"])).To(ContainSubstring("--token " + claim.Status.BootstrapToken.ID + "."))
	g.Expect(string(userData.Data["userData"])).To(ContainSubstring("--max-pods=110"))
}

// kube-controller-manager's approver, with kubeadm's auto-approval bindings
// in place (testenv makes them as kubeadm init does), approves a request of
// a token in kubeadm's node-token group for any node name, but not one of
// claimscale's tokens: with no claimscale running, the latter stays
// pending.
func TestControllerManagerDoesNotApproveClaimscaleTokens(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "kcm-approval"},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "no-such-pool"},
			Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: *harness.Qty("4"), Memory: *harness.Qty("16Gi")},
		},
	}
	g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })
	tokens := &bootstrap.Tokens{Kube: env.Client, Reader: env.Client, Clock: clock.RealClock{}}
	ours, err := tokens.Ensure(ctx, claim, time.Now().Add(time.Hour), []string{bootstrap.GroupNodeToken})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = tokens.Revoke(context.Background(), claim.Name) })
	kubeadms := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-kcmapr"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{
			"token-id": "kcmapr", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
			"expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "auth-extra-groups": bootstrap.GroupKubeadmNodeToken,
		},
	}
	g.Expect(env.Client.Create(ctx, kubeadms)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), kubeadms) })

	control := harness.SubmitCSR(g, "kcmapr.0123456789abcdef", "kcm-approval-kubeadm", "system:node:anything-at-all")
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), control) })
	mine := harness.SubmitCSR(g, ours.String(), "kcm-approval-claimscale", "system:node:"+claim.Name)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mine) })
	g.Eventually(func() string { return harness.DecisionOf(g, control.Name) }, time.Minute, 250*time.Millisecond).Should(Equal("Approved/AutoApproved"),
		"kube-controller-manager auto-approves a kubeadm token's request, for any node name")
	g.Consistently(func() string { return harness.DecisionOf(g, mine.Name) }, 5*time.Second, 250*time.Millisecond).Should(BeEmpty(),
		"nothing but claimscale approves a claimscale token's request")
}
