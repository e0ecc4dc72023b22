package providerexample_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/testcerts"
	"github.com/claimscale/claimscale/internal/providerexample"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
	"github.com/claimscale/claimscale/pkg/provider/plugin"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// env is the API server the plugin keeps its simulated machines in.
var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

// pki is a CA that signs the plugin's server certificate and claimscale's
// client certificate, as cert-manager would.
type pki struct {
	authority *testcerts.Authority
	client    testcerts.Pair
}

func newPKI(t *testing.T, name string) pki {
	t.Helper()
	authority, err := testcerts.NewAuthority(name)
	if err != nil {
		t.Fatal(err)
	}
	client, err := authority.Client("claimscale")
	if err != nil {
		t.Fatal(err)
	}
	return pki{authority: authority, client: client}
}

// credentials are the grpc NodeProvider's credentials Secret data.
func (p pki) credentials() map[string][]byte {
	return map[string][]byte{plugin.KeyClientCert: p.client.CertPEM, plugin.KeyClientKey: p.client.KeyPEM, plugin.KeyCA: p.authority.CertPEM}
}

// startPlugin serves the reference plugin for cluster on 127.0.0.1 over
// mutual TLS with p's certificates, until the test ends, and returns its
// endpoint.
func startPlugin(t *testing.T, p pki, cluster, namespace string, sim v1alpha1.SimulatedSettings) string {
	t.Helper()
	server, err := p.authority.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := p.authority.WriteFiles(t.TempDir(), server)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- providerexample.Serve(ctx, listener, providerexample.Options{
			CertFile: cert, KeyFile: key, ClientCAFile: ca,
			ClusterName: cluster, Namespace: namespace, Simulated: sim, RESTConfig: env.Config,
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the plugin stopped with %v", err)
		}
	})
	return listener.Addr().String()
}

func newClient(t *testing.T, endpoint, cluster string, credentials map[string][]byte) *plugin.Client {
	t.Helper()
	np := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "example-plugin"},
		Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeGRPC, GRPC: &v1alpha1.GRPCSettings{
			Endpoint: endpoint, CallTimeout: &metav1.Duration{Duration: 5 * time.Second}, Retries: ptr.To[int32](1),
		}},
	}
	c, err := plugin.NewClient(np, provider.Options{ClusterName: cluster, Credentials: credentials})
	if err != nil {
		t.Fatalf("building the plugin client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Machines never boot during these tests: no Node is registered.
var noBoot = v1alpha1.SimulatedSettings{BootDelay: &metav1.Duration{Duration: time.Hour}}

// TestConformanceOverTheProtocol runs the provider contract's checks on the
// reference plugin, through the grpc NodeProvider's client, over mutual TLS.
func TestConformanceOverTheProtocol(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		p := newPKI(t, "plugin-ca")
		ns := newNamespace(t)
		ours := newClient(t, startPlugin(t, p, "conformance", ns, noBoot), "conformance", p.credentials())
		theirs := newClient(t, startPlugin(t, p, "another-cluster", ns, noBoot), "another-cluster", p.credentials())
		failingSettings := noBoot
		failingSettings.CreateFailurePercent = 100
		failing := newClient(t, startPlugin(t, p, "conformance", ns, failingSettings), "conformance", p.credentials())
		zero := claim("conformance-zero", "0")
		created := env.RecordCreations(t, corev1.SchemeGroupVersion.WithKind("ConfigMap"), ns)
		return conformance.Harness{
			Provider: ours, ClusterName: "conformance", Foreign: theirs,
			Pool:              pool(),
			UnknownProviderID: simulated.ProviderID("no-such-machine"),
			// The plugin keeps its machines as the simulated provider
			// does, tagged by annotations of a ConfigMap.
			TagsAtCreate: func(ctx context.Context, providerID string) (map[string]string, error) {
				machine, err := created.Created(ctx, strings.TrimPrefix(providerID, simulated.ProviderIDPrefix))
				if err != nil {
					return nil, err
				}
				annotations := machine.GetAnnotations()
				return map[string]string{
					v1alpha1.TagCluster:   annotations[v1alpha1.TagCluster],
					v1alpha1.TagNodePool:  annotations[v1alpha1.TagNodePool],
					v1alpha1.TagNodeClaim: annotations[v1alpha1.TagNodeClaim],
				}, nil
			},
			ErrorCases: []conformance.ErrorCase{
				{Name: "Create of a claim with zero cpu", Want: conformance.Terminal, Call: func(ctx context.Context) error {
					_, err := ours.Create(ctx, zero, provider.CreateOptions{})
					return err
				}},
				{Name: "Create with createFailurePercent 100", Want: conformance.Retryable, Call: func(ctx context.Context) error {
					_, err := failing.Create(ctx, claim("conformance-failing", "2"), provider.CreateOptions{})
					return err
				}},
				{Name: "Get of a providerID of another provider", Want: conformance.Terminal, Call: func(ctx context.Context) error {
					_, err := ours.Get(ctx, "proxmox://pve/100")
					return err
				}},
			},
		}
	})
}

func pool() *v1alpha1.NodePool {
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec:       v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "small", CPU: &cpu, Memory: &memory, Price: "0.05"}}}},
	}
}

func claim(name, cpu string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
			Shape:       v1alpha1.ClaimShape{Name: "small", CPU: resource.MustParse(cpu), Memory: resource.MustParse("4Gi")},
		},
	}
}

