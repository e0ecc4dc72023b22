package simulated

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

func TestCreateIsIdempotentByClaimName(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	claim := newClaim(uniqueName(t, "a"), "pool")
	first := newTestProvider(t, ns, "c1", nil, Config{})

	made, err := first.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(made.ProviderID).To(gomega.Equal("simulated://" + claim.Name))
	g.Expect(made.Name).To(gomega.Equal(claim.Name))
	g.Expect(made.State).To(gomega.Equal(provider.InstanceCreating))
	g.Expect(made.Tags).To(gomega.Equal(map[string]string{
		v1alpha1.TagCluster: "c1", v1alpha1.TagNodePool: "pool", v1alpha1.TagNodeClaim: claim.Name,
	}))

	// A restarted controller, whose creates would all fail, retries the
	// call: it finds the machine the first one made.
	restarted := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{CreateFailurePercent: 100}, Config{})
	again, err := restarted.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	expectSameJSON(g, again, made)
	g.Expect(machineRecords(t, ns)).To(gomega.HaveLen(1))
}

func TestCreateRefusesAConfigMapThatIsNotOurMachine(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	claim := newClaim(uniqueName(t, "a"), "pool")
	other := newTestProvider(t, ns, "other-cluster", nil, Config{})
	_, err := other.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	_, err = newTestProvider(t, ns, "c1", nil, Config{}).Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "error %v", err)
	g.Expect(err.Error()).To(gomega.ContainSubstring("not a simulated machine of cluster c1"))
}

func TestCreateFailureInjection(t *testing.T) {
	t.Run("every create fails with a retryable error at 100 percent", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ns := newNamespace(t)
		p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{CreateFailurePercent: 100}, Config{})
		for i := range 5 {
			_, err := p.Create(t.Context(), newClaim(uniqueName(t, string(rune('a'+i))), "pool"), provider.CreateOptions{})
			g.Expect(err).To(gomega.HaveOccurred())
			g.Expect(provider.IsRetryable(err)).To(gomega.BeTrue(), "error %v", err)
			g.Expect(err.Error()).To(gomega.ContainSubstring("simulated create failure"))
		}
		g.Expect(machineRecords(t, ns)).To(gomega.BeEmpty())
	})
	t.Run("a seeded source fails about the configured share of creates", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ns := newNamespace(t)
		p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{CreateFailurePercent: 50},
			Config{Rand: rand.New(rand.NewPCG(1, 2))})
		failed := 0
		for i := range 40 {
			if _, err := p.Create(t.Context(), newClaim(uniqueName(t, string(rune('a'+i))), "pool"), provider.CreateOptions{}); err != nil {
				g.Expect(provider.IsRetryable(err)).To(gomega.BeTrue())
				failed++
			}
		}
		g.Expect(failed).To(gomega.BeNumerically(">", 8))
		g.Expect(failed).To(gomega.BeNumerically("<", 32))
		g.Expect(machineRecords(t, ns)).To(gomega.HaveLen(40 - failed))
	})
}

