package autoscaling

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// 30 pods of 1 cpu on 4-cpu shapes need 8 nodes at the least.
func TestScaleUpThenDownToZero(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "scale")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	started := time.Now()
	deployment := s.CreateDeployment("web", 30, "1", nil)

	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(30), "all pods Running")
	t.Logf("30 pods Running %s after the Deployment was created", time.Since(started).Round(time.Second))
	const lowerBound = 8
	s.G.Expect(len(s.Nodes())).To(BeNumerically("<=", lowerBound+1), "nodes opened")
	s.G.Eventually(s.ReadyClaims).Should(Equal(len(s.Claims())), "every claim Ready")
	for _, claim := range s.Claims() {
		s.G.Expect(claim.Status.ProviderID).To(HavePrefix("simulated://"))
		s.G.Expect(claim.Annotations).To(HaveKey(v1alpha1.AnnotationTemplateHash))
	}
	s.G.Eventually(func() int32 {
		var pool v1alpha1.NodePool
		_ = env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool)
		return pool.Status.Nodes
	}).Should(BeEquivalentTo(len(s.Claims())), "pool status counts the nodes")

	s.Scale(deployment, 0)
	scaledDown := time.Now()
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero(),
		"every claim, node and machine removed after consolidateAfter")
	t.Logf("scaled to zero in %s", time.Since(scaledDown).Round(time.Second))
}

// A PodDisruptionBudget that allows nothing holds the drain; once it
// allows, the node goes.
func TestDrainWaitsForPodDisruptionBudget(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "pdb")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter = &metav1.Duration{Duration: time.Hour}
	})
	s.CreateDeployment("guarded", 2, "500m", nil)
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: s.Namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: harness.Ptr(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	s.G.Expect(env.Client.Create(s.Ctx, budget)).To(Succeed())
	s.G.Eventually(func() int { return s.RunningPods("guarded") }).Should(Equal(2))
	s.G.Expect(s.Claims()).To(HaveLen(1))
	victim := s.Claims()[0]

	s.G.Expect(env.Client.Delete(s.Ctx, &victim)).To(Succeed())
	s.G.Eventually(func() string {
		var claim v1alpha1.NodeClaim
		if err := env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&victim), &claim); err != nil {
			return err.Error()
		}
		for _, condition := range claim.Status.Conditions {
			if condition.Type == v1alpha1.ConditionTerminating {
				return condition.Message
			}
		}
		return ""
	}).Should(ContainSubstring("waiting for a PodDisruptionBudget"))
	s.G.Consistently(func() int { return s.RunningPods("guarded") }, 3*time.Second, 250*time.Millisecond).
		Should(Equal(2), "no pod evicted while the budget allows none")
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&victim), &victim)).To(Succeed(), "claim kept while draining")

	s.G.Eventually(func() error {
		if err := env.Client.Get(s.Ctx, client.ObjectKeyFromObject(budget), budget); err != nil {
			return err
		}
		budget.Spec.MaxUnavailable = harness.Ptr(intstr.FromInt32(1))
		return env.Client.Update(s.Ctx, budget)
	}).Should(Succeed())
	s.G.Eventually(func() error {
		return env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&victim), &victim)
	}).Should(MatchError(ContainSubstring("not found")), "claim removed once the budget allows")
	s.G.Eventually(func() int { return s.RunningPods("guarded") }).Should(Equal(2), "pods rescheduled onto a new node")
}

// A machine that never registers is deleted with its claim once the pool's
// registration timeout passes, and the claim's events say why.
func TestMachineThatNeverRegistersIsRemoved(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "unregistered")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{NeverRegisterPercent: 100})
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
		return harness.MachinesOf(s.G, client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodeClaim: first.Name})
	}).Should(BeEmpty(), "the machine went with its claim")
	s.Scale(deployment, 0)
}

