package nodeclaim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/pkg/provider"
)

func TestLaunchPersistsTheFinalizerAndRecordsTheMachineOnce(t *testing.T) {
	s := newScenario(t, "launch")
	s.newClaim("launch-a")

	s.mustReconcile("launch-a")
	claim := s.claim("launch-a")
	s.g.Expect(claim.Finalizers).To(ContainElement(v1alpha1.TerminationFinalizer))
	s.g.Expect(claim.Status.ProviderID).To(Equal("test://launch-a"))
	s.g.Expect(claim.Status.NodeProviderName).To(Equal("test"))
	s.g.Expect(claim.Status.Capacity.Cpu().String()).To(Equal("2"))
	s.g.Expect(condition(claim, v1alpha1.ConditionLaunched)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(HaveField("Reason", "WaitingForNode"))
	s.g.Expect(condition(claim, v1alpha1.ConditionReady)).To(HaveField("Status", metav1.ConditionFalse))

	s.mustReconcile("launch-a")
	s.g.Expect(s.provider.recorded()).To(Equal([]string{"create launch-a"}), "a launched claim is not created again")
}

// A launch seen again through a cache that missed its status write (a
// write the API server took but answered late) adopts the same machine,
// and the launch is counted once.
func TestALaunchSeenAgainThroughAStaleCacheIsCountedOnce(t *testing.T) {
	s := newScenario(t, "stalelaunch")
	s.newClaim("stalelaunch-a")
	launches := func() float64 { return testutil.ToFloat64(metrics.NodeClaimsLaunched.WithLabelValues(s.pool.Name)) }
	before := launches()
	s.mustReconcile("stalelaunch-a")
	s.g.Expect(launches()).To(Equal(before + 1))

	stale := s.claim("stalelaunch-a").DeepCopy()
	meta.RemoveStatusCondition(&stale.Status.Conditions, v1alpha1.ConditionLaunched)
	_, err := (&launch{s.c}).Reconcile(s.ctx, stale)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(s.provider.recorded()).To(Equal([]string{"create stalelaunch-a", "create stalelaunch-a"}), "the stale claim was launched again")
	s.g.Expect(launches()).To(Equal(before+1), "one machine, one launch")
}

func TestInsufficientCapacityBacksOffThePoolAndShapeAndGivesTheClaimUp(t *testing.T) {
	s := newScenario(t, "nocapacity")
	s.newClaim("nocapacity-a")
	s.provider.failNext("create", provider.NewInsufficientCapacity(errors.New("no c2 left in the zone")))

	s.mustReconcile("nocapacity-a")
	s.g.Expect(s.capacity.entries()).To(Equal([]string{"nocapacity/c2/"}))
	claim := s.claim("nocapacity-a")
	s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil(), "the pods go back to provisioning")
	s.g.Expect(condition(claim, v1alpha1.ConditionLaunched)).To(And(
		HaveField("Reason", "InsufficientCapacity"), HaveField("Message", ContainSubstring("no c2 left in the zone"))))
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring("InsufficientCapacity")))

	// No machine was made; the deletion lets the claim go.
	s.mustReconcile("nocapacity-a")
	s.g.Expect(s.claim("nocapacity-a")).To(BeNil())
}

func TestTerminalLaunchErrorIsAConditionAndAnEventAndIsRetriedLater(t *testing.T) {
	s := newScenario(t, "terminal")
	s.newClaim("terminal-a")
	s.provider.failNext("create", provider.NewTerminal(errors.New("image debian-13 not found")))

	result := s.mustReconcile("terminal-a")
	claim := s.claim("terminal-a")
	s.g.Expect(claim.DeletionTimestamp).To(BeNil())
	s.g.Expect(condition(claim, v1alpha1.ConditionLaunched)).To(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "LaunchFailed"),
		HaveField("Message", ContainSubstring("image debian-13 not found"))))
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring("image debian-13 not found")))
	s.g.Expect(result.RequeueAfter).To(BeNumerically(">", 0))

	s.mustReconcile("terminal-a")
	s.g.Expect(condition(s.claim("terminal-a"), v1alpha1.ConditionLaunched)).To(HaveField("Status", metav1.ConditionTrue))
}