func TestNodeRegistersAfterTheBootDelay(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "pool")},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
			Template: v1alpha1.NodeTemplate{Kubelet: v1alpha1.KubeletConfiguration{
				MaxPods:      ptr.To[int32](20),
				KubeReserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
				EvictionHard: map[string]v1alpha1.EvictionThreshold{"memory.available": "512Mi"},
			}},
			Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "s-4-8", CPU: ptr.To(resource.MustParse("4")), Memory: ptr.To(resource.MustParse("8Gi"))}}},
		},
	}
	g.Expect(env.Client.Create(t.Context(), pool)).To(gomega.Succeed())

	// Through NewFactory, as the controller builds it: the registrar runs by itself.
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	built, err := NewFactory(Config{Kube: env.Client, Clock: clk, PollInterval: 20 * time.Millisecond})(ctx,
		nodeProvider(&v1alpha1.SimulatedSettings{BootDelay: durationPtr(10 * time.Minute), Zones: []string{"z1", "z2", "z3"}}),
		provider.Options{ClusterName: "c1", Namespace: ns})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	claim := newClaim(uniqueName(t, "a"), pool.Name)
	claim.Labels = map[string]string{"team": "blue"}
	claim.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "blue", Effect: corev1.TaintEffectNoSchedule}}
	claim.Spec.StartupTaints = []corev1.Taint{{Key: "cni-not-ready", Effect: corev1.TaintEffectNoExecute}}
	claim.Spec.Requirements.NodeSelector = []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"z9", "z2"}},
	}
	made, err := built.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(made.Labels).To(gomega.Equal(map[string]string{corev1.LabelTopologyZone: "z2", corev1.LabelTopologyRegion: "simulated"}))
	g.Expect(made.Capacity).To(gomega.HaveLen(2))
	expectQuantities(g, made.Capacity, map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi"})
	g.Expect(made.CreatedAt).To(gomega.BeTemporally("==", clk.Now()))

	clk.Step(10*time.Minute - time.Second)
	g.Consistently(func(g gomega.Gomega) *corev1.Node { return getNode(g, t, claim.Name) }).
		WithTimeout(300 * time.Millisecond).WithPolling(20 * time.Millisecond).Should(gomega.BeNil())

	clk.Step(time.Second)
	var node *corev1.Node
	g.Eventually(func(g gomega.Gomega) *corev1.Node {
		node = getNode(g, t, claim.Name)
		return node
	}).WithTimeout(5 * time.Second).ShouldNot(gomega.BeNil())

	g.Expect(node.Spec.ProviderID).To(gomega.Equal(made.ProviderID))
	g.Expect(node.Labels).To(gomega.Equal(map[string]string{
		"team":                         "blue",
		v1alpha1.LabelNodePool:         pool.Name,
		v1alpha1.LabelNodeClaim:        claim.Name,
		corev1.LabelHostname:           claim.Name,
		corev1.LabelInstanceTypeStable: "s-4-8",
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		corev1.LabelTopologyZone:       "z2",
		corev1.LabelTopologyRegion:     "simulated",
		"type":                         "kwok",
	}))
	g.Expect(node.Spec.Taints).To(gomega.ConsistOf(
		gomega.HaveField("Key", "dedicated"), gomega.HaveField("Key", "cni-not-ready"), gomega.HaveField("Key", v1alpha1.TaintUnregistered)))
	g.Expect(node.Annotations).To(gomega.HaveKeyWithValue(AnnotationKwokNode, "fake"))
	g.Expect(node.Annotations).To(gomega.HaveKeyWithValue("node.alpha.kubernetes.io/ttl", "0"))
	expectQuantities(g, node.Status.Capacity, map[corev1.ResourceName]string{
		corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "20", corev1.ResourceEphemeralStorage: "100Gi",
	})
	expectQuantities(g, node.Status.Allocatable, map[corev1.ResourceName]string{
		corev1.ResourceCPU: "3900m", corev1.ResourceMemory: "7Gi", corev1.ResourcePods: "20", corev1.ResourceEphemeralStorage: "100Gi",
	})

	g.Eventually(func(g gomega.Gomega) provider.InstanceState {
		got, err := built.Get(t.Context(), made.ProviderID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		return got.State
	}).WithTimeout(5 * time.Second).Should(gomega.Equal(provider.InstanceRunning))

	t.Run("kwok makes the registered Node Ready and keeps its resources", func(t *testing.T) {
		g := gomega.NewWithT(t)
		g.Eventually(func(g gomega.Gomega) {
			node := getNode(g, t, claim.Name)
			g.Expect(node).NotTo(gomega.BeNil())
			g.Expect(node.Status.Conditions).To(gomega.ContainElement(gomega.And(
				gomega.HaveField("Type", corev1.NodeReady), gomega.HaveField("Status", corev1.ConditionTrue))))
			expectQuantities(g, node.Status.Allocatable, map[corev1.ResourceName]string{corev1.ResourceCPU: "3900m", corev1.ResourcePods: "20"})
		}).WithTimeout(10 * time.Second).Should(gomega.Succeed())
	})
}

func expectQuantities(g gomega.Gomega, got corev1.ResourceList, want map[corev1.ResourceName]string) {
	for name, value := range want {
		q, ok := got[name]
		g.Expect(ok).To(gomega.BeTrue(), "no %s in %v", name, got)
		g.Expect(q.Cmp(resource.MustParse(value))).To(gomega.BeZero(), "%s is %s, want %s", name, q.String(), value)
	}
}

func TestRegistrar(t *testing.T) {
	tests := []struct {
		name     string
		settings *v1alpha1.SimulatedSettings
		step     time.Duration
		wantNode bool
	}{
		{"a machine past its boot delay registers", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(time.Minute)}, time.Minute, true},
		{"a machine before its boot delay does not", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(time.Minute)}, time.Minute - time.Millisecond, false},
		{"the default boot delay is two seconds", nil, 2 * time.Second, true},
		{"a machine chosen never to register never does", &v1alpha1.SimulatedSettings{NeverRegisterPercent: 100}, 24 * time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			ns := newNamespace(t)
			clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			p := newTestProvider(t, ns, "c1", tt.settings, Config{Clock: clk})
			claim := newClaim(uniqueName(t, "a"), "pool")
			made, err := p.Create(t.Context(), claim, provider.CreateOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())

			clk.Step(tt.step)
			registrar := NewRegistrar(env.Client, ns, "c1", Config{Clock: clk})
			g.Expect(registrar.RegisterDue(t.Context())).To(gomega.Succeed())

			node := getNode(g, t, claim.Name)
			got, err := p.Get(t.Context(), made.ProviderID)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			if tt.wantNode {
				g.Expect(node).NotTo(gomega.BeNil())
				// The API server keeps a Node's status on create, as for a
				// kubelet's registration.
				expectQuantities(g, node.Status.Capacity, map[corev1.ResourceName]string{corev1.ResourceCPU: "4"})
				g.Expect(got.State).To(gomega.Equal(provider.InstanceRunning))
			} else {
				g.Expect(node).To(gomega.BeNil())
				g.Expect(got.State).To(gomega.Equal(provider.InstanceCreating))
			}
		})
	}
}

