package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// silentListener accepts TCP connections and never answers on them, like
// an API endpoint behind a firewall that drops replies, or a hung server.
func silentListener(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = listener.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			_ = conn.Close()
		}
	})
	return listener.Addr().String()
}

// stuckCloudscalePool makes and returns a scenario with a cloudscale NodeProvider whose
// API is at apiURL, a pool of it and two pending pods of 1 cpu; the
// provider and pool go when the test ends.
func stuckCloudscalePool(t *testing.T, name, apiURL string) *harness.Scenario {
	s := harness.NewScenario(t, name)
	s.CreateSecret(name+"-credentials", map[string][]byte{
		"token": []byte("cloudscale-api-token"), "apiURL": []byte(apiURL),
	})
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeCloudscale,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: name + "-credentials", Namespace: harness.ControllerNamespace},
			Cloudscale:           &v1alpha1.CloudscaleSettings{Zone: "lpg1", Image: "debian-12"},
		},
	})).To(Succeed())
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: s.Name}})
		_ = env.Client.Delete(context.Background(), &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: s.Name}})
	})
	s.CreatePool(func(pool *v1alpha1.NodePool) { pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "flex-4-2"}} })
	s.CreateDeployment("stuck", 2, "1", nil)
	return s
}

// NodeProviders whose API accepts connections and never answers, or
// refuses them, each with a pool and pending pods of its own, are reported
// Unreachable and hold up nobody: a healthy pool's pending pods get their
// claims within 2 s, from the start and once they are known unreachable.
func TestHangingProviderDoesNotDelayOtherPools(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	address := silentListener(t)

	stuck := harness.NewScenario(t, "hanging")
	stuck.CreateSecret("hanging-credentials", map[string][]byte{
		proxmox.SecretKeyTokenID: []byte("claimscale@pve!autoscaler"), proxmox.SecretKeyTokenSecret: []byte("token-secret-value"),
	})
	stuck.G.Expect(env.Client.Create(stuck.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: stuck.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeProxmox,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "hanging-credentials", Namespace: harness.ControllerNamespace},
			Proxmox: &v1alpha1.ProxmoxSettings{
				Endpoint:              "https://" + address + "/api2/json",
				InsecureSkipTLSVerify: true,
				VMIDRange:             v1alpha1.VMIDRange{Lower: 5000, Upper: 5099},
				Clone:                 &v1alpha1.ProxmoxClone{TemplateID: 9000},
			},
		},
	})).To(Succeed())
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: stuck.Name}})
		_ = env.Client.Delete(context.Background(), &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: stuck.Name}})
	})
	stuck.CreatePool(nil)
	stuck.CreateDeployment("stuck", 2, "1", nil)

	// A cloudscale NodeProvider builds without calling its API; its calls
	// hang instead.
	stuckCalls := stuckCloudscalePool(t, "hanging-calls", "http://"+address)

	// A cloudscale NodeProvider whose endpoint refuses connections: its
	// SDK retries with backoff, for longer than the call timeout.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	stuck.G.Expect(err).NotTo(HaveOccurred())
	refusedAddress := closed.Addr().String()
	stuck.G.Expect(closed.Close()).To(Succeed())
	refusing := stuckCloudscalePool(t, "refusing", "http://"+refusedAddress)

	// The healthy pool's claims come within 2 s from the start, before the
	// others are known to be unreachable: no round waits on them.
	healthy := harness.NewScenario(t, "beside-hanging")
	defer healthy.Cleanup()
	healthy.CreateProvider(v1alpha1.SimulatedSettings{})
	healthy.CreatePool(nil)
	for round := range 3 {
		app := fmt.Sprintf("healthy-%d", round)
		healthy.CreateDeployment(app, 1, "3", nil)
		var unschedulable time.Time
		healthy.G.Eventually(func() bool {
			for _, pod := range healthy.Pods(app) {
				for _, condition := range pod.Status.Conditions {
					if condition.Type == corev1.PodScheduled && condition.Reason == corev1.PodReasonUnschedulable {
						unschedulable = time.Now()
						return true
					}
				}
			}
			return false
		}).WithPolling(20 * time.Millisecond).Should(BeTrue())
		before := len(healthy.Claims())
		healthy.G.Eventually(func() int { return len(healthy.Claims()) }).WithPolling(20 * time.Millisecond).WithTimeout(time.Minute).Should(BeNumerically(">", before))
		latency := time.Since(unschedulable)
		t.Logf("round %d: pod unschedulable → claim in %s while NodeProviders %s, %s and %s hang or refuse", round, latency.Round(10*time.Millisecond), stuck.Name, stuckCalls.Name, refusing.Name)
		healthy.G.Expect(latency).To(BeNumerically("<", 2*time.Second))
		healthy.G.Eventually(func() int { return healthy.RunningPods(app) }).Should(Equal(1))
	}

	for _, name := range []string{stuck.Name, stuckCalls.Name, refusing.Name} {
		stuck.G.Eventually(func() string {
			var nodeProvider v1alpha1.NodeProvider
			stuck.G.Expect(env.Client.Get(stuck.Ctx, client.ObjectKey{Name: name}, &nodeProvider)).To(Succeed())
			if ready := meta.FindStatusCondition(nodeProvider.Status.Conditions, v1alpha1.ConditionReady); ready != nil && ready.Status == metav1.ConditionFalse {
				return ready.Reason
			}
			return ""
		}).WithTimeout(time.Minute).Should(Equal("Unreachable"), "NodeProvider %s", name)
	}

	for round := 3; round < 5; round++ {
		app := fmt.Sprintf("healthy-%d", round)
		healthy.CreateDeployment(app, 1, "3", nil)
		var unschedulable time.Time
		healthy.G.Eventually(func() bool {
			for _, pod := range healthy.Pods(app) {
				for _, condition := range pod.Status.Conditions {
					if condition.Type == corev1.PodScheduled && condition.Reason == corev1.PodReasonUnschedulable {
						unschedulable = time.Now()
						return true
					}
				}
			}
			return false
		}).WithPolling(20 * time.Millisecond).Should(BeTrue())
		before := len(healthy.Claims())
		healthy.G.Eventually(func() int { return len(healthy.Claims()) }).WithPolling(20 * time.Millisecond).WithTimeout(time.Minute).Should(BeNumerically(">", before))
		latency := time.Since(unschedulable)
		t.Logf("round %d: pod unschedulable → claim in %s while NodeProviders %s, %s and %s are unreachable", round, latency.Round(10*time.Millisecond), stuck.Name, stuckCalls.Name, refusing.Name)
		healthy.G.Expect(latency).To(BeNumerically("<", 2*time.Second))
		healthy.G.Eventually(func() int { return healthy.RunningPods(app) }).Should(Equal(1))
	}
	for _, s := range []*harness.Scenario{stuck, stuckCalls, refusing} {
		var pool v1alpha1.NodePool
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool)).To(Succeed())
		ready := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionReady)
		s.G.Expect(ready).NotTo(BeNil())
		s.G.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		s.G.Expect(ready.Reason).To(Equal("Unreachable"))
		s.G.Expect(s.Claims()).To(BeEmpty())
	}
}

