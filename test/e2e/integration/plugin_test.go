package integration

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/testcerts"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/providerexample"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The lifecycle scenarios with the provider out of process: the reference
// plugin (cmd/claimscale-provider-example's code) serves the simulated
// provider over claimscale.provider.v1 with mutual TLS, and the
// controllers, built without the simulated provider, reach it through a
// grpc NodeProvider.

// examplePlugin is the reference plugin running on 127.0.0.1, killed and
// restarted at will on the same address.
type examplePlugin struct {
	t        *testing.T
	endpoint string
	options  providerexample.Options
	mu       sync.Mutex
	stop     func()
}

// startExamplePlugin serves the plugin for the e2e cluster with its own
// CA, and returns it with the credentials Secret data of its client.
func startExamplePlugin(t *testing.T, sim v1alpha1.SimulatedSettings) (*examplePlugin, map[string][]byte) {
	t.Helper()
	authority, err := testcerts.NewAuthority("e2e-plugin-ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := authority.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	clientPair, err := authority.Client("claimscale")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := authority.WriteFiles(t.TempDir(), server)
	if err != nil {
		t.Fatal(err)
	}
	if sim.BootDelay == nil {
		sim.BootDelay = &metav1.Duration{Duration: time.Second}
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &examplePlugin{t: t, endpoint: listener.Addr().String(), options: providerexample.Options{
		CertFile: cert, KeyFile: key, ClientCAFile: ca,
		ClusterName: harness.ClusterName, Namespace: harness.ControllerNamespace, Simulated: sim, RESTConfig: env.Config,
	}}
	p.serve(listener)
	t.Cleanup(p.kill)
	return p, map[string][]byte{plugin.KeyClientCert: clientPair.CertPEM, plugin.KeyClientKey: clientPair.KeyPEM, plugin.KeyCA: authority.CertPEM}
}

func (p *examplePlugin) serve(listener net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- providerexample.Serve(ctx, listener, p.options) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop = func() {
		cancel()
		if err := <-done; err != nil {
			p.t.Errorf("the plugin stopped with %v", err)
		}
	}
}

// kill stops the plugin: its port refuses connections until restart.
func (p *examplePlugin) kill() {
	p.mu.Lock()
	stop := p.stop
	p.stop = nil
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// restart serves the plugin again on its address.
func (p *examplePlugin) restart(g *WithT) {
	p.t.Helper()
	var listener net.Listener
	g.Eventually(func() (err error) {
		listener, err = net.Listen("tcp", p.endpoint)
		return err
	}).WithTimeout(10*time.Second).Should(Succeed(), "the plugin's port is free again")
	p.serve(listener)
}

// createPluginProvider makes the scenario's NodeProvider of type grpc,
// reaching the plugin with the client certificate in a Secret.
func createPluginProvider(s *harness.Scenario, p *examplePlugin, credentials map[string][]byte) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name + "-plugin-client", Namespace: harness.ControllerNamespace},
		Type:       corev1.SecretTypeTLS,
		Data:       credentials,
	}
	s.G.Expect(env.Client.Create(s.Ctx, secret)).To(Succeed())
	s.T.Cleanup(func() { _ = env.Client.Delete(context.Background(), secret) })
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeGRPC,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: secret.Name, Namespace: secret.Namespace},
			GRPC: &v1alpha1.GRPCSettings{
				Endpoint: p.endpoint, CallTimeout: &metav1.Duration{Duration: 10 * time.Second}, Retries: harness.Ptr(int32(1)),
			},
		},
	})).To(Succeed())
}

// expectOneMachinePerClaim: every claim has exactly one machine and every
// machine a claim.
func expectOneMachinePerClaim(s *harness.Scenario) {
	s.T.Helper()
	perClaim := map[string]int{}
	for _, machine := range s.Machines() {
		perClaim[machine.Labels[v1alpha1.TagNodeClaim]]++
	}
	claims := s.Claims()
	s.G.Expect(perClaim).To(HaveLen(len(claims)), "as many machines as claims")
	for _, claim := range claims {
		s.G.Expect(perClaim[claim.Name]).To(Equal(1), "claim %s has one machine", claim.Name)
	}
}

func TestPluginScaleUpThenDownToZero(t *testing.T) {
	reference, credentials := startExamplePlugin(t, v1alpha1.SimulatedSettings{})
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.ProductionRegistry()})
	s := harness.NewScenario(t, "plugin-scale")
	defer s.Cleanup()
	createPluginProvider(s, reference, credentials)
	s.CreatePool(nil)
	s.G.Eventually(s.NodeProviderReady).Should(HaveField("Status", metav1.ConditionTrue), "the plugin answers")
	started := time.Now()
	deployment := s.CreateDeployment("web", 12, "1", nil)

	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(12), "all pods Running")
	t.Logf("12 pods Running %s after the Deployment was created", time.Since(started).Round(time.Second))
	s.G.Eventually(s.ReadyClaims).Should(Equal(len(s.Claims())), "every claim Ready")
	for _, claim := range s.Claims() {
		s.G.Expect(claim.Status.ProviderID).To(HavePrefix("simulated://"))
		s.G.Expect(claim.Status.NodeProviderName).To(Equal(s.Name))
	}
	expectOneMachinePerClaim(s)

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero(),
		"every claim, node and machine removed after consolidateAfter")
}

