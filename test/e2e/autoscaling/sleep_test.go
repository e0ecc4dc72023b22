package autoscaling

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The sleeping-machine tests (issue 37): a pool whose empty nodes sleep
// instead of being deleted, on the simulated provider, whose stopped
// machine has no Node and whose start registers one again after its
// startDelay, shorter than its bootDelay. Its helpers are its own (sleep-prefixed).

// sleepPool lets every machine of the scenario's pool sleep for
// deleteAfter when it empties.
func sleepPool(s *harness.Scenario, deleteAfter time.Duration) *v1alpha1.NodePool {
	return s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.Sleep = &v1alpha1.Sleep{Machines: "100%", DeleteAfter: &metav1.Duration{Duration: deleteAfter}}
	})
}

// sleepProvider is the scenario's simulated NodeProvider with a boot (a
// new machine) much slower than a start (a sleeping one).
func sleepProvider(s *harness.Scenario) {
	s.CreateProvider(v1alpha1.SimulatedSettings{
		BootDelay:  &metav1.Duration{Duration: 8 * time.Second},
		StartDelay: &metav1.Duration{Duration: time.Second},
	})
}

func sleepCondition(claim *v1alpha1.NodeClaim) *metav1.Condition {
	return meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionSuspended)
}

// sleepNames are the names of claims.
func sleepNames(claims []v1alpha1.NodeClaim) []string {
	names := make([]string, 0, len(claims))
	for _, claim := range claims {
		names = append(names, claim.Name)
	}
	return names
}

// sleepAllAsleep checks that every claim of the pool sleeps and no Node
// of the pool is left.
func sleepAllAsleep(s *harness.Scenario, g Gomega, want int) {
	claims := s.Claims()
	g.Expect(claims).To(HaveLen(want))
	for i := range claims {
		g.Expect(claims[i].Asleep()).To(BeTrue(), "claim %s sleeps", claims[i].Name)
	}
	g.Expect(s.Nodes()).To(BeEmpty(), "a sleeping machine has no Node")
}

// sleepOneMachinePerClaim checks that each claim of the pool has exactly
// one simulated machine and no machine is without a claim.
func sleepOneMachinePerClaim(s *harness.Scenario, g Gomega) {
	perClaim := map[string]int{}
	for _, machine := range s.Machines() {
		perClaim[machine.Labels[v1alpha1.TagNodeClaim]]++
	}
	claims := s.Claims()
	g.Expect(perClaim).To(HaveLen(len(claims)), "as many machines as claims")
	for _, claim := range claims {
		g.Expect(perClaim[claim.Name]).To(Equal(1), "claim %s has one machine", claim.Name)
	}
}

// sleepRunningAfter measures how long until replicas pods of app run.
func sleepRunningAfter(s *harness.Scenario, started time.Time, app string, replicas int) time.Duration {
	s.G.Eventually(func() int { return s.RunningPods(app) }).WithPolling(100 * time.Millisecond).Should(Equal(replicas))
	return time.Since(started)
}

// Scale-up, sleep on scale-down, wake before create, and drift: the
// issue's "done when", measured in one test on one machine.
func TestSleepingMachinesAreWokenBeforeNewOnesAndADriftedOneIsDeleted(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "sleep-wake")
	defer s.Cleanup()
	sleepProvider(s)
	sleepPool(s, 24*time.Hour)

	started := time.Now()
	web := s.CreateDeployment("web", 20, "1", nil)
	cold := sleepRunningAfter(s, started, "web", 20)
	launched := s.Claims()
	n := len(launched)
	t.Logf("20 pods Running %s after the Deployment was created, on %d new machines", cold.Round(100*time.Millisecond), n)

	s.Scale(web, 0)
	s.G.Eventually(func(g Gomega) { sleepAllAsleep(s, g, n) }).Should(Succeed(), "scaled to zero, the %d machines sleep", n)
	s.G.Eventually(func(g Gomega) { sleepOneMachinePerClaim(s, g) }).Should(Succeed())

	started = time.Now()
	s.Scale(web, 20)
	warm := sleepRunningAfter(s, started, "web", 20)
	t.Logf("20 pods Running %s after the scale-up, on %d woken machines (new machines took %s)", warm.Round(100*time.Millisecond), n, cold.Round(100*time.Millisecond))
	s.G.Expect(sleepNames(s.Claims())).To(ConsistOf(sleepNames(launched)), "the sleeping machines were woken; none was made")
	for _, claim := range s.Claims() {
		s.G.Expect(sleepCondition(&claim)).To(HaveField("Reason", v1alpha1.ReasonAwake), "claim %s woke", claim.Name)
	}
	s.G.Expect(warm).To(BeNumerically("<", cold), "pods run sooner on woken machines than on new ones")
	sleepOneMachinePerClaim(s, s.G)

	// Asleep again, then drifted: deleted, never woken.
	s.Scale(web, 0)
	s.G.Eventually(func(g Gomega) { sleepAllAsleep(s, g, n) }).Should(Succeed())
	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Template.Labels["generation"] = "2"
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
	s.G.Eventually(func() []v1alpha1.NodeClaim { return s.Claims() }).Should(BeEmpty(), "drifted sleeping machines are deleted")
	s.G.Expect(s.Machines()).To(BeEmpty())
	for _, name := range sleepNames(launched) {
		// Woken once, by the scale-up above; never again.
		s.G.Expect(countEvents(harness.EventsOf(s.G, "NodeClaim", name), "Waking:")).To(Equal(1), "claim %s was not woken to be deleted", name)
	}
}