// A NodeClaim made by hand and named after a Node that exists does not take
// that Node over: the Node keeps its labels, taints and finalizers, gets no
// owner, and stays when the claim is deleted.
func TestHandMadeClaimNamedAfterANodeLeavesTheNodeAlone(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "handmade")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "handmade-node",
			Labels:      map[string]string{"team": "payments", corev1.LabelHostname: "handmade-node"},
			Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"},
			Finalizers:  []string{"example.com/keep"},
		},
		// No providerID, as on a cluster without a cloud controller: a
		// claim matching nodes by name would take it.
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: "team", Value: "payments", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("110")}},
	}
	s.G.Expect(env.Client.Create(s.Ctx, node)).To(Succeed())
	t.Cleanup(func() {
		var current corev1.Node
		if env.Client.Get(context.Background(), client.ObjectKey{Name: node.Name}, &current) == nil {
			current.Finalizers = nil
			_ = env.Client.Update(context.Background(), &current)
			_ = env.Client.Delete(context.Background(), &current)
		}
	})
	untouched := func(g Gomega) {
		var current corev1.Node
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: node.Name}, &current)).To(Succeed())
		g.Expect(current.DeletionTimestamp.IsZero()).To(BeTrue(), "the node is being deleted")
		g.Expect(current.Labels).To(Equal(node.Labels))
		g.Expect(current.Spec.Taints).To(Equal(node.Spec.Taints))
		g.Expect(current.Finalizers).To(Equal([]string{"example.com/keep"}))
		g.Expect(current.OwnerReferences).To(BeEmpty())
	}

	claim := &v1alpha1.NodeClaim{
		// The label names a NodeProvider that does not exist: it is for
		// people, and cannot send the claim elsewhere.
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: map[string]string{"claimscale.io/nodeprovider": "no-such-provider"}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.Name},
			Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")},
			Taints:      []corev1.Taint{{Key: "adopted", Effect: corev1.TaintEffectNoExecute}},
		},
	}
	s.G.Expect(env.Client.Create(s.Ctx, claim)).To(Succeed())
	s.G.Eventually(func() string {
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		if registered := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionRegistered); registered != nil {
			return registered.Reason
		}
		return ""
	}).Should(Equal("WaitingForNode"), "the claim launched its own machine and waits for that machine's node")
	s.G.Expect(claim.Status.NodeProviderName).To(Equal(s.Name))
	s.G.Consistently(untouched).WithTimeout(3 * time.Second).Should(Succeed())

	s.G.Expect(env.Client.Delete(s.Ctx, claim)).To(Succeed())
	s.G.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), &v1alpha1.NodeClaim{}))
	}).Should(BeTrue())
	s.G.Eventually(func() int { return len(s.Machines()) }).Should(BeZero(), "the claim's own machine is deleted")
	s.G.Consistently(untouched).WithTimeout(2 * time.Second).Should(Succeed())
}