func TestPluginMachineThatNeverRegistersIsRemoved(t *testing.T) {
	reference, credentials := startExamplePlugin(t, v1alpha1.SimulatedSettings{NeverRegisterPercent: 100})
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.ProductionRegistry()})
	s := harness.NewScenario(t, "plugin-unregistered")
	defer s.Cleanup()
	createPluginProvider(s, reference, credentials)
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 5 * time.Second}
	})
	deployment := s.CreateDeployment("stuck", 1, "1", nil)

	s.G.Eventually(s.Claims).ShouldNot(BeEmpty())
	first := s.Claims()[0]
	s.G.Eventually(func() error {
		return env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&first), &first)
	}).Should(MatchError(ContainSubstring("not found")), "claim deleted after the registration timeout")
	s.G.Eventually(func() []string { return harness.EventsOf(s.G, "NodeClaim", first.Name) }).
		Should(ContainElement(ContainSubstring("RegistrationTimeout")))
	s.G.Eventually(func() []corev1.ConfigMap {
		return harness.MachinesOf(s.G, client.MatchingLabels{v1alpha1.TagNodeClaim: first.Name})
	}).Should(BeEmpty(), "the machine went with its claim, deleted through the plugin")
	s.Scale(deployment, 0)
}

func TestPluginRestartAfterCreateMakesNoSecondMachine(t *testing.T) {
	reference, credentials := startExamplePlugin(t, v1alpha1.SimulatedSettings{})
	s := harness.NewScenario(t, "plugin-restart")
	defer s.Cleanup()
	createPluginProvider(s, reference, credentials)
	s.CreatePool(nil)

	crashed := make(chan struct{})
	var stopFirst func()
	var once sync.Once
	crashing := operator.ProductionRegistry()
	crashing.Register(v1alpha1.ProviderTypeGRPC, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		machines, err := plugin.New(ctx, np, opts)
		if err != nil {
			return nil, err
		}
		return &harness.CrashAfterCreate{Provider: machines, Crash: func() {
			once.Do(func() { close(crashed); go stopFirst() })
		}}, nil
	})
	stopFirst = harness.StartOperator(t, harness.OperatorOptions{Registry: crashing})
	deployment := s.CreateDeployment("once", 1, "1", nil)
	s.G.Eventually(crashed).Should(BeClosed())
	stopFirst()

	s.G.Expect(s.Claims()).To(HaveLen(1))
	claim := s.Claims()[0]
	s.G.Expect(claim.Status.ProviderID).To(BeEmpty(), "the status write was lost with the crash")
	s.G.Expect(s.Machines()).To(HaveLen(1), "the plugin made the machine before the crash")

	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.ProductionRegistry()})
	s.G.Eventually(func() int { return s.RunningPods("once") }).Should(Equal(1))
	s.G.Eventually(s.ReadyClaims).Should(Equal(1))
	s.G.Expect(s.Claims()).To(HaveLen(1))
	expectOneMachinePerClaim(s)
	s.Scale(deployment, 0)
}

// The plugin dies while a scale-up is under way (its machines made, not yet
// registered) and more pods arrive while it is down: the NodeProvider turns
// Unreachable, nothing crashes, and no claim is given up for its machine.
// When the plugin returns, every pod runs, with exactly one machine per
// claim.
func TestPluginKilledMidScaleUpRecovers(t *testing.T) {
	reference, credentials := startExamplePlugin(t, v1alpha1.SimulatedSettings{BootDelay: &metav1.Duration{Duration: 2 * time.Second}})
	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.ProductionRegistry()})
	s := harness.NewScenario(t, "plugin-killed")
	defer s.Cleanup()
	createPluginProvider(s, reference, credentials)
	s.CreatePool(nil)
	s.G.Eventually(s.NodeProviderReady).Should(HaveField("Status", metav1.ConditionTrue), "the plugin answers")

	first := s.CreateDeployment("first", 6, "1", nil)
	s.G.Eventually(s.Machines).ShouldNot(BeEmpty(), "the scale-up has begun")
	reference.kill()
	killed := time.Now()
	second := s.CreateDeployment("second", 4, "1", nil)

	s.G.Eventually(s.NodeProviderReady).Should(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonUnreachable)),
		"the NodeProvider is Unreachable while the plugin is down")
	t.Logf("NodeProvider Unreachable %s after the plugin was killed", time.Since(killed).Round(time.Second))
	launched := map[string]bool{}
	for _, claim := range s.Claims() {
		launched[claim.Name] = true
	}
	s.G.Expect(launched).NotTo(BeEmpty())

	reference.restart(s.G)
	returned := time.Now()
	s.G.Eventually(func() int { return s.RunningPods("first") + s.RunningPods("second") }).Should(Equal(10), "every pod runs once the plugin is back")
	t.Logf("all pods Running %s after the plugin returned", time.Since(returned).Round(time.Second))
	s.G.Eventually(s.ReadyClaims).Should(Equal(len(s.Claims())), "every claim Ready")
	expectOneMachinePerClaim(s)
	// A claim made before the plugin died is kept, or removed only as a
	// voluntary disruption (its node emptied while the plugin was away),
	// never for a machine taken as gone.
	current := map[string]bool{}
	for _, claim := range s.Claims() {
		current[claim.Name] = true
	}
	for name := range launched {
		events := harness.EventsOf(s.G, "NodeClaim", name)
		s.G.Expect(events).NotTo(ContainElement(ContainSubstring("MachineGone")), "claim %s was not given up for its machine", name)
		if !current[name] {
			s.G.Expect(events).To(ContainElement(HavePrefix("Disrupting")), "claim %s, made before the plugin died, removed only by disruption", name)
		}
	}
	s.G.Eventually(s.NodeProviderReady).Should(HaveField("Status", metav1.ConditionTrue), "the NodeProvider is Ready again")
	s.Scale(first, 0)
	s.Scale(second, 0)
}
