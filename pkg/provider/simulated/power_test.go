package simulated

import (
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// powerFixture is one machine of cluster c1 whose Node has registered,
// with the clock and the registrar the test steps.
type powerFixture struct {
	g         *gomega.WithT
	t         *testing.T
	ns        string
	clk       *clocktesting.FakeClock
	p         *Provider
	registrar *Registrar
	claim     *v1alpha1.NodeClaim
	id        string
}

func newPowerFixture(t *testing.T, sim *v1alpha1.SimulatedSettings) *powerFixture {
	g := gomega.NewWithT(t)
	f := &powerFixture{g: g, t: t, ns: newNamespace(t), clk: clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
	f.p = newTestProvider(t, f.ns, "c1", sim, Config{Clock: f.clk})
	f.registrar = NewRegistrar(env.Client, f.ns, "c1", Config{Clock: f.clk})
	f.claim = newClaim(uniqueName(t, "a"), "pool")
	made, err := f.p.Create(t.Context(), f.claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	f.id = made.ProviderID
	f.clk.Step(f.p.settings.bootDelay)
	g.Expect(f.registrar.RegisterDue(t.Context())).To(gomega.Succeed())
	g.Expect(getNode(g, t, f.claim.Name)).NotTo(gomega.BeNil())
	return f
}

func (f *powerFixture) state() provider.InstanceState {
	got, err := f.p.Get(f.t.Context(), f.id)
	f.g.Expect(err).NotTo(gomega.HaveOccurred())
	return got.State
}

// sleep suspends the machine and deletes its Node, as the claim lifecycle
// does after the stop.
func (f *powerFixture) sleep() {
	f.g.Expect(f.p.Suspend(f.t.Context(), f.id)).To(gomega.Succeed())
	if node := getNode(f.g, f.t, f.claim.Name); node != nil {
		f.g.Expect(env.Client.Delete(f.t.Context(), node)).To(gomega.Succeed())
	}
}

func TestASuspendedMachineHasNoNodeUntilResumed(t *testing.T) {
	f := newPowerFixture(t, nil)
	g := f.g
	f.sleep()
	g.Expect(f.p.Suspend(t.Context(), f.id)).To(gomega.Succeed(), "a second Suspend")
	g.Expect(f.state()).To(gomega.Equal(provider.InstanceSuspended))

	// However long it sleeps, its kubelet does not bring the Node back.
	f.clk.Step(24 * time.Hour)
	g.Expect(f.registrar.RegisterDue(t.Context())).To(gomega.Succeed())
	g.Expect(getNode(g, t, f.claim.Name)).To(gomega.BeNil())

	listed, err := f.p.List(t.Context())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(listed).To(gomega.ConsistOf(gomega.And(
		gomega.HaveField("ProviderID", f.id),
		gomega.HaveField("State", provider.InstanceSuspended),
		gomega.HaveField("Tags", map[string]string{v1alpha1.TagCluster: "c1", v1alpha1.TagNodePool: "pool", v1alpha1.TagNodeClaim: f.claim.Name}),
	)))
}

func TestAResumedMachineRegistersTheSameNodeAfterTheStartDelay(t *testing.T) {
	for _, tt := range []struct {
		name  string
		sim   *v1alpha1.SimulatedSettings
		delay time.Duration
	}{
		{"the default start delay is one second, shorter than the boot delay", nil, time.Second},
		{"the startDelay the NodeProvider sets", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(time.Minute), StartDelay: durationPtr(10 * time.Second)}, 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newPowerFixture(t, tt.sim)
			g := f.g
			g.Expect(tt.delay).To(gomega.BeNumerically("<", f.p.settings.bootDelay))
			f.sleep()
			f.clk.Step(time.Hour)

			g.Expect(f.p.Resume(t.Context(), f.id)).To(gomega.Succeed())
			g.Expect(f.p.Resume(t.Context(), f.id)).To(gomega.Succeed(), "a second Resume")
			g.Expect(f.state()).To(gomega.Equal(provider.InstanceRunning), "a started machine runs before its kubelet registers")
			f.clk.Step(tt.delay - time.Millisecond)
			g.Expect(f.registrar.RegisterDue(t.Context())).To(gomega.Succeed())
			g.Expect(getNode(g, t, f.claim.Name)).To(gomega.BeNil(), "registered before the start delay")

			f.clk.Step(time.Millisecond)
			g.Expect(f.registrar.RegisterDue(t.Context())).To(gomega.Succeed())
			node := getNode(g, t, f.claim.Name)
			g.Expect(node).NotTo(gomega.BeNil(), "no Node after the start delay")
			g.Expect(node.Name).To(gomega.Equal(f.claim.Name))
			g.Expect(node.Spec.ProviderID).To(gomega.Equal(f.id))
			g.Expect(node.Labels).To(gomega.HaveKeyWithValue(v1alpha1.LabelNodeClaim, f.claim.Name))
			g.Expect(f.state()).To(gomega.Equal(provider.InstanceRunning))
		})
	}
}

// The machines are Kubernetes objects: a controller that restarts finds a
// sleeping machine asleep, and can wake it.
func TestASleepingMachineSurvivesARestart(t *testing.T) {
	f := newPowerFixture(t, nil)
	g := f.g
	f.sleep()

	restarted := newTestProvider(t, f.ns, "c1", nil, Config{Clock: f.clk})
	got, err := restarted.Get(t.Context(), f.id)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got.State).To(gomega.Equal(provider.InstanceSuspended))
	again, err := restarted.Create(t.Context(), f.claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(again.ProviderID).To(gomega.Equal(f.id), "a repeated Create makes no second machine for a sleeping one")
	g.Expect(again.State).To(gomega.Equal(provider.InstanceSuspended))

	g.Expect(restarted.Resume(t.Context(), f.id)).To(gomega.Succeed())
	f.clk.Step(DefaultStartDelay)
	g.Expect(NewRegistrar(env.Client, f.ns, "c1", Config{Clock: f.clk}).RegisterDue(t.Context())).To(gomega.Succeed())
	g.Expect(getNode(g, t, f.claim.Name)).NotTo(gomega.BeNil())
	g.Expect(machineRecords(t, f.ns)).To(gomega.HaveLen(1))
}

func TestPowerCallsRefuseWhatIsNotOurs(t *testing.T) {
	f := newPowerFixture(t, nil)
	g := f.g
	other := newTestProvider(t, f.ns, "another-cluster", nil, Config{Clock: f.clk})
	for name, call := range map[string]func() error{
		"Suspend": func() error { return other.Suspend(t.Context(), f.id) },
		"Resume":  func() error { return other.Resume(t.Context(), f.id) },
	} {
		err := call()
		g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "%s of another cluster's machine answered %v", name, err)
	}
	g.Expect(f.state()).To(gomega.Equal(provider.InstanceRunning))
	g.Expect(provider.IsNotFound(f.p.Suspend(t.Context(), ProviderID("no-such-machine")))).To(gomega.BeTrue())
	g.Expect(provider.IsNotFound(f.p.Resume(t.Context(), ProviderID("no-such-machine")))).To(gomega.BeTrue())
	g.Expect(provider.IsTerminal(f.p.Suspend(t.Context(), "proxmox://pve/100"))).To(gomega.BeTrue())
}

