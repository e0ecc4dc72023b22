package nodeclaim

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// powered is pkg/provider/fake, which manages power as the contract says,
// with what these tests read of it.
type powered struct{ *fake.Provider }

// powerCalls lists the Suspend and Resume calls, as "suspend ID".
func (p powered) powerCalls() []string {
	var calls []string
	for _, call := range p.Calls(fake.Suspend, fake.Resume) {
		calls = append(calls, strings.ToLower(string(call.Method))+" "+call.ProviderID)
	}
	return calls
}

// state is where the machine stands; "" once it is gone.
func (p powered) state(providerID string) provider.InstanceState {
	for _, machine := range p.Machines() {
		if machine.ProviderID == providerID {
			return machine.State
		}
	}
	return ""
}

// newSleepScenario is a pool whose machines may sleep for an hour, on a
// provider that can stop and start them.
func newSleepScenario(t *testing.T, name string) (*scenario, powered) {
	s := newScenario(t, name, func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.Sleep = &v1alpha1.Sleep{Machines: "5", DeleteAfter: &metav1.Duration{Duration: time.Hour}}
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	machines := powered{fake.New("test")}
	s.resolver.wrapped = machines.Provider
	return s, machines
}

func fakeID(claim string) string { return fake.ProviderIDPrefix + "test/" + claim }

// ready brings a claim of the power fake to an initialized node.
func (s *scenario) ready(name string) {
	s.t.Helper()
	s.newClaim(name)
	s.mustReconcile(name)
	s.node(name, fakeID(name), corev1.ConditionTrue)
	s.mustReconcile(name)
	s.g.Expect(condition(s.claim(name), v1alpha1.ConditionInitialized)).To(HaveField("Status", metav1.ConditionTrue))
}

// cachedPod waits until the cache the drain reads has the pod.
func (s *scenario) cachedPod(pod *corev1.Pod) {
	s.t.Helper()
	s.g.Eventually(func() error { return cached.Get(s.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}) }).Should(Succeed())
}

// askToSleep sets the suspend annotation, as disruption does.
func (s *scenario) askToSleep(name string) {
	s.t.Helper()
	claim := s.claim(name)
	patch := client.MergeFrom(claim.DeepCopy())
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[v1alpha1.AnnotationSuspend] = string(v1alpha1.DisruptionReasonEmpty)
	s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())
}

// askToWake removes the suspend annotation, as provisioning does.
func (s *scenario) askToWake(name string) {
	s.t.Helper()
	claim := s.claim(name)
	patch := client.MergeFrom(claim.DeepCopy())
	delete(claim.Annotations, v1alpha1.AnnotationSuspend)
	s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())
}

// asleep brings a claim to sleep.
func (s *scenario) asleep(name string) {
	s.t.Helper()
	s.ready(name)
	s.askToSleep(name)
	s.mustReconcile(name)
	s.g.Expect(s.claim(name).Asleep()).To(BeTrue(), "the claim sleeps")
}

func suspends(pool, result string) float64 {
	return testutil.ToFloat64(metrics.NodeClaimSuspends.WithLabelValues(pool, result))
}

func wakes(pool, result string) float64 {
	return testutil.ToFloat64(metrics.NodeClaimWakes.WithLabelValues(pool, result))
}