func TestRetryableLaunchErrorsBackOffExponentially(t *testing.T) {
	s := newScenario(t, "retry")
	s.newClaim("retry-a")
	var waits []time.Duration
	for range 3 {
		s.provider.failNext("create", provider.NewRetryable(errors.New("API rate limited"), 0))
		waits = append(waits, s.mustReconcile("retry-a").RequeueAfter)
	}
	s.g.Expect(waits[0]).To(BeNumerically("~", time.Second, 100*time.Millisecond))
	s.g.Expect(waits[1]).To(BeNumerically("~", 2*time.Second, 200*time.Millisecond))
	s.g.Expect(waits[2]).To(BeNumerically("~", 4*time.Second, 400*time.Millisecond))
	s.g.Expect(condition(s.claim("retry-a"), v1alpha1.ConditionLaunched).Message).To(ContainSubstring("retrying in"))

	s.provider.failNext("create", provider.NewRetryable(errors.New("busy"), time.Minute))
	s.g.Expect(s.mustReconcile("retry-a").RequeueAfter).To(BeNumerically(">=", time.Minute), "the provider's own retry-after wins")
}

// A machine the provider is still making is no failure: the claim says
// what it waits for, one Normal event marks the start of the wait rather
// than a warning per look, and the provider's wait is kept without backoff.
func TestLaunchInProgressIsAWaitNotAFailure(t *testing.T) {
	s := newScenario(t, "inprogress")
	s.newClaim("inprogress-a")
	var events []string
	for range 3 {
		s.provider.failNext("create", provider.NewInProgress(errors.New("Machine default/inprogress-a has no providerID yet: waiting for infrastructure"), 10*time.Second))
		s.g.Expect(s.mustReconcile("inprogress-a").RequeueAfter).To(Equal(10*time.Second), "the provider's wait, not a doubling backoff")
		events = append(events, s.recorded()...)
	}
	s.g.Expect(condition(s.claim("inprogress-a"), v1alpha1.ConditionLaunched)).To(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonLaunching),
		HaveField("Message", ContainSubstring("waiting for infrastructure"))))
	s.g.Expect(events).To(HaveExactElements(And(HavePrefix("Normal Launching"), ContainSubstring("no providerID yet"))), "one event for the whole wait")

	s.mustReconcile("inprogress-a")
	s.g.Expect(condition(s.claim("inprogress-a"), v1alpha1.ConditionLaunched)).To(HaveField("Status", metav1.ConditionTrue))
}

func TestLaunchMakesAJoinTokenThatRegistrationRevokes(t *testing.T) {
	s := newScenario(t, "token", func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
	})
	s.withBootstrap()
	s.newClaim("token-a")

	s.mustReconcile("token-a")
	claim := s.claim("token-a")
	s.g.Expect(claim.Status.BootstrapToken).NotTo(BeNil())
	tokens := func() []corev1.Secret {
		var secrets corev1.SecretList
		s.g.Expect(env.Client.List(s.ctx, &secrets, client.InNamespace(bootstrap.TokenNamespace),
			client.MatchingLabels{bootstrap.LabelBootstrapToken: "true", v1alpha1.LabelNodeClaim: "token-a"})).To(Succeed())
		return secrets.Items
	}
	s.g.Expect(tokens()).To(HaveLen(1))
	s.g.Expect(tokens()[0].Type).To(Equal(corev1.SecretType("bootstrap.kubernetes.io/token")))
	s.g.Expect(string(s.provider.userData["token-a"])).To(ContainSubstring(claim.Status.BootstrapToken.ID), "the provider delivers user data carrying the token")
	for _, condition := range claim.Status.Conditions {
		s.g.Expect(condition.Message).NotTo(ContainSubstring(string(tokens()[0].Data["token-secret"])))
	}

	s.node("token-a", "test://token-a", corev1.ConditionTrue)
	s.mustReconcile("token-a")
	s.g.Expect(tokens()).To(BeEmpty(), "a registered node's token is deleted")
	s.g.Expect(s.claim("token-a").Status.BootstrapToken.RevokedAt).NotTo(BeNil())
}