func TestDeleteOfASleepingMachineLeavesNothing(t *testing.T) {
	f := newPowerFixture(t, nil)
	g := f.g
	g.Expect(f.p.Suspend(t.Context(), f.id)).To(gomega.Succeed())
	// Before the lifecycle deleted the Node: Delete takes it too.
	g.Expect(f.p.Delete(t.Context(), f.id)).To(gomega.Succeed())
	g.Expect(machineRecords(t, f.ns)).To(gomega.BeEmpty())
	g.Expect(getNode(g, t, f.claim.Name)).To(gomega.BeNil())
	_, err := f.p.Get(t.Context(), f.id)
	g.Expect(provider.IsNotFound(err)).To(gomega.BeTrue(), "%v", err)
}

// A registrar that made a Node just as the machine was stopped (and the
// lifecycle may have deleted the Node before it existed) removes it: a
// stopped machine has no Node.
func TestRegistrarRemovesTheNodeOfAMachineStoppedWhileRegistering(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, Config{})
	claim := newClaim(uniqueName(t, "a"), "pool")
	_, err := p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	var listed corev1.ConfigMap
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: claim.Name}, &listed)).To(gomega.Succeed())
	g.Expect(p.Suspend(t.Context(), ProviderID(claim.Name))).To(gomega.Succeed())
	m, err := machineFromConfigMap(&listed)
	g.Expect(err).NotTo(gomega.HaveOccurred())

	registrar := NewRegistrar(env.Client, ns, "c1", Config{})
	g.Expect(registrar.register(t.Context(), &listed, m, time.Now())).To(gomega.Succeed())
	g.Expect(getNode(g, t, claim.Name)).To(gomega.BeNil())
	got, err := p.Get(t.Context(), ProviderID(claim.Name))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got.State).To(gomega.Equal(provider.InstanceSuspended))
}