func TestAClaimAskedToSleepIsDrainedThenItsMachineStoppedThenItsNodeDeleted(t *testing.T) {
	s, machines := newSleepScenario(t, "suspend")
	s.ready("suspend-a")
	pod := s.pod("suspend-app", "suspend-a")
	s.cachedPod(pod)
	before := suspends("suspend", metrics.SleepResultSuccess)
	s.askToSleep("suspend-a")

	s.mustReconcile("suspend-a")
	s.g.Expect(s.getNode("suspend-a").Spec.Taints).To(ContainElement(HaveField("Key", v1alpha1.TaintDisrupted)), "cordoned as for termination")
	s.g.Expect(s.getPod(pod).DeletionTimestamp).NotTo(BeNil(), "evicted as for termination")
	s.g.Expect(condition(s.claim("suspend-a"), v1alpha1.ConditionSuspended)).To(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonSuspending), HaveField("Message", ContainSubstring("1 pods left"))))
	s.g.Expect(machines.powerCalls()).To(BeEmpty(), "the machine runs while its pods drain")

	// The kubelet stops the pod.
	s.g.Expect(env.Client.Delete(s.ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	s.g.Eventually(func() error { return cached.Get(s.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}) }).ShouldNot(Succeed())
	s.mustReconcile("suspend-a")

	claim := s.claim("suspend-a")
	s.g.Expect(machines.powerCalls()).To(Equal([]string{"suspend " + fakeID("suspend-a")}))
	s.g.Expect(machines.state(fakeID("suspend-a"))).To(Equal(provider.InstanceSuspended))
	s.g.Expect(s.getNode("suspend-a")).To(BeNil(), "a sleeping machine has no Node")
	s.g.Expect(claim.Status.ProviderID).To(Equal(fakeID("suspend-a")), "the claim keeps its machine")
	s.g.Expect(claim.Status.NodeName).To(BeEmpty())
	s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonSuspended)))
	s.g.Expect(condition(claim, v1alpha1.ConditionReady)).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonSuspended)))
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(HaveField("Reason", v1alpha1.ReasonSuspended))
	s.g.Expect(condition(claim, v1alpha1.ConditionLaunched)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring("Suspended")))
	s.g.Expect(suspends("suspend", metrics.SleepResultSuccess)).To(Equal(before + 1))
	s.g.Expect(machines.Calls(fake.Create)).To(HaveLen(1))
}

func TestAClaimAskedToSleepOnAProviderThatCannotStopMachinesIsDeletedInstead(t *testing.T) {
	for _, tc := range []struct {
		name string
		// powerless makes the scenario's provider one that cannot stop
		// machines and returns how to read its deletes.
		powerless func(s *scenario) (deleted func() []string)
	}{
		{"a provider without the power calls", func(s *scenario) func() []string {
			return func() []string { return s.provider.recorded() }
		}},
		{"a provider that says at run time it has none (a plugin without the RPCs)", func(s *scenario) func() []string {
			machines := fake.New("test")
			machines.DisablePower()
			s.resolver.wrapped = machines
			return func() []string {
				var deletes []string
				for _, call := range machines.Calls(fake.Delete) {
					deletes = append(deletes, "delete "+call.ProviderID)
				}
				return deletes
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "nopower" + strconv.Itoa(len(tc.name))
			s := newScenario(t, name)
			deleted := tc.powerless(s)
			s.newClaim(name + "-a")
			s.mustReconcile(name + "-a")
			providerID := s.claim(name + "-a").Status.ProviderID
			s.node(name+"-a", providerID, corev1.ConditionTrue)
			s.mustReconcile(name + "-a")
			s.askToSleep(name + "-a")

			s.mustReconcile(name + "-a")
			claim := s.claim(name + "-a")
			s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonSuspendNotSupported)))
			s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil(), "deleted as without sleep")
			s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring(v1alpha1.ReasonSuspendNotSupported)))

			s.g.Eventually(func() *v1alpha1.NodeClaim { _, _ = s.reconcile(name + "-a"); return s.claim(name + "-a") }).Should(BeNil())
			s.g.Expect(deleted()).To(ContainElement("delete " + providerID))
			s.g.Expect(s.getNode(name + "-a")).To(BeNil())
		})
	}
}