func TestRegistrationAdoptsOnlyTheNodeWithTheMachinesProviderID(t *testing.T) {
	s := newScenario(t, "register")
	taint := corev1.Taint{Key: "dedicated", Value: "ci", Effect: corev1.TaintEffectNoSchedule}
	startup := corev1.Taint{Key: "cni-starting", Effect: corev1.TaintEffectNoSchedule}
	s.newClaim("register-a", func(claim *v1alpha1.NodeClaim) {
		claim.Spec.Taints = []corev1.Taint{taint}
		claim.Spec.StartupTaints = []corev1.Taint{startup}
	})
	s.mustReconcile("register-a")

	// A node named like the claim, but another machine's: not ours.
	s.node("register-a", "test://someone-else", corev1.ConditionTrue)
	s.mustReconcile("register-a")
	s.g.Expect(condition(s.claim("register-a"), v1alpha1.ConditionRegistered)).To(HaveField("Reason", "WaitingForNode"))
	s.g.Expect(s.getNode("register-a").Labels).NotTo(HaveKey(v1alpha1.LabelNodeClaim))

	s.node("register-a-machine", "test://register-a", corev1.ConditionTrue)
	s.mustReconcile("register-a")
	claim := s.claim("register-a")
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(claim.Status.NodeName).To(Equal("register-a-machine"))
	node := s.getNode("register-a-machine")
	s.g.Expect(node.Labels).To(And(
		HaveKeyWithValue(v1alpha1.LabelNodePool, "register"), HaveKeyWithValue(v1alpha1.LabelNodeClaim, "register-a"),
		HaveKeyWithValue("team", "blue"), HaveKeyWithValue(corev1.LabelInstanceTypeStable, "c2")))
	s.g.Expect(node.Spec.Taints).To(ContainElements(taint, startup))
	s.g.Expect(node.Finalizers).To(ContainElement(v1alpha1.TerminationFinalizer))
	s.g.Expect(node.OwnerReferences).To(ContainElement(HaveField("UID", claim.UID)))
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring("node register-a-machine registered")))
}

// A bare-metal server's Node registers without a providerID (no cloud
// controller sets one): registration finds it by the system UUID its
// kubelet reports, writes the claim's providerID onto it and adopts it. A
// Node that reports another UUID, or one that has a providerID already, is
// not taken.
func TestRegistrationMatchesANodeWithoutAProviderIDByItsSystemUUID(t *testing.T) {
	s := newScenario(t, "metal")
	const uuid = "4c4c4544-0051-3010-8036-b4c04f4d3732"
	s.provider.mu.Lock()
	s.provider.providerIDs["metal-a"] = v1alpha1.ProviderIDPrefixRedfish + uuid
	s.provider.mu.Unlock()
	s.newClaim("metal-a")
	s.mustReconcile("metal-a")

	reports := func(name, providerID, systemUUID string) {
		node := s.node(name, providerID, corev1.ConditionTrue)
		node.Status.NodeInfo.SystemUUID = systemUUID
		s.g.Expect(env.Client.Status().Update(s.ctx, node)).To(Succeed())
		s.g.Eventually(func() string {
			seen := &corev1.Node{}
			_ = cached.Get(s.ctx, client.ObjectKeyFromObject(node), seen)
			return seen.Status.NodeInfo.SystemUUID
		}).Should(Equal(systemUUID))
	}
	reports("metal-other", "", "4c4c4544-0000-0000-0000-000000000000")
	reports("metal-cloud", "test://metal-cloud", strings.ToUpper(uuid))
	s.mustReconcile("metal-a")
	s.g.Expect(condition(s.claim("metal-a"), v1alpha1.ConditionRegistered)).To(HaveField("Reason", "WaitingForNode"))

	// The kubelet reports the SMBIOS UUID in upper case on some machines.
	reports("r640-07", "", strings.ToUpper(uuid))
	s.mustReconcile("metal-a")
	claim := s.claim("metal-a")
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(claim.Status.NodeName).To(Equal("r640-07"))
	node := s.getNode("r640-07")
	s.g.Expect(node.Spec.ProviderID).To(Equal(v1alpha1.ProviderIDPrefixRedfish + uuid))
	s.g.Expect(node.Labels).To(HaveKeyWithValue(v1alpha1.LabelNodeClaim, "metal-a"))
	s.g.Expect(s.getNode("metal-cloud").Labels).NotTo(HaveKey(v1alpha1.LabelNodeClaim))
}