// A machine with user data joined with its bootstrap token, which is
// revoked once it registered; woken, its kubelet registers with the client
// certificate it was issued, as a real kubelet does, until that
// certificate expires: then only the revoked token is left, and it cannot.
func TestAWokenMachineRegistersWithItsOwnCertificate(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	cfg := Config{Clock: clk, RESTConfig: env.Config}
	p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0), StartDelay: durationPtr(0)}, cfg)
	claim := newClaim(uniqueName(t, "a"), "pool")
	// A token the API server does not know: revoked.
	_, err := p.Create(t.Context(), claim, provider.CreateOptions{UserData: []byte("#cloud-config\n# token zzzzzz.zzzzzzzzzzzzzzzz\n")})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	registrar := NewRegistrar(env.Client, ns, "c1", cfg)
	g.Expect(registrar.RegisterDue(t.Context())).NotTo(gomega.Succeed(), "joined with a revoked token")

	// What the bootstrap left the kubelet with: the certificate signed for
	// system:node:<name> (valid a day) and its key.
	nodeConfig, err := env.UserConfig("system:node:"+claim.Name, "system:nodes")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var secret corev1.Secret
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: claim.Name}, &secret)).To(gomega.Succeed())
	secret.Data[secretKubeletCert] = nodeConfig.CertData
	secret.Data[secretKubeletKey] = nodeConfig.KeyData
	g.Expect(env.Client.Update(t.Context(), &secret)).To(gomega.Succeed())

	g.Expect(registrar.RegisterDue(t.Context())).To(gomega.Succeed())
	g.Expect(getNode(g, t, claim.Name)).NotTo(gomega.BeNil())

	for _, nap := range []struct {
		name     string
		sleep    time.Duration
		wantNode bool
	}{
		{"a night's sleep: the certificate still holds", 8 * time.Hour, true},
		{"a sleep past the certificate's lifetime: the kubelet cannot join", 24 * time.Hour, false},
	} {
		t.Run(nap.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			g.Expect(p.Suspend(t.Context(), ProviderID(claim.Name))).To(gomega.Succeed())
			if node := getNode(g, t, claim.Name); node != nil {
				g.Expect(env.Client.Delete(t.Context(), node)).To(gomega.Succeed())
			}
			clk.Step(nap.sleep)
			g.Expect(p.Resume(t.Context(), ProviderID(claim.Name))).To(gomega.Succeed())
			err := registrar.RegisterDue(t.Context())
			if nap.wantNode {
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(getNode(g, t, claim.Name)).NotTo(gomega.BeNil())
				return
			}
			g.Expect(apierrors.IsUnauthorized(err)).To(gomega.BeTrue(), "%v", err)
			g.Expect(getNode(g, t, claim.Name)).To(gomega.BeNil())
		})
	}
}