func TestASuspendErrorIsAConditionAndAnEventAndIsRetriedWithBackoff(t *testing.T) {
	s, machines := newSleepScenario(t, "suspendfail")
	s.ready("suspendfail-a")
	machines.FailNext(fake.Suspend, errors.New("hypervisor busy"), errors.New("hypervisor busy"))
	s.askToSleep("suspendfail-a")

	first := s.mustReconcile("suspendfail-a")
	claim := s.claim("suspendfail-a")
	s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonSuspendFailed), HaveField("Message", ContainSubstring("hypervisor busy"))))
	s.g.Expect(s.recorded()).To(ContainElement(And(ContainSubstring(v1alpha1.ReasonSuspendFailed), ContainSubstring("hypervisor busy"))))
	s.g.Expect(first.RequeueAfter).To(BeNumerically(">", 0))
	s.g.Expect(s.getNode("suspendfail-a")).NotTo(BeNil(), "the Node stays until its machine is stopped")
	second := s.mustReconcile("suspendfail-a")
	s.g.Expect(second.RequeueAfter).To(BeNumerically(">", first.RequeueAfter), "backs off")

	s.mustReconcile("suspendfail-a")
	s.g.Expect(s.claim("suspendfail-a").Asleep()).To(BeTrue())
	s.g.Expect(s.getNode("suspendfail-a")).To(BeNil())
}

func TestAnAsleepClaimOutlivesTheRegistrationTimeoutAndIsDeletedAtTheSleepLimit(t *testing.T) {
	s, machines := newSleepScenario(t, "sleeplimit")
	s.asleep("sleeplimit-a")
	since := s.claim("sleeplimit-a").AsleepSince()
	s.clock.SetTime(since.Add(20 * time.Minute))
	before := testutil.ToFloat64(metrics.NodeClaimsTerminated.WithLabelValues("sleeplimit", metrics.ReasonSleepLimit))

	result := s.mustReconcile("sleeplimit-a")
	s.g.Expect(s.claim("sleeplimit-a").DeletionTimestamp).To(BeNil(), "a sleeping machine's missing Node is no lost machine")
	s.g.Expect(result.RequeueAfter).To(Equal(40*time.Minute), "looks again at the sleep limit")

	// Disruption's mark from when it put the machine to sleep may still
	// be there: the sleep limit is still why the claim goes.
	marked := s.claim("sleeplimit-a")
	marked.SetCondition(v1alpha1.ConditionDisrupting, metav1.ConditionTrue, string(v1alpha1.DisruptionReasonEmpty), "empty", s.clock.Now())
	s.g.Expect(env.Client.Status().Update(s.ctx, marked)).To(Succeed())
	s.clock.SetTime(since.Add(time.Hour))
	s.mustReconcile("sleeplimit-a")
	claim := s.claim("sleeplimit-a")
	s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil())
	s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(HaveField("Message", ContainSubstring("sleep.deleteAfter is 1h0m0s")))
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring(metrics.ReasonSleepLimit)))

	// Termination has no node to drain: it deletes the machine.
	s.g.Eventually(func() *v1alpha1.NodeClaim { _, _ = s.reconcile("sleeplimit-a"); return s.claim("sleeplimit-a") }).Should(BeNil())
	s.g.Expect(machines.state(fakeID("sleeplimit-a"))).To(BeEmpty(), "the machine is deleted")
	s.g.Expect(machines.powerCalls()).To(Equal([]string{"suspend " + fakeID("sleeplimit-a")}), "never woken")
	s.g.Expect(testutil.ToFloat64(metrics.NodeClaimsTerminated.WithLabelValues("sleeplimit", metrics.ReasonSleepLimit))).To(Equal(before + 1))
}