func countEvents(lines []string, prefix string) int {
	n := 0
	for _, line := range lines {
		if len(line) >= len(prefix) && line[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// A machine sleeps no longer than its pool's sleep.deleteAfter.
func TestTheSleepLimitDeletesSleepingMachines(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "sleep-limit")
	defer s.Cleanup()
	sleepProvider(s)
	sleepPool(s, time.Minute) // the API's least
	web := s.CreateDeployment("web", 4, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(4))
	n := len(s.Claims())

	s.Scale(web, 0)
	s.G.Eventually(func(g Gomega) { sleepAllAsleep(s, g, n) }).Should(Succeed())
	asleep := time.Now()
	s.G.Eventually(func() []v1alpha1.NodeClaim { return s.Claims() }).WithTimeout(3*time.Minute).Should(BeEmpty(), "deleted at the sleep limit")
	s.G.Expect(time.Since(asleep)).To(BeNumerically(">=", 50*time.Second), "not before the limit")
	s.G.Eventually(s.Machines).Should(BeEmpty(), "their machines with them")
}

// crashingPower wraps the simulated provider of a controller that is
// killed right after a power call: once the call named by crashAfter
// succeeded, the provider tells the test and answers nothing until the
// controller stops, so the lifecycle never takes its next step (deleting
// the Node, or seeing the Node register).
type crashingPower struct {
	provider.Provider
	crashAfter string // suspend or resume
	reached    chan<- string
	once       *sync.Once
}

func (c crashingPower) CanManagePower(ctx context.Context) bool {
	return provider.CanManagePower(ctx, c.Provider)
}

func (c crashingPower) Suspend(ctx context.Context, providerID string) error {
	return c.power(ctx, "suspend", providerID, c.Provider.(provider.PowerManager).Suspend)
}

func (c crashingPower) Resume(ctx context.Context, providerID string) error {
	return c.power(ctx, "resume", providerID, c.Provider.(provider.PowerManager).Resume)
}

func (c crashingPower) power(ctx context.Context, operation, providerID string, call func(context.Context, string) error) error {
	if err := call(ctx, providerID); err != nil || operation != c.crashAfter {
		return err
	}
	c.once.Do(func() { c.reached <- providerID })
	<-ctx.Done() // killed
	return ctx.Err()
}

// crashingRegistry is the default registry whose simulated providers
// crash after the first successful call of operation.
func crashingRegistry(operation string, reached chan<- string) *provider.Registry {
	registry := operator.DefaultRegistry(env.Client)
	inner := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})
	once := &sync.Once{}
	registry.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		p, err := inner(ctx, np, opts)
		if err != nil {
			return nil, err
		}
		return crashingPower{Provider: p, crashAfter: operation, reached: reached, once: once}, nil
	})
	return registry
}

// A controller killed between stopping a machine and deleting its Node,
// and one killed between starting it and its Node registering, leave one
// machine per claim: the next controller finishes the sleep, and the wake.
func TestAControllerKilledMidSleepOrMidWakeLeavesOneMachinePerClaim(t *testing.T) {
	s := harness.NewScenario(t, "sleep-crash")
	defer s.Cleanup()
	sleepProvider(s)
	sleepPool(s, 24*time.Hour)
	stop := harness.StartOperator(t, harness.OperatorOptions{})
	web := s.CreateDeployment("web", 2, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(2))
	claims := sleepNames(s.Claims())
	stop()

	// Killed after Suspend, before the Node is deleted.
	reached := make(chan string, 1)
	stop = harness.StartOperator(t, harness.OperatorOptions{Registry: crashingRegistry("suspend", reached)})
	s.Scale(web, 0)
	var stopped string
	s.G.Eventually(reached).Should(Receive(&stopped))
	stop()
	t.Logf("killed the controller after machine %s was stopped", stopped)
	sleepOneMachinePerClaim(s, s.G)

	stop = harness.StartOperator(t, harness.OperatorOptions{})
	s.G.Eventually(func(g Gomega) { sleepAllAsleep(s, g, len(claims)) }).Should(Succeed(), "the next controller finishes the sleep")
	sleepOneMachinePerClaim(s, s.G)
	stop()

	// Killed after Resume, before the Node registers.
	reached = make(chan string, 1)
	stop = harness.StartOperator(t, harness.OperatorOptions{Registry: crashingRegistry("resume", reached)})
	s.Scale(web, 2)
	var started string
	s.G.Eventually(reached).Should(Receive(&started))
	stop()
	t.Logf("killed the controller after machine %s was started", started)
	sleepOneMachinePerClaim(s, s.G)

	harness.StartOperator(t, harness.OperatorOptions{})
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(2))
	s.G.Expect(sleepNames(s.Claims())).To(ConsistOf(claims), "woken, not made anew")
	s.G.Eventually(func(g Gomega) { sleepOneMachinePerClaim(s, g) }).Should(Succeed())
}