// leakyProvider is the simulated provider with an API that quotes the
// credentials back in its errors, plain and URL-encoded, together with
// the user data it was sent, as real APIs do in their error bodies.
type leakyProvider struct {
	provider.Provider
	token string
}

func (p leakyProvider) Create(_ context.Context, _ *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	return nil, provider.NewRetryable(fmt.Errorf("POST https://api.example/v1/servers?token=%s: 403 Forbidden: token %q may not create servers; user_data %q; request id %s",
		url.QueryEscape(p.token), p.token, opts.UserData, strings.Repeat("0123456789", 200)), time.Second)
}

// A provider error that carries the credentials (plain and URL-encoded)
// reaches the claim's conditions, its events and the controller's logs
// with them redacted; an error too long for an event is cut there.
func TestProviderErrorsAreRedactedInConditionsEventsAndLogs(t *testing.T) {
	const token = "tok/secret+value=42"
	registry := operator.DefaultRegistry(env.Client)
	registry.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		inner, err := simulated.NewFactory(simulated.Config{Kube: env.Client})(ctx, np, opts)
		if err != nil {
			return nil, err
		}
		return leakyProvider{Provider: inner, token: string(opts.Credentials["token"])}, nil
	})
	logs := harness.TapControllerLogs(t)
	harness.StartOperator(t, harness.OperatorOptions{Registry: registry})

	s := harness.NewScenario(t, "redaction")
	defer s.Cleanup()
	s.CreateSecret("redaction-credentials", map[string][]byte{"token": []byte(token)})
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeSimulated,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "redaction-credentials", Namespace: harness.ControllerNamespace},
			Simulated:            &v1alpha1.SimulatedSettings{},
		},
	})).To(Succeed())
	// A bootstrap section, so the provider is sent user data carrying the
	// claim's join token, and its error quotes that too.
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
	})
	s.CreateDeployment("redacted", 1, "1", nil)

	secrets := []string{token, url.QueryEscape(token), url.PathEscape(token), "kind: JoinConfiguration", `kind: JoinConfiguration\n`}
	var said []string
	s.G.Eventually(func() []string {
		said = nil
		for _, claim := range s.Claims() {
			for _, condition := range claim.Status.Conditions {
				said = append(said, condition.Message)
			}
			said = append(said, harness.EventsOf(s.G, "NodeClaim", claim.Name)...)
		}
		return said
	}).Should(ContainElements(ContainSubstring("403 Forbidden"), ContainSubstring("LaunchFailed: POST")), "the error reaches the claim's condition and events")
	s.G.Eventually(logs.String).Should(ContainSubstring("403 Forbidden"), "the error reaches the log")
	said = append(said, logs.String())
	// The claim's join token, which the user data carries.
	for _, claim := range s.Claims() {
		s.G.Expect(claim.Status.BootstrapToken).NotTo(BeNil(), "the pool renders user data with a token")
		var tokenSecret corev1.Secret
		if env.Client.Get(s.Ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + claim.Status.BootstrapToken.ID}, &tokenSecret) == nil {
			secrets = append(secrets, string(tokenSecret.Data["token-secret"]))
		}
	}
	s.G.Expect(len(secrets)).To(BeNumerically(">", 5), "the join token's secret is among the secrets looked for")
	for _, text := range said {
		for _, secret := range secrets {
			s.G.Expect(text).NotTo(ContainSubstring(secret))
		}
	}
	s.G.Expect(strings.Join(said, "\n")).To(ContainSubstring("[redacted]"))
	// The error is longer than an event's note may be: the event is cut,
	// not refused, and the condition keeps it whole.
	for _, claim := range s.Claims() {
		for _, event := range harness.EventsOf(s.G, "NodeClaim", claim.Name) {
			if strings.HasPrefix(event, "LaunchFailed: ") {
				s.G.Expect(len(event) - len("LaunchFailed: ")).To(BeNumerically("<=", 1024))
				s.G.Expect(event).To(HaveSuffix("…[truncated]"))
			}
		}
		launched := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionLaunched)
		s.G.Expect(launched).NotTo(BeNil())
		s.G.Expect(len(launched.Message)).To(BeNumerically(">", 2000))
	}
}