func TestWakingStartsTheMachineAndAdoptsOnlyTheNodeWithItsProviderID(t *testing.T) {
	s, machines := newSleepScenario(t, "wake")
	s.asleep("wake-a")
	s.clock.Step(30 * time.Minute)
	before := wakes("wake", metrics.SleepResultSuccess)
	s.askToWake("wake-a")

	s.mustReconcile("wake-a")
	claim := s.claim("wake-a")
	s.g.Expect(machines.state(fakeID("wake-a"))).To(Equal(provider.InstanceRunning))
	s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonWaking),
		HaveField("LastTransitionTime.Time", BeTemporally("==", s.clock.Now()))))
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(HaveField("Reason", v1alpha1.ReasonWaitingForNode))

	// A node named as the machine's was, but another machine's: not ours.
	s.node("wake-a", "fake://test/someone-else", corev1.ConditionTrue)
	s.mustReconcile("wake-a")
	s.g.Expect(condition(s.claim("wake-a"), v1alpha1.ConditionRegistered)).To(HaveField("Reason", v1alpha1.ReasonWaitingForNode))

	s.clock.Step(3 * time.Second)
	s.node("wake-a-again", fakeID("wake-a"), corev1.ConditionTrue)
	s.mustReconcile("wake-a")
	claim = s.claim("wake-a")
	s.g.Expect(claim.Status.NodeName).To(Equal("wake-a-again"))
	s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(And(
		HaveField("Reason", v1alpha1.ReasonAwake), HaveField("Message", ContainSubstring("3s"))))
	s.g.Expect(condition(claim, v1alpha1.ConditionReady)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(wakes("wake", metrics.SleepResultSuccess)).To(Equal(before + 1))
	latency := &dto.Metric{}
	s.g.Expect(metrics.WakeToRegisteredSeconds.WithLabelValues("wake").(prometheus.Histogram).Write(latency)).To(Succeed())
	s.g.Expect(latency.GetHistogram().GetSampleCount()).To(Equal(uint64(1)))
	s.g.Expect(latency.GetHistogram().GetSampleSum()).To(Equal(3.0), "from the wake to the Node")
	s.g.Expect(machines.Calls(fake.Create)).To(HaveLen(1), "woken, not made")
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring(v1alpha1.ReasonAwake)))
}

func TestAWokenMachineWithoutANodeWithinTheRegistrationTimeoutFromTheWakeIsDeleted(t *testing.T) {
	s, machines := newSleepScenario(t, "waketimeout")
	s.asleep("waketimeout-a")
	// Long past the registration timeout counted from the claim's creation.
	s.clock.Step(30 * time.Minute)
	before := wakes("waketimeout", metrics.SleepResultRegistrationTimeout)
	s.askToWake("waketimeout-a")
	s.mustReconcile("waketimeout-a")

	s.clock.Step(9 * time.Minute)
	s.mustReconcile("waketimeout-a")
	s.g.Expect(s.claim("waketimeout-a").DeletionTimestamp).To(BeNil(), "counted from the wake")

	s.clock.Step(time.Minute + time.Second)
	s.mustReconcile("waketimeout-a")
	claim := s.claim("waketimeout-a")
	s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil())
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(And(
		HaveField("Reason", v1alpha1.ReasonRegistrationTimeout), HaveField("Message", ContainSubstring("after its machine was woken"))))
	s.g.Expect(wakes("waketimeout", metrics.SleepResultRegistrationTimeout)).To(Equal(before + 1))
	s.g.Eventually(func() *v1alpha1.NodeClaim { _, _ = s.reconcile("waketimeout-a"); return s.claim("waketimeout-a") }).Should(BeNil())
	s.g.Expect(machines.Machines()).To(BeEmpty())
}

func TestAWakeWithoutCapacityDeletesTheClaimAndBacksOffItsPoolAndShape(t *testing.T) {
	s, machines := newSleepScenario(t, "wakecapacity")
	s.asleep("wakecapacity-a")
	machines.FailNext(fake.Resume, provider.NewInsufficientCapacity(errors.New("no memory free on host pve2")))
	s.askToWake("wakecapacity-a")

	s.mustReconcile("wakecapacity-a")
	claim := s.claim("wakecapacity-a")
	s.g.Expect(s.capacity.entries()).To(Equal([]string{"wakecapacity/c2/"}))
	s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil(), "provisioning makes a new machine for the pods")
	s.g.Expect(condition(claim, v1alpha1.ConditionLaunched)).To(And(
		HaveField("Reason", v1alpha1.ReasonInsufficientCapacity), HaveField("Message", ContainSubstring("no memory free on host pve2"))))

	s.g.Eventually(func() *v1alpha1.NodeClaim { _, _ = s.reconcile("wakecapacity-a"); return s.claim("wakecapacity-a") }).Should(BeNil())
	s.g.Expect(machines.Calls(fake.Create)).To(HaveLen(1), "the claim had a machine: never made again")
	s.g.Expect(machines.Machines()).To(BeEmpty())
}