func TestRegistrarDoesNotRegisterANodeTwice(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, Config{})
	claim := newClaim(uniqueName(t, "a"), "pool")
	_, err := p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	registrar := NewRegistrar(env.Client, ns, "c1", Config{})
	g.Expect(registrar.RegisterDue(t.Context())).To(gomega.Succeed())

	// Someone deletes the Node: as a real machine's kubelet would not, the
	// registrar does not make it again.
	node := getNode(g, t, claim.Name)
	g.Expect(env.Client.Delete(t.Context(), node)).To(gomega.Succeed())
	g.Expect(registrar.RegisterDue(t.Context())).To(gomega.Succeed())
	g.Expect(getNode(g, t, claim.Name)).To(gomega.BeNil())
}

func TestRegistrarRemovesTheNodeOfAMachineDeletedWhileRegistering(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, Config{})
	claim := newClaim(uniqueName(t, "a"), "pool")
	_, err := p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	// The registrar listed the record just before Delete removed it (and
	// found no Node yet).
	var listed corev1.ConfigMap
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: claim.Name}, &listed)).To(gomega.Succeed())
	g.Expect(p.Delete(t.Context(), ProviderID(claim.Name))).To(gomega.Succeed())
	m, err := machineFromConfigMap(&listed)
	g.Expect(err).NotTo(gomega.HaveOccurred())

	registrar := NewRegistrar(env.Client, ns, "c1", Config{})
	g.Expect(registrar.register(t.Context(), &listed, m, time.Now())).To(gomega.Succeed())
	g.Expect(getNode(g, t, claim.Name)).To(gomega.BeNil())
}