// A claim whose NodeProvider is deleted while it has a machine waits in
// Terminating and says for what; the release annotation lets it go, and
// the machine is collected once its NodeProvider is back.
func TestClaimOfAGoneProviderWaitsVisiblyAndIsReleasedByAnnotation(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{GCGracePeriod: time.Second})
	s := harness.NewScenario(t, "released")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "released-by-hand", Labels: map[string]string{v1alpha1.LabelNodePool: s.Name}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.Name},
			Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")},
		},
	}
	s.G.Expect(env.Client.Create(s.Ctx, claim)).To(Succeed())
	s.G.Eventually(func() bool {
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		return meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched)
	}).Should(BeTrue())
	s.G.Expect(s.Machines()).To(HaveLen(1))

	nodeProvider := &v1alpha1.NodeProvider{}
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, nodeProvider)).To(Succeed())
	spec := nodeProvider.Spec.DeepCopy()
	s.G.Expect(env.Client.Delete(s.Ctx, nodeProvider)).To(Succeed())
	s.G.Expect(env.Client.Delete(s.Ctx, claim)).To(Succeed())
	s.G.Eventually(func() string {
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		if terminating := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionTerminating); terminating != nil {
			return terminating.Reason + ": " + terminating.Message
		}
		return ""
	}).Should(And(HavePrefix("WaitingForNodeProvider: "), ContainSubstring("NodeProvider released does not exist"), ContainSubstring(v1alpha1.AnnotationReleaseMachine)))
	s.G.Eventually(func() []string { return harness.EventsOf(s.G, "NodeClaim", claim.Name) }).Should(ContainElement(HavePrefix("WaitingForNodeProvider")))
	s.G.Consistently(func() error {
		return env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), &v1alpha1.NodeClaim{})
	}).WithTimeout(2*time.Second).Should(Succeed(), "the claim waits while its machine cannot be deleted")

	patch := client.MergeFrom(claim.DeepCopy())
	claim.Annotations = map[string]string{v1alpha1.AnnotationReleaseMachine: "true"}
	s.G.Expect(env.Client.Patch(s.Ctx, claim, patch)).To(Succeed())
	s.G.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(claim), &v1alpha1.NodeClaim{}))
	}).Should(BeTrue(), "the annotation releases the claim")
	s.G.Expect(s.Machines()).To(HaveLen(1), "the machine is left for garbage collection")

	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: s.Name}, Spec: *spec})).To(Succeed())
	s.G.Eventually(func() int { return len(s.Machines()) }).Should(BeZero(), "garbage collection removes the machine once its NodeProvider is back")
}

