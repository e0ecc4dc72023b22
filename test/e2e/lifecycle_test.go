package e2e

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
)

// 30 pods of 1 cpu on 4-cpu shapes need 8 nodes at the least.
func TestScaleUpThenDownToZero(t *testing.T) {
	startOperator(t, operatorOptions{})
	s := newScenario(t, "scale")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(nil)
	started := time.Now()
	deployment := s.createDeployment("web", 30, "1", nil)

	s.g.Eventually(func() int { return s.runningPods("web") }).Should(Equal(30), "all pods Running")
	t.Logf("30 pods Running %s after the Deployment was created", time.Since(started).Round(time.Second))
	const lowerBound = 8
	s.g.Expect(len(s.nodes())).To(BeNumerically("<=", lowerBound+1), "nodes opened")
	s.g.Eventually(s.readyClaims).Should(Equal(len(s.claims())), "every claim Ready")
	for _, claim := range s.claims() {
		s.g.Expect(claim.Status.ProviderID).To(HavePrefix("simulated://"))
		s.g.Expect(claim.Annotations).To(HaveKey(v1alpha1.AnnotationTemplateHash))
	}
	s.g.Eventually(func() int32 {
		var pool v1alpha1.NodePool
		_ = env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool)
		return pool.Status.Nodes
	}).Should(BeEquivalentTo(len(s.claims())), "pool status counts the nodes")

	s.scale(deployment, 0)
	scaledDown := time.Now()
	s.g.Eventually(func() int { return len(s.claims()) + len(s.nodes()) + len(s.machines()) }).Should(BeZero(),
		"every claim, node and machine removed after consolidateAfter")
	t.Logf("scaled to zero in %s", time.Since(scaledDown).Round(time.Second))
}

// A PodDisruptionBudget that allows nothing holds the drain; once it
// allows, the node goes.
func TestDrainWaitsForPodDisruptionBudget(t *testing.T) {
	startOperator(t, operatorOptions{})
	s := newScenario(t, "pdb")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter = &metav1.Duration{Duration: time.Hour}
	})
	s.createDeployment("guarded", 2, "500m", nil)
	budget := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: s.namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, budget)).To(Succeed())
	s.g.Eventually(func() int { return s.runningPods("guarded") }).Should(Equal(2))
	s.g.Expect(s.claims()).To(HaveLen(1))
	victim := s.claims()[0]

	s.g.Expect(env.Client.Delete(s.ctx, &victim)).To(Succeed())
	s.g.Eventually(func() string {
		var claim v1alpha1.NodeClaim
		if err := env.Client.Get(s.ctx, client.ObjectKeyFromObject(&victim), &claim); err != nil {
			return err.Error()
		}
		for _, condition := range claim.Status.Conditions {
			if condition.Type == v1alpha1.ConditionTerminating {
				return condition.Message
			}
		}
		return ""
	}).Should(ContainSubstring("waiting for a PodDisruptionBudget"))
	s.g.Consistently(func() int { return s.runningPods("guarded") }, 3*time.Second, 250*time.Millisecond).
		Should(Equal(2), "no pod evicted while the budget allows none")
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(&victim), &victim)).To(Succeed(), "claim kept while draining")

	s.g.Eventually(func() error {
		if err := env.Client.Get(s.ctx, client.ObjectKeyFromObject(budget), budget); err != nil {
			return err
		}
		budget.Spec.MaxUnavailable = ptr(intstr.FromInt32(1))
		return env.Client.Update(s.ctx, budget)
	}).Should(Succeed())
	s.g.Eventually(func() error {
		return env.Client.Get(s.ctx, client.ObjectKeyFromObject(&victim), &victim)
	}).Should(MatchError(ContainSubstring("not found")), "claim removed once the budget allows")
	s.g.Eventually(func() int { return s.runningPods("guarded") }).Should(Equal(2), "pods rescheduled onto a new node")
}

// A machine that never registers is deleted with its claim once the pool's
// registration timeout passes, and the claim's events say why.
func TestMachineThatNeverRegistersIsRemoved(t *testing.T) {
	startOperator(t, operatorOptions{})
	s := newScenario(t, "unregistered")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{NeverRegisterPercent: 100})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 5 * time.Second}
	})
	deployment := s.createDeployment("stuck", 1, "1", nil)

	s.g.Eventually(s.claims).ShouldNot(BeEmpty())
	first := s.claims()[0]
	s.g.Eventually(func() error {
		return env.Client.Get(s.ctx, client.ObjectKeyFromObject(&first), &first)
	}).Should(MatchError(ContainSubstring("not found")), "claim deleted after the registration timeout")
	s.g.Eventually(func() []string { return eventsOf(s.g, "NodeClaim", first.Name) }).
		Should(ContainElement(ContainSubstring("RegistrationTimeout")))
	s.g.Eventually(func() []corev1.ConfigMap {
		return machinesOf(s.g, client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodeClaim: first.Name})
	}).Should(BeEmpty(), "the machine went with its claim")
	s.scale(deployment, 0)
}