// The controller stops right after provider.Create returned and before the
// claim's status was written; the next controller finds the machine
// instead of making a second one.
func TestRestartAfterCreateMakesNoSecondMachine(t *testing.T) {
	s := harness.NewScenario(t, "restart")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)

	crashed := make(chan struct{})
	var stopFirst func()
	var once sync.Once
	crashing := provider.NewRegistry()
	realFactory := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})
	crashing.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		machines, err := realFactory(ctx, np, opts)
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
	s.G.Expect(s.Machines()).To(HaveLen(1), "the machine was made before the crash")

	harness.StartOperator(t, harness.OperatorOptions{Registry: operator.DefaultRegistry(env.Client)})
	s.G.Eventually(func() int { return s.RunningPods("once") }).Should(Equal(1))
	s.G.Eventually(s.ReadyClaims).Should(Equal(1))
	s.G.Expect(s.Claims()).To(HaveLen(1))
	s.G.Expect(s.Machines()).To(HaveLen(1), "exactly one machine for the claim")
	s.G.Expect(s.Machines()[0].Labels[v1alpha1.TagNodeClaim]).To(Equal(claim.Name))
	s.Scale(deployment, 0)
}

// With 30% of creates failing, every pod still runs in the end and no
// machine is left without a claim.
func TestFlakyCreatesStillConverge(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{GCGracePeriod: 5 * time.Second})
	s := harness.NewScenario(t, "flaky")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{CreateFailurePercent: 30})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "c2", CPU: harness.Qty("2"), Memory: harness.Qty("8Gi")}}
	})
	deployment := s.CreateDeployment("flaky", 10, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("flaky") }).Should(Equal(10))
	claimNames := map[string]bool{}
	for _, claim := range s.Claims() {
		claimNames[claim.Name] = true
	}
	for _, machine := range s.Machines() {
		s.G.Expect(claimNames).To(HaveKey(machine.Labels[v1alpha1.TagNodeClaim]), "machine %s has a claim", machine.Name)
	}
	s.Scale(deployment, 0)
}

// Garbage collection deletes a machine tagged for this cluster that no
// claim owns, and never one tagged for another cluster.
func TestGarbageCollectionTouchesOnlyOurMachines(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{GCGracePeriod: time.Second})
	s := harness.NewScenario(t, "gc")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{NeverRegisterPercent: 100})
	var nodeProvider v1alpha1.NodeProvider
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &nodeProvider)).To(Succeed())
	machineFor := func(cluster, claimName string) {
		factory := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})
		machines, err := factory(s.Ctx, &nodeProvider, provider.Options{ClusterName: cluster, Namespace: harness.ControllerNamespace})
		s.G.Expect(err).NotTo(HaveOccurred())
		orphanClaim := &v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claimName},
			Spec: v1alpha1.NodeClaimSpec{
				NodePoolRef: v1alpha1.NodePoolReference{Name: s.Name},
				Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: *harness.Qty("4"), Memory: *harness.Qty("16Gi")},
			},
		}
		_, err = machines.Create(s.Ctx, orphanClaim, provider.CreateOptions{})
		s.G.Expect(err).NotTo(HaveOccurred())
	}
	machineFor(harness.ClusterName, "gc-orphan")
	machineFor("another-cluster", "gc-foreign")
	orphan := client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodeClaim: "gc-orphan"}
	foreign := client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodeClaim: "gc-foreign"}
	s.G.Expect(harness.MachinesOf(s.G, foreign)).To(HaveLen(1))

	s.G.Eventually(func() []corev1.ConfigMap { return harness.MachinesOf(s.G, orphan) }).Should(BeEmpty(), "our orphaned machine is collected")
	s.G.Consistently(func() []corev1.ConfigMap { return harness.MachinesOf(s.G, foreign) }, 3*time.Second, 250*time.Millisecond).
		Should(HaveLen(1), "another cluster's machine is never touched")
	for _, machine := range harness.MachinesOf(s.G, foreign) {
		s.G.Expect(env.Client.Delete(context.Background(), &machine)).To(Succeed())
	}
}