// switchableProvider is the simulated provider whose Shapes can be made to
// fail, as a provider's API does when it goes away for a while.
type switchableProvider struct {
	provider.Provider
	failing *atomic.Bool
}

func (p switchableProvider) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	if p.failing.Load() {
		return nil, provider.NewRetryable(errors.New("503 Service Unavailable"), 0)
	}
	return p.Provider.Shapes(ctx, pool)
}

// While a pool's provider fails, the machines the pool is booting still
// count: their pods wait for them and are not bought a second node in
// another pool.
func TestMachinesBootingInAFailingPoolAreNotBoughtTwice(t *testing.T) {
	var failing atomic.Bool
	registry := operator.DefaultRegistry(env.Client)
	registry.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		inner, err := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})(ctx, np, opts)
		if err != nil || np.Name != "failing" {
			return inner, err
		}
		return switchableProvider{Provider: inner, failing: &failing}, nil
	})
	harness.StartOperator(t, harness.OperatorOptions{Registry: registry})

	fallback := harness.NewScenario(t, "fallback")
	defer fallback.Cleanup()
	fallback.CreateProvider(v1alpha1.SimulatedSettings{})
	fallback.CreatePool(func(pool *v1alpha1.NodePool) { pool.Spec.Template.Labels = map[string]string{"scenario": "failing"} })

	s := harness.NewScenario(t, "failing")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{BootDelay: &metav1.Duration{Duration: 20 * time.Second}})
	s.CreatePool(func(pool *v1alpha1.NodePool) { pool.Spec.Weight = 50 })
	s.CreateDeployment("waits", 1, "1", nil)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(Equal(1))
	s.G.Expect(fallback.Claims()).To(BeEmpty(), "the heavier pool was chosen")

	failing.Store(true)
	// A pod no pool can hold opens new rounds, in which the failing pool is
	// left out of provisioning.
	s.CreateDeployment("nowhere", 1, "1", func(deployment *appsv1.Deployment) {
		deployment.Spec.Template.Spec.NodeSelector = map[string]string{"scenario": "nowhere"}
	})
	s.G.Eventually(func() []string { return harness.EventsOf(s.G, "NodePool", s.Name) }).Should(ContainElement(ContainSubstring("503 Service Unavailable")))
	s.G.Consistently(func() int { return len(fallback.Claims()) }).WithTimeout(5*time.Second).Should(BeZero(),
		"the pod waiting for the failing pool's booting machine got a second node elsewhere")
	s.G.Expect(s.Claims()).To(HaveLen(1))
	failing.Store(false)
	s.G.Eventually(func() int { return s.RunningPods("waits") }).WithTimeout(time.Minute).Should(Equal(1))
}