// TestOnlyMutuallyTrustedPartiesTalk: a client whose certificate another
// CA signed is refused by the plugin, and a client that trusts another CA
// refuses the plugin; neither gets an answer.
func TestOnlyMutuallyTrustedPartiesTalk(t *testing.T) {
	p := newPKI(t, "plugin-ca")
	stranger := newPKI(t, "stranger-ca")
	endpoint := startPlugin(t, p, "c1", newNamespace(t), noBoot)

	if _, err := newClient(t, endpoint, "c1", p.credentials()).List(t.Context()); err != nil {
		t.Fatalf("List with the right certificates: %v", err)
	}
	foreignCert := stranger.credentials()
	foreignCert[plugin.KeyCA] = p.authority.CertPEM
	if _, err := newClient(t, endpoint, "c1", foreignCert).List(t.Context()); err == nil {
		t.Error("the plugin answered a client whose certificate another CA signed")
	}
	distrusting := p.credentials()
	distrusting[plugin.KeyCA] = stranger.authority.CertPEM
	if _, err := newClient(t, endpoint, "c1", distrusting).List(t.Context()); err == nil {
		t.Error("a client that trusts another CA took the plugin's answer")
	}
}

// TestAPluginOfAnotherClusterRefuses: a plugin set up for one cluster
// never lists or makes machines for another.
func TestAPluginOfAnotherClusterRefuses(t *testing.T) {
	p := newPKI(t, "plugin-ca")
	endpoint := startPlugin(t, p, "c1", newNamespace(t), noBoot)
	_, err := newClient(t, endpoint, "c2", p.credentials()).List(t.Context())
	if !provider.IsTerminal(err) || !strings.Contains(err.Error(), `serves cluster "c1", not "c2"`) {
		t.Fatalf("List for another cluster answered %v, want a Terminal error naming both clusters", err)
	}
}

// TestAnUnreachablePluginIsUnreachable: a plugin that is not there makes
// calls fail fast with a retryable error that the NodeProvider status
// reads as Unreachable, and the client works once the plugin is up.
func TestAnUnreachablePluginIsUnreachable(t *testing.T) {
	p := newPKI(t, "plugin-ca")
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := listener.Addr().String()
	listener.Close()
	c := newClient(t, endpoint, "c1", p.credentials())

	started := time.Now()
	_, err = c.List(t.Context())
	if !provider.IsRetryable(err) || !providerresolver.IsUnreachable(err) {
		t.Fatalf("List of a plugin that is down answered %v, want a retryable error read as unreachable", err)
	}
	if took := time.Since(started); took > 4*time.Second {
		t.Errorf("List of a plugin that is down took %s; it must fail fast, not wait out its timeout", took)
	}

	// The plugin comes up on the same address.
	server, err := p.authority.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := p.authority.WriteFiles(t.TempDir(), server)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_ = providerexample.Run(ctx, providerexample.Options{
			Listen: endpoint, CertFile: cert, KeyFile: key, ClientCAFile: ca,
			ClusterName: "c1", Namespace: newNamespace(t), Simulated: noBoot, RESTConfig: env.Config,
		})
	}()
	gomega.NewWithT(t).Eventually(func() error {
		_, err := c.List(t.Context())
		return err
	}).WithTimeout(20*time.Second).WithPolling(100*time.Millisecond).Should(gomega.Succeed(), "the client reaches the plugin once it is up")
}

// TestASleepingMachineWakesOverTheProtocol: the reference plugin says it
// manages power, and a machine suspended through it loses its Node for
// good until it is resumed; then its kubelet registers the same Node
// again after the start delay.
func TestASleepingMachineWakesOverTheProtocol(t *testing.T) {
	g := gomega.NewWithT(t)
	p := newPKI(t, "plugin-ca")
	ns := newNamespace(t)
	sim := v1alpha1.SimulatedSettings{BootDelay: &metav1.Duration{}, StartDelay: &metav1.Duration{Duration: 500 * time.Millisecond}}
	c := newClient(t, startPlugin(t, p, "c1", ns, sim), "c1", p.credentials())
	g.Expect(provider.CanManagePower(t.Context(), c)).To(gomega.BeTrue(), "the reference plugin says it cannot manage power")

	made, err := c.Create(t.Context(), claim("example-sleepy", "2"), provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	node := func(g gomega.Gomega) *corev1.Node {
		var n corev1.Node
		err := env.Client.Get(t.Context(), client.ObjectKey{Name: made.Name}, &n)
		if apierrors.IsNotFound(err) {
			return nil
		}
		g.Expect(err).NotTo(gomega.HaveOccurred())
		return &n
	}
	g.Eventually(node).WithTimeout(10 * time.Second).ShouldNot(gomega.BeNil())

	g.Expect(c.Suspend(t.Context(), made.ProviderID)).To(gomega.Succeed())
	// As the claim lifecycle does after the stop.
	g.Expect(env.Client.Delete(t.Context(), node(g))).To(gomega.Succeed())
	got, err := c.Get(t.Context(), made.ProviderID)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(got.State).To(gomega.Equal(provider.InstanceSuspended))
	g.Consistently(node).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(gomega.BeNil())

	g.Expect(c.Resume(t.Context(), made.ProviderID)).To(gomega.Succeed())
	var woken *corev1.Node
	g.Eventually(func(g gomega.Gomega) *corev1.Node {
		woken = node(g)
		return woken
	}).WithTimeout(10 * time.Second).ShouldNot(gomega.BeNil())
	g.Expect(woken.Spec.ProviderID).To(gomega.Equal(made.ProviderID))
	g.Expect(c.Delete(t.Context(), made.ProviderID)).To(gomega.Succeed())
}