// A registered claim is reconciled again on every write to it (each of
// disruption's conditions, say); the Node is written only when what the
// claim puts on it changed. At a thousand nodes empty patches were a sixth
// of the requests waiting on the API server during a scale-down.
func TestRegistrationWritesTheNodeOnlyWhenTheClaimChangedWhatItPutsThere(t *testing.T) {
	s := newScenario(t, "readopt")
	counting := &writeCounter{Client: cached}
	s.c.Kube = counting
	s.newClaim("readopt-a")
	s.mustReconcile("readopt-a")
	s.node("readopt-a", "test://readopt-a", corev1.ConditionTrue)
	s.mustReconcile("readopt-a")
	s.g.Expect(counting.patches.Load()).To(BeNumerically(">=", 1), "registration adopts the node")
	s.g.Eventually(func() map[string]string {
		seen := &corev1.Node{}
		_ = cached.Get(s.ctx, client.ObjectKey{Name: "readopt-a"}, seen)
		return seen.Labels
	}).Should(HaveKeyWithValue(v1alpha1.LabelInitialized, "true"))
	s.syncCache("readopt-a")

	adopted := counting.patches.Load()
	for range 3 {
		s.mustReconcile("readopt-a")
		s.syncCache("readopt-a")
	}
	s.g.Expect(counting.patches.Load()).To(Equal(adopted), "nothing changed, so nothing is written")

	// A label the claim gains is the claim's to put on its node.
	claim := s.claim("readopt-a")
	patch := client.MergeFrom(claim.DeepCopy())
	claim.Labels["team"] = "green"
	s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())
	s.syncCache("readopt-a")
	s.mustReconcile("readopt-a")
	s.g.Expect(counting.patches.Load()).To(Equal(adopted + 1))
	s.g.Expect(s.getNode("readopt-a").Labels).To(HaveKeyWithValue("team", "green"))
}

// writeCounter counts the patches sent for Nodes.
type writeCounter struct {
	client.Client
	patches atomic.Int32
}