// The controller stops right after provider.Create returned and before the
// claim's status was written; the next controller finds the machine
// instead of making a second one.
func TestRestartAfterCreateMakesNoSecondMachine(t *testing.T) {
	s := newScenario(t, "restart")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(nil)

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
		return &crashAfterCreate{Provider: machines, crash: func() {
			once.Do(func() { close(crashed); go stopFirst() })
		}}, nil
	})
	stopFirst = startOperator(t, operatorOptions{registry: crashing})
	deployment := s.createDeployment("once", 1, "1", nil)
	s.g.Eventually(crashed).Should(BeClosed())
	stopFirst()

	s.g.Expect(s.claims()).To(HaveLen(1))
	claim := s.claims()[0]
	s.g.Expect(claim.Status.ProviderID).To(BeEmpty(), "the status write was lost with the crash")
	s.g.Expect(s.machines()).To(HaveLen(1), "the machine was made before the crash")

	startOperator(t, operatorOptions{registry: operator.DefaultRegistry(env.Client)})
	s.g.Eventually(func() int { return s.runningPods("once") }).Should(Equal(1))
	s.g.Eventually(s.readyClaims).Should(Equal(1))
	s.g.Expect(s.claims()).To(HaveLen(1))
	s.g.Expect(s.machines()).To(HaveLen(1), "exactly one machine for the claim")
	s.g.Expect(s.machines()[0].Labels[v1alpha1.TagNodeClaim]).To(Equal(claim.Name))
	s.scale(deployment, 0)
}

// crashAfterCreate lets Create make the machine, then stops the controller
// before it can record it.
type crashAfterCreate struct {
	provider.Provider
	crash func()
}

func (c *crashAfterCreate) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	if _, err := c.Provider.Create(ctx, claim, opts); err != nil {
		return nil, err
	}
	c.crash()
	<-ctx.Done()
	return nil, ctx.Err()
}

// With 30% of creates failing, every pod still runs in the end and no
// machine is left without a claim.
func TestFlakyCreatesStillConverge(t *testing.T) {
	startOperator(t, operatorOptions{gcGracePeriod: 5 * time.Second})
	s := newScenario(t, "flaky")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{CreateFailurePercent: 30})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "c2", CPU: qty("2"), Memory: qty("8Gi")}}
	})
	deployment := s.createDeployment("flaky", 10, "1", nil)
	s.g.Eventually(func() int { return s.runningPods("flaky") }).Should(Equal(10))
	claimNames := map[string]bool{}
	for _, claim := range s.claims() {
		claimNames[claim.Name] = true
	}
	for _, machine := range s.machines() {
		s.g.Expect(claimNames).To(HaveKey(machine.Labels[v1alpha1.TagNodeClaim]), "machine %s has a claim", machine.Name)
	}
	s.scale(deployment, 0)
}

// Garbage collection deletes a machine tagged for this cluster that no
// claim owns, and never one tagged for another cluster.
func TestGarbageCollectionTouchesOnlyOurMachines(t *testing.T) {
	startOperator(t, operatorOptions{gcGracePeriod: time.Second})
	s := newScenario(t, "gc")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{NeverRegisterPercent: 100})
	var nodeProvider v1alpha1.NodeProvider
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &nodeProvider)).To(Succeed())
	machineFor := func(cluster, claimName string) {
		factory := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})
		machines, err := factory(s.ctx, &nodeProvider, provider.Options{ClusterName: cluster, Namespace: controllerNamespace})
		s.g.Expect(err).NotTo(HaveOccurred())
		orphanClaim := &v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claimName},
			Spec: v1alpha1.NodeClaimSpec{
				NodePoolRef: v1alpha1.NodePoolReference{Name: s.name},
				Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: *qty("4"), Memory: *qty("16Gi")},
			},
		}
		_, err = machines.Create(s.ctx, orphanClaim, provider.CreateOptions{})
		s.g.Expect(err).NotTo(HaveOccurred())
	}
	machineFor(clusterName, "gc-orphan")
	machineFor("another-cluster", "gc-foreign")
	orphan := client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodeClaim: "gc-orphan"}
	foreign := client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodeClaim: "gc-foreign"}
	s.g.Expect(machinesOf(s.g, foreign)).To(HaveLen(1))

	s.g.Eventually(func() []corev1.ConfigMap { return machinesOf(s.g, orphan) }).Should(BeEmpty(), "our orphaned machine is collected")
	s.g.Consistently(func() []corev1.ConfigMap { return machinesOf(s.g, foreign) }, 3*time.Second, 250*time.Millisecond).
		Should(HaveLen(1), "another cluster's machine is never touched")
	for _, machine := range machinesOf(s.g, foreign) {
		s.g.Expect(env.Client.Delete(context.Background(), &machine)).To(Succeed())
	}
}