func TestListSeesOnlyThisClustersMachines(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	// A cluster name that is no valid label value is labelled by its hash.
	ours := "Our Cluster/" + strings.Repeat("x", 70)
	p := newTestProvider(t, ns, ours, nil, Config{})
	other := newTestProvider(t, ns, "other", nil, Config{})
	var want []string
	for _, suffix := range []string{"a", "b"} {
		made, err := p.Create(t.Context(), newClaim(uniqueName(t, suffix), "pool"), provider.CreateOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		want = append(want, made.ProviderID)
	}
	foreign, err := other.Create(t.Context(), newClaim(uniqueName(t, "c"), "pool"), provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	// A record carrying our cluster label but another cluster's exact tag.
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: uniqueName(t, "d"), Namespace: ns,
		Labels:      map[string]string{LabelMachine: "true", v1alpha1.TagCluster: labelValue(ours)},
		Annotations: map[string]string{v1alpha1.TagCluster: "someone else"},
	}}
	g.Expect(env.Client.Create(t.Context(), forged)).To(gomega.Succeed())

	listed, err := p.List(t.Context())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var got []string
	for _, i := range listed {
		g.Expect(i.Tags[v1alpha1.TagCluster]).To(gomega.Equal(ours))
		got = append(got, i.ProviderID)
	}
	slices.Sort(got)
	g.Expect(got).To(gomega.Equal(want))

	_, err = p.Get(t.Context(), foreign.ProviderID)
	g.Expect(provider.IsNotFound(err)).To(gomega.BeTrue(), "error %v", err)
	_, err = p.Get(t.Context(), ProviderID(forged.Name))
	g.Expect(provider.IsNotFound(err)).To(gomega.BeTrue(), "error %v", err)
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name string
		// setup makes the world and returns the providerID to delete.
		setup func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string
		// wantErr checks Delete's error.
		wantErr func(error) bool
		// wantRecord and wantNode say whether the record and the Node named
		// after the providerID remain.
		wantRecord, wantNode bool
	}{
		{
			name: "removes the machine record and its registered Node",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				made := createRegistered(t, g, ns, p)
				return made.ProviderID
			},
		},
		{
			name: "removes a machine that has no Node yet",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				made, err := p.Create(t.Context(), newClaim(uniqueName(t, "a"), "pool"), provider.CreateOptions{})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				return made.ProviderID
			},
		},
		{
			name: "finishes removing the Node when the record is already gone",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				made := createRegistered(t, g, ns, p)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: made.Name}}
				g.Expect(env.Client.Delete(t.Context(), cm)).To(gomega.Succeed())
				return made.ProviderID
			},
		},
		{
			name: "succeeds for a machine that does not exist",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				return ProviderID(uniqueName(t, "missing"))
			},
		},
		{
			name: "refuses a machine of another cluster",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				other := newTestProvider(t, ns, "other", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, Config{})
				made := createRegistered(t, g, ns, other)
				return made.ProviderID
			},
			wantErr:    provider.IsTerminal,
			wantRecord: true,
			wantNode:   true,
		},
		{
			name: "leaves a Node of that name that no simulated machine made",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "real")},
					Spec:       corev1.NodeSpec{ProviderID: "proxmox://pve/100"},
				}
				g.Expect(env.Client.Create(t.Context(), node)).To(gomega.Succeed())
				return ProviderID(node.Name)
			},
			wantNode: true,
		},
		{
			name: "refuses a providerID of another provider",
			setup: func(t *testing.T, g gomega.Gomega, ns string, p *Provider) string {
				return "cloudscale://0a1b"
			},
			wantErr: provider.IsTerminal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			ns := newNamespace(t)
			p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, Config{})
			providerID := tt.setup(t, g, ns, p)

			err := p.Delete(t.Context(), providerID)
			if tt.wantErr != nil {
				g.Expect(tt.wantErr(err)).To(gomega.BeTrue(), "error %v", err)
			} else {
				g.Expect(err).NotTo(gomega.HaveOccurred())
			}
			name, ours := strings.CutPrefix(providerID, ProviderIDPrefix)
			if !ours {
				return
			}
			var cm corev1.ConfigMap
			recordErr := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &cm)
			g.Expect(recordErr == nil).To(gomega.Equal(tt.wantRecord), "record: %v", recordErr)
			g.Expect(getNode(g, t, name) != nil).To(gomega.Equal(tt.wantNode), "node")
			if !tt.wantRecord {
				_, err := p.Get(t.Context(), providerID)
				g.Expect(provider.IsNotFound(err)).To(gomega.BeTrue(), "Get after Delete: %v", err)
			}
		})
	}
}