// failingClaimDeletes fails the next claim deletions: a controller
// killed after it wrote why a claim goes and before it deleted it.
type failingClaimDeletes struct {
	client.Client
	left atomic.Int32
}

func (c *failingClaimDeletes) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if _, ok := obj.(*v1alpha1.NodeClaim); ok && c.left.Add(-1) >= 0 {
		return errors.New("killed")
	}
	return c.Client.Delete(ctx, obj, opts...)
}

// A claim left Launched=False by a wake without capacity, and not deleted
// after all, still has its machine: it is woken again, never launched.
func TestAClaimThatSleptIsNeverLaunchedAgain(t *testing.T) {
	s, machines := newSleepScenario(t, "neverrelaunch")
	s.asleep("neverrelaunch-a")
	crashing := &failingClaimDeletes{Client: cached}
	crashing.left.Store(1)
	s.c.Kube = crashing
	machines.FailNext(fake.Resume, provider.NewInsufficientCapacity(errors.New("no memory free on host pve2")))
	s.askToWake("neverrelaunch-a")
	_, err := s.reconcile("neverrelaunch-a")
	s.g.Expect(err).To(HaveOccurred())
	s.g.Expect(condition(s.claim("neverrelaunch-a"), v1alpha1.ConditionLaunched)).To(HaveField("Status", metav1.ConditionFalse))

	s.mustReconcile("neverrelaunch-a")
	s.g.Expect(machines.Calls(fake.Create)).To(HaveLen(1), "one machine per claim")
	s.g.Expect(condition(s.claim("neverrelaunch-a"), v1alpha1.ConditionSuspended)).To(HaveField("Reason", v1alpha1.ReasonWaking), "the capacity came back: woken")
	s.node("neverrelaunch-a", fakeID("neverrelaunch-a"), corev1.ConditionTrue)
	s.mustReconcile("neverrelaunch-a")
	s.g.Expect(condition(s.claim("neverrelaunch-a"), v1alpha1.ConditionReady)).To(HaveField("Status", metav1.ConditionTrue))
}

// failingNodeDeletes fails the next Node deletions: a controller killed
// after its machine was stopped and before its Node was deleted.
type failingNodeDeletes struct {
	client.Client
	left atomic.Int32
}