func (c *writeCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*corev1.Node); ok {
		c.patches.Add(1)
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func TestInitializationWaitsForReadinessAndStartupTaints(t *testing.T) {
	s := newScenario(t, "initialize")
	startup := corev1.Taint{Key: "cni-starting", Effect: corev1.TaintEffectNoSchedule}
	s.newClaim("initialize-a", func(claim *v1alpha1.NodeClaim) { claim.Spec.StartupTaints = []corev1.Taint{startup} })
	s.mustReconcile("initialize-a")
	s.node("initialize-a", "test://initialize-a", corev1.ConditionFalse)

	s.mustReconcile("initialize-a")
	s.g.Expect(condition(s.claim("initialize-a"), v1alpha1.ConditionInitialized)).To(HaveField("Reason", "NodeNotReady"))

	node := s.getNode("initialize-a")
	node.Status.Conditions[0].Status = corev1.ConditionTrue
	s.g.Expect(env.Client.Status().Update(s.ctx, node)).To(Succeed())
	s.g.Eventually(func() corev1.ConditionStatus {
		seen := &corev1.Node{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(node), seen)
		return readyOf(seen)
	}).Should(Equal(corev1.ConditionTrue))
	s.mustReconcile("initialize-a")
	s.g.Expect(condition(s.claim("initialize-a"), v1alpha1.ConditionInitialized)).To(And(
		HaveField("Reason", "StartupTaintsPresent"), HaveField("Message", ContainSubstring("cni-starting"))))

	// The CNI removes its taint.
	node = s.getNode("initialize-a")
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = nil
	s.g.Expect(env.Client.Patch(s.ctx, node, patch)).To(Succeed())
	s.g.Eventually(func() int {
		seen := &corev1.Node{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(node), seen)
		return len(seen.Spec.Taints)
	}).Should(BeZero())
	s.mustReconcile("initialize-a")
	claim := s.claim("initialize-a")
	s.g.Expect(condition(claim, v1alpha1.ConditionInitialized)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(condition(claim, v1alpha1.ConditionReady)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(s.getNode("initialize-a").Labels).To(HaveKeyWithValue(v1alpha1.LabelInitialized, "true"))
}

func readyOf(node *corev1.Node) corev1.ConditionStatus {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status
		}
	}
	return ""
}

func TestLivenessDeletesAMachineWhoseNodeNeverRegisters(t *testing.T) {
	s := newScenario(t, "liveness", func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	s.newClaim("liveness-a")
	created := s.claim("liveness-a").CreationTimestamp.Time
	s.clock.SetTime(created)

	result := s.mustReconcile("liveness-a")
	s.g.Expect(result.RequeueAfter).To(BeNumerically("<=", 10*time.Second), "registration is polled")
	s.clock.Step(9 * time.Minute)
	s.mustReconcile("liveness-a")
	s.g.Expect(s.claim("liveness-a").DeletionTimestamp).To(BeNil())

	s.clock.Step(time.Minute + time.Second)
	s.mustReconcile("liveness-a")
	claim := s.claim("liveness-a")
	s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil())
	s.g.Expect(condition(claim, v1alpha1.ConditionRegistered)).To(And(
		HaveField("Reason", v1alpha1.ReasonRegistrationTimeout), HaveField("Message", ContainSubstring("10m0s"))))

	s.mustReconcile("liveness-a")
	s.g.Expect(s.provider.recorded()).To(ContainElement("delete test://liveness-a"))
	s.g.Expect(s.claim("liveness-a")).To(BeNil())
}

// registered brings a claim to a registered, Ready node.
func (s *scenario) registered(name string, ready corev1.ConditionStatus) {
	s.t.Helper()
	s.newClaim(name)
	s.mustReconcile(name)
	s.node(name, "test://"+name, ready)
	s.mustReconcile(name)
	s.g.Expect(condition(s.claim(name), v1alpha1.ConditionRegistered)).To(HaveField("Status", metav1.ConditionTrue))
}

func (s *scenario) deleteClaim(name string) {
	s.t.Helper()
	s.g.Expect(env.Client.Delete(s.ctx, &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
}

func TestTerminationCordonsDrainsThroughEvictionThenDeletesMachineNodeAndFinalizer(t *testing.T) {
	s := newScenario(t, "terminate")
	s.registered("terminate-a", corev1.ConditionTrue)
	pod := s.pod("terminate-app", "terminate-a")
	s.deleteClaim("terminate-a")
	s.clock.SetTime(s.claim("terminate-a").DeletionTimestamp.Time)

	s.mustReconcile("terminate-a")
	s.g.Expect(s.getNode("terminate-a").Spec.Taints).To(ContainElement(HaveField("Key", v1alpha1.TaintDisrupted)))
	s.g.Expect(s.getPod(pod).DeletionTimestamp).NotTo(BeNil(), "evicted: its kubelet stops it")
	s.g.Expect(condition(s.claim("terminate-a"), v1alpha1.ConditionTerminating)).To(And(
		HaveField("Reason", "Draining"), HaveField("Message", ContainSubstring("1 pods left"))))
	s.g.Expect(s.provider.recorded()).NotTo(ContainElement(HavePrefix("delete")), "the machine stays while pods drain")

	// The kubelet is alive, but this pod will not stop: after the
	// termination grace period it is deleted outright.
	s.clock.Step(defaultTerminationGracePeriod + time.Second)
	s.mustReconcile("terminate-a")
	s.g.Eventually(func() *corev1.Pod { return s.getPod(pod) }).Should(BeNil())
	s.g.Eventually(func() error {
		_, err := s.reconcile("terminate-a")
		if err != nil {
			return err
		}
		if s.claim("terminate-a") != nil {
			return errors.New("claim still there")
		}
		return nil
	}).Should(Succeed())
	s.g.Expect(s.provider.recorded()).To(ContainElement("delete test://terminate-a"))
	s.g.Expect(s.getNode("terminate-a")).To(BeNil())
}

func TestTerminationOfAnUnreachableNodeRemovesEvictedPodsWithoutWaitingForTheKubelet(t *testing.T) {
	s := newScenario(t, "unreachable")
	s.registered("unreachable-a", corev1.ConditionTrue)
	pod := s.pod("unreachable-app", "unreachable-a")
	node := s.getNode("unreachable-a")
	node.Status.Conditions[0].Status = corev1.ConditionUnknown
	s.g.Expect(env.Client.Status().Update(s.ctx, node)).To(Succeed())
	s.g.Eventually(func() corev1.ConditionStatus {
		seen := &corev1.Node{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(node), seen)
		return readyOf(seen)
	}).Should(Equal(corev1.ConditionUnknown))
	s.deleteClaim("unreachable-a")
	s.clock.SetTime(s.claim("unreachable-a").DeletionTimestamp.Time)

	s.mustReconcile("unreachable-a")
	s.g.Expect(s.getPod(pod)).To(BeNil(), "evicted and removed: no kubelet would ever confirm it stopped")
	// Well within the termination grace period, the claim goes.
	s.g.Eventually(func() error {
		_, err := s.reconcile("unreachable-a")
		if err != nil {
			return err
		}
		if s.claim("unreachable-a") != nil {
			return errors.New("claim still there")
		}
		return nil
	}).Should(Succeed())
	s.g.Expect(s.provider.recorded()).To(ContainElement("delete test://unreachable-a"))
}

func TestReleaseAnnotationLetsAClaimGoWhoseNodeProviderIsGone(t *testing.T) {
	s := newScenario(t, "release")
	s.newClaim("release-a")
	s.mustReconcile("release-a")
	s.resolver.gone = true
	s.deleteClaim("release-a")

	s.mustReconcile("release-a")
	claim := s.claim("release-a")
	s.g.Expect(claim).NotTo(BeNil(), "the machine may still run: the claim waits")
	s.g.Expect(condition(claim, v1alpha1.ConditionTerminating)).To(And(
		HaveField("Reason", v1alpha1.ReasonWaitingForNodeProvider), HaveField("Message", ContainSubstring(v1alpha1.AnnotationReleaseMachine))))

	patch := client.MergeFrom(claim.DeepCopy())
	claim.Annotations = map[string]string{v1alpha1.AnnotationReleaseMachine: "true"}
	s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())
	s.mustReconcile("release-a")
	s.g.Expect(s.claim("release-a")).To(BeNil())
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring("MachineReleased")))
	s.g.Expect(s.provider.recorded()).NotTo(ContainElement(HavePrefix("delete")))
}