// createRegistered makes a machine with p (boot delay zero) and registers
// its Node.
func createRegistered(t *testing.T, g gomega.Gomega, ns string, p *Provider) *provider.Instance {
	t.Helper()
	made, err := p.Create(t.Context(), newClaim(uniqueName(t, p.cluster), "pool"), provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(NewRegistrar(env.Client, ns, p.cluster, Config{}).RegisterDue(t.Context())).To(gomega.Succeed())
	g.Expect(getNode(g, t, made.Name)).NotTo(gomega.BeNil())
	return made
}

func TestNewStartsOneRegistrarPerNamespaceAndCluster(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	key := ns + "/c1"
	var stops []context.CancelFunc
	for range 3 {
		ctx, stop := context.WithCancel(t.Context())
		stops = append(stops, stop)
		_, err := NewFactory(Config{Kube: env.Client})(ctx, nodeProvider(nil), provider.Options{ClusterName: "c1", Namespace: ns})
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	users := func() int {
		registrars.Lock()
		defer registrars.Unlock()
		if shared, ok := registrars.byKey[key]; ok {
			return shared.users
		}
		return 0
	}
	g.Expect(users()).To(gomega.Equal(3))

	stops[0]()
	stops[1]()
	g.Eventually(users).Should(gomega.Equal(1))
	stops[2]()
	// The last context gone, so is the registrar.
	g.Eventually(users).Should(gomega.BeZero())
}

func TestNewRejectsBadOptions(t *testing.T) {
	good := provider.Options{ClusterName: "c1", Namespace: "default"}
	tests := []struct {
		name  string
		np    *v1alpha1.NodeProvider
		opts  func(provider.Options) provider.Options
		wants string
	}{
		{"no cluster name", nodeProvider(nil), func(o provider.Options) provider.Options { o.ClusterName = ""; return o }, "no cluster name"},
		{"no namespace", nodeProvider(nil), func(o provider.Options) provider.Options { o.Namespace = ""; return o }, "no namespace"},
		{"a percentage over 100", nodeProvider(&v1alpha1.SimulatedSettings{NeverRegisterPercent: 101}), func(o provider.Options) provider.Options { return o }, "neverRegisterPercent 101"},
		{"a negative boot delay", nodeProvider(&v1alpha1.SimulatedSettings{BootDelay: durationPtr(-time.Second)}), func(o provider.Options) provider.Options { return o }, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			_, err := NewWithConfig(t.Context(), tt.np, tt.opts(good), Config{ExternalRegistrar: true, Kube: env.Client})
			g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "error %v", err)
			g.Expect(err.Error()).To(gomega.ContainSubstring(tt.wants))
		})
	}
	t.Run("no client", func(t *testing.T) {
		g := gomega.NewWithT(t)
		_, err := NewWithConfig(t.Context(), nodeProvider(nil), good, Config{ExternalRegistrar: true})
		g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "error %v", err)
		g.Expect(err.Error()).To(gomega.ContainSubstring("no Kubernetes client"))
	})
}

// A registrar with no machine to wait for polls only every idleRecheck;
// Create wakes it, so a new machine still registers within its boot delay
// and a poll, not idleRecheck later.
func TestCreateWakesAnIdleRegistrar(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	built, err := NewFactory(Config{Kube: env.Client, PollInterval: 20 * time.Millisecond})(ctx,
		nodeProvider(&v1alpha1.SimulatedSettings{BootDelay: durationPtr(time.Millisecond)}),
		provider.Options{ClusterName: "c1", Namespace: ns})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	for _, name := range []string{uniqueName(t, "first"), uniqueName(t, "second")} {
		_, err := built.Create(t.Context(), newClaim(name, "pool"), provider.CreateOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		// The first machine's registration leaves the registrar with
		// nothing to wait for; the second must not wait out its idle poll.
		g.Eventually(func(g gomega.Gomega) *corev1.Node { return getNode(g, t, name) }).
			WithTimeout(idleRecheck / 2).WithPolling(10 * time.Millisecond).ShouldNot(gomega.BeNil())
	}
}