func (c *failingNodeDeletes) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if _, ok := obj.(*corev1.Node); ok && c.left.Add(-1) >= 0 {
		return errors.New("killed")
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func TestACrashBetweenSuspendAndTheNodesDeletionEndsAsleepWithOneMachine(t *testing.T) {
	s, machines := newSleepScenario(t, "crashsuspend")
	s.ready("crashsuspend-a")
	crashing := &failingNodeDeletes{Client: cached}
	crashing.left.Store(1)
	s.c.Kube = crashing
	s.askToSleep("crashsuspend-a")

	_, err := s.reconcile("crashsuspend-a")
	s.g.Expect(err).To(HaveOccurred())
	s.g.Expect(machines.state(fakeID("crashsuspend-a"))).To(Equal(provider.InstanceSuspended))
	s.g.Expect(s.getNode("crashsuspend-a")).NotTo(BeNil())
	s.g.Expect(s.claim("crashsuspend-a").Asleep()).To(BeFalse(), "not asleep until the Node is gone")

	s.mustReconcile("crashsuspend-a")
	s.g.Expect(s.claim("crashsuspend-a").Asleep()).To(BeTrue())
	s.g.Expect(s.getNode("crashsuspend-a")).To(BeNil())
	s.g.Expect(machines.Machines()).To(HaveLen(1), "one machine per claim")
	s.g.Expect(machines.Calls(fake.Create)).To(HaveLen(1))
}

func TestACrashBetweenResumeAndRegistrationEndsAwakeWithOneMachine(t *testing.T) {
	s, machines := newSleepScenario(t, "crashwake")
	s.asleep("crashwake-a")
	s.askToWake("crashwake-a")
	// The controller that woke the machine was killed before it wrote
	// Waking: the claim still says Suspended=True.
	s.g.Expect(machines.Resume(s.ctx, fakeID("crashwake-a"))).To(Succeed())

	s.mustReconcile("crashwake-a")
	s.g.Expect(condition(s.claim("crashwake-a"), v1alpha1.ConditionSuspended)).To(HaveField("Reason", v1alpha1.ReasonWaking))
	s.node("crashwake-a", fakeID("crashwake-a"), corev1.ConditionTrue)
	s.mustReconcile("crashwake-a")
	s.g.Expect(condition(s.claim("crashwake-a"), v1alpha1.ConditionSuspended)).To(HaveField("Reason", v1alpha1.ReasonAwake))
	s.g.Expect(machines.Machines()).To(HaveLen(1), "one machine per claim")
	s.g.Expect(machines.Calls(fake.Create)).To(HaveLen(1), "never made again")
	s.g.Expect(machines.state(fakeID("crashwake-a"))).To(Equal(provider.InstanceRunning))
}

func TestASleepCancelledBeforeTheMachineSleptUncordonsTheNode(t *testing.T) {
	s, machines := newSleepScenario(t, "cancel")
	s.ready("cancel-a")
	s.cachedPod(s.pod("cancel-app", "cancel-a"))
	s.askToSleep("cancel-a")
	s.mustReconcile("cancel-a")
	s.g.Expect(s.getNode("cancel-a").Spec.Taints).To(ContainElement(HaveField("Key", v1alpha1.TaintDisrupted)))

	s.askToWake("cancel-a")
	s.mustReconcile("cancel-a")
	s.g.Expect(s.getNode("cancel-a").Spec.Taints).NotTo(ContainElement(HaveField("Key", v1alpha1.TaintDisrupted)))
	s.g.Expect(condition(s.claim("cancel-a"), v1alpha1.ConditionSuspended)).To(HaveField("Reason", v1alpha1.ReasonAwake))
	s.g.Expect(machines.state(fakeID("cancel-a"))).To(Equal(provider.InstanceRunning))
}

// A person deleting a sleeping claim deletes its machine without a drain
// and without waking it.
func TestDeletingAnAsleepClaimDeletesItsMachineWithoutWakingIt(t *testing.T) {
	s, machines := newSleepScenario(t, "deleteasleep")
	s.asleep("deleteasleep-a")
	s.deleteClaim("deleteasleep-a")
	s.g.Eventually(func() *v1alpha1.NodeClaim { _, _ = s.reconcile("deleteasleep-a"); return s.claim("deleteasleep-a") }).Should(BeNil())
	s.g.Expect(machines.Machines()).To(BeEmpty())
	s.g.Expect(machines.powerCalls()).NotTo(ContainElement(HavePrefix("resume")))
}

// A start that fails is retried with backoff, the machine still asleep:
// no registration timeout runs before the machine was started, however
// old the claim.
func TestAFailedWakeIsRetriedWithoutTheRegistrationTimeoutRunning(t *testing.T) {
	s, machines := newSleepScenario(t, "wakefail")
	s.asleep("wakefail-a")
	s.clock.Step(30 * time.Minute)
	before := wakes("wakefail", metrics.SleepResultFailed)
	machines.FailNext(fake.Resume, errors.New("host pve2 unreachable"))
	s.askToWake("wakefail-a")

	result := s.mustReconcile("wakefail-a")
	claim := s.claim("wakefail-a")
	s.g.Expect(claim.DeletionTimestamp).To(BeNil(), "the registration timeout counts from the start, which has not happened")
	s.g.Expect(condition(claim, v1alpha1.ConditionSuspended)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Message", ContainSubstring("host pve2 unreachable"))))
	s.g.Expect(result.RequeueAfter).To(BeNumerically(">", 0))
	s.g.Expect(s.recorded()).To(ContainElement(And(ContainSubstring("WakeFailed"), ContainSubstring("host pve2 unreachable"))))
	s.g.Expect(wakes("wakefail", metrics.SleepResultFailed)).To(Equal(before + 1))

	s.mustReconcile("wakefail-a")
	s.g.Expect(condition(s.claim("wakefail-a"), v1alpha1.ConditionSuspended)).To(HaveField("Reason", v1alpha1.ReasonWaking))
}
