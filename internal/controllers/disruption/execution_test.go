package disruption

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/capacitybackoff"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/statusapply"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// Disruption's execution against a real API server: each test writes the
// cluster it starts from, runs a controller's rounds on a fake clock
// (reading through the informer cache, as in the manager) and reads what
// they wrote: marks, replacements, deletions, releases. The provider is
// pkg/provider/fake; the decisions themselves are the package's other
// tests'.

const suiteNamespace = "default"

var (
	small = provider.Shape{Name: "small", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.1}
	large = provider.Shape{Name: "large", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}, Price: 0.2}
)

// scenario is one test's cluster and a disruption controller on a fake
// clock.
type scenario struct {
	t        *testing.T
	g        *WithT
	ctx      context.Context
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	infra    *fake.Infrastructure
	c        *Controller
}

func newScenario(t *testing.T) *scenario {
	expect.Cleared(t, env.Client, suiteNamespace)
	infra := fake.NewInfrastructure(small, large)
	// Truncated: the API server keeps times to the second.
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	recorder := events.NewFakeRecorder(1000)
	providers := fake.Resolver{Provider: infra.Provider("test")}
	c := &Controller{
		Kube: cached, Providers: providers,
		Pools:    provisioning.Resolve(cached, providers, capacitybackoff.NewBackoff(clk)),
		Recorder: recorder, Clock: clk,
	}
	c.wire()
	s := &scenario{t: t, g: NewWithT(t), ctx: context.Background(), clock: clk, recorder: recorder, infra: infra, c: c}
	expect.Applied(t, env.Client, expect.Provider("sim"))
	return s
}

// pool writes a pool of both shapes whose disruption budget is budget.
func (s *scenario) pool(name, budget string, disruption func(*v1alpha1.Disruption)) *v1alpha1.NodePool {
	pool := expect.Pool(name, "sim", small.Name, large.Name)
	pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: budget}}
	if disruption != nil {
		disruption(&pool.Spec.Disruption)
	}
	expect.Applied(s.t, env.Client, pool)
	return pool
}

// node writes an initialized claim of pool, an hour old by the clock, held
// by the lifecycle's finalizer as a real one is, and its Ready node, with
// conditions on top.
func (s *scenario) node(pool *v1alpha1.NodePool, name string, shape provider.Shape, conditions ...metav1.Condition) {
	hourAgo := metav1.NewTime(s.clock.Now().Add(-time.Hour))
	providerID := "fake://test/" + name
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: pool.Name},
			Finalizers: []string{v1alpha1.TerminationFinalizer},
		},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: shape.Name, CPU: *shape.Capacity.Cpu(), Memory: *shape.Capacity.Memory()},
		},
		Status: v1alpha1.NodeClaimStatus{ProviderID: providerID, NodeName: name},
	}
	for _, conditionType := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady} {
		claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{Type: conditionType, Status: metav1.ConditionTrue, Reason: conditionType, LastTransitionTime: hourAgo})
	}
	claim.Status.Conditions = append(claim.Status.Conditions, conditions...)
	node := expect.ReadyNode(name, providerID, shape.Capacity.Cpu().String(), shape.Capacity.Memory().String(),
		map[string]string{v1alpha1.LabelNodePool: pool.Name, v1alpha1.LabelNodeClaim: name, corev1.LabelInstanceTypeStable: shape.Name})
	expect.Applied(s.t, env.Client, claim, node)
}

// emptyFor is the Empty condition of a node that has run no pods for d.
func (s *scenario) emptyFor(d time.Duration) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionEmpty, Status: metav1.ConditionTrue, Reason: "Empty",
		Message: "empty", LastTransitionTime: metav1.NewTime(s.clock.Now().Add(-d))}
}

// round runs one round once the cache shows everything the test wrote.
func (s *scenario) round() {
	s.t.Helper()
	s.synced()
	s.g.Expect(s.c.Reconcile(s.ctx)).To(Succeed())
}

// synced waits until the cache holds the claims, nodes and pods as the API
// server does: a round decides on the cache, and a write from a copy it
// has not caught up with would conflict.
func (s *scenario) synced() {
	s.t.Helper()
	versions := func(reader client.Reader, list client.ObjectList) map[string]string {
		s.g.Expect(reader.List(s.ctx, list)).To(Succeed())
		out := map[string]string{}
		items, err := meta.ExtractList(list)
		s.g.Expect(err).NotTo(HaveOccurred())
		for _, item := range items {
			object := item.(client.Object)
			out[object.GetName()] = object.GetResourceVersion()
		}
		return out
	}
	for _, list := range []func() client.ObjectList{
		func() client.ObjectList { return &v1alpha1.NodeClaimList{} },
		func() client.ObjectList { return &corev1.NodeList{} },
		func() client.ObjectList { return &corev1.PodList{} },
		func() client.ObjectList { return &v1alpha1.NodePoolList{} },
	} {
		want := versions(env.Client, list())
		s.g.Eventually(func() map[string]string { return versions(cached, list()) }).
			WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(want))
	}
}

// claim reads a claim from the API server.
func (s *scenario) claim(name string) *v1alpha1.NodeClaim {
	s.t.Helper()
	var claim v1alpha1.NodeClaim
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: name}, &claim)).To(Succeed())
	return &claim
}

// condition is a claim's condition of that type, as "Status Reason: message".
func condition(claim *v1alpha1.NodeClaim, conditionType string) string {
	found := meta.FindStatusCondition(claim.Status.Conditions, conditionType)
	if found == nil {
		return ""
	}
	return string(found.Status) + " " + found.Reason + ": " + found.Message
}

// replacements are the claims of pool that replace others.
func (s *scenario) replacements(pool string) []v1alpha1.NodeClaim {
	var out []v1alpha1.NodeClaim
	for _, claim := range expect.Claims(s.t, env.Client, pool) {
		if claim.Annotations[AnnotationReplaces] != "" {
			out = append(out, claim)
		}
	}
	return out
}

// events are the events recorded so far that contain all of words.
func (s *scenario) events(words ...string) []string {
	var out []string
	for _, event := range expect.Events(s.recorder) {
		matches := true
		for _, word := range words {
			matches = matches && strings.Contains(event, word)
		}
		if matches {
			out = append(out, event)
		}
	}
	return out
}

func TestExecutionMarksAnEmptyNodeAndDeletesIt(t *testing.T) {
	s := newScenario(t)
	pool := s.pool("empty", "100%", nil)
	s.node(pool, "empty-idle", small, s.emptyFor(time.Hour))
	s.node(pool, "empty-busy", small)
	expect.Applied(t, env.Client, expect.BoundPod(suiteNamespace, "web", "empty-busy", "500m", "512Mi"))

	s.round()

	idle := s.claim("empty-idle")
	s.g.Expect(idle.DeletionTimestamp).NotTo(BeNil(), "the empty node's claim is deleted")
	s.g.Expect(condition(idle, v1alpha1.ConditionDisrupting)).To(Equal("True Empty: node empty-idle has been empty for 30s"),
		"marked before its deletion: termination reads the reason")
	s.g.Expect(s.claim("empty-busy").DeletionTimestamp).To(BeNil(), "the node that runs a pod stays")
	s.g.Expect(s.events("Disrupting", "deleting: node empty-idle")).NotTo(BeEmpty())
}

func TestExecutionDeletesNoMoreThanTheBudgetAllows(t *testing.T) {
	s := newScenario(t)
	pool := s.pool("budget", "1", nil)
	names := []string{"budget-a", "budget-b", "budget-c"}
	for _, name := range names {
		s.node(pool, name, small, s.emptyFor(time.Hour))
	}

	s.round()

	var deleted, held []string
	for _, name := range names {
		claim := s.claim(name)
		if claim.DeletionTimestamp != nil {
			deleted = append(deleted, name)
			continue
		}
		held = append(held, name)
		s.g.Expect(condition(claim, v1alpha1.ConditionConsolidatable)).To(HavePrefix("False "+v1alpha1.ConsolidatableReasonDisruptionBudget+":"), "claim %s says the budget holds it", name)
		s.g.Expect(condition(claim, v1alpha1.ConditionDisrupting)).To(BeEmpty(), "claim %s is not marked", name)
	}
	s.g.Expect(deleted).To(HaveLen(1), "a budget of one node")

	// The next round counts the node going against the budget.
	s.round()
	for _, name := range held {
		s.g.Expect(s.claim(name).DeletionTimestamp).To(BeNil(), "claim %s waits while the first node goes", name)
	}
}

// expiredNode starts the scenarios of a replacement: one node, older than
// its pool's expireAfter, whose pod fits nowhere else. The first round
// makes its replacement and marks it.
func expiredNode(t *testing.T) (*scenario, *v1alpha1.NodeClaim) {
	s := newScenario(t)
	pool := s.pool("expiry", "100%", func(d *v1alpha1.Disruption) { d.ExpireAfter = &metav1.Duration{Duration: time.Hour} })
	s.node(pool, "expiry-old", small)
	expect.Applied(t, env.Client, expect.BoundPod(suiteNamespace, "web", "expiry-old", "1", "1Gi"))
	s.clock.Step(2 * time.Hour)

	s.round()

	replacements := s.replacements("expiry")
	s.g.Expect(replacements).To(HaveLen(1), "one new node holds the pod")
	replacement := &replacements[0]
	s.g.Expect(replacement.Annotations).To(And(
		HaveKeyWithValue(AnnotationReplaces, "expiry-old"),
		HaveKeyWithValue(AnnotationDisruptionReason, string(v1alpha1.DisruptionReasonExpired))))
	old := s.claim("expiry-old")
	s.g.Expect(old.DeletionTimestamp).To(BeNil(), "the old node stays until its replacement is Ready")
	s.g.Expect(condition(old, v1alpha1.ConditionDisrupting)).To(And(HavePrefix("True Expired: "), HaveSuffix("waiting for replacement "+replacement.Name+" to be Ready")))
	return s, replacement
}

func TestExecutionReplacesAnExpiredNodeAndDeletesItOnceTheReplacementIsReady(t *testing.T) {
	s, replacement := expiredNode(t)

	s.round()
	s.g.Expect(s.claim("expiry-old").DeletionTimestamp).To(BeNil(), "the replacement is not Ready yet")
	s.g.Expect(s.replacements("expiry")).To(HaveLen(1), "no second replacement for the same node")

	replacement.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.NewTime(s.clock.Now())}}
	s.g.Expect(env.Client.Status().Update(s.ctx, replacement)).To(Succeed())
	s.round()

	old := s.claim("expiry-old")
	s.g.Expect(old.DeletionTimestamp).NotTo(BeNil(), "the old node goes once its replacement is Ready")
	s.g.Expect(condition(old, v1alpha1.ConditionDisrupting)).To(Equal("True Expired: replacement " + replacement.Name + " is Ready"))
}

func TestExecutionCancelsWhenTheReplacementIsDeleted(t *testing.T) {
	s, replacement := expiredNode(t)
	// Held by a finalizer, as the lifecycle holds a claim whose machine
	// it deletes.
	patch := client.MergeFrom(replacement.DeepCopy())
	controllerutil.AddFinalizer(replacement, v1alpha1.TerminationFinalizer)
	s.g.Expect(env.Client.Patch(s.ctx, replacement, patch)).To(Succeed())
	s.g.Expect(env.Client.Delete(s.ctx, replacement)).To(Succeed())

	s.round()

	old := s.claim("expiry-old")
	s.g.Expect(old.DeletionTimestamp).To(BeNil(), "the old node is not deleted without its replacement")
	s.g.Expect(condition(old, v1alpha1.ConditionDisrupting)).To(Equal("False Cancelled: replacement " + replacement.Name + " is being deleted"))
	s.g.Expect(s.events("DisruptionCancelled", "not replaced after all: replacement "+replacement.Name)).NotTo(BeEmpty())
}

func TestExecutionReleasesAMarkNothingActsOn(t *testing.T) {
	s := newScenario(t)
	pool := s.pool("stale", "100%", nil)
	// Marked a minute ago by a round that crashed before acting.
	s.node(pool, "stale-marked", small, metav1.Condition{Type: v1alpha1.ConditionDisrupting, Status: metav1.ConditionTrue,
		Reason: string(v1alpha1.DisruptionReasonUnderutilized), Message: "deleting", LastTransitionTime: metav1.NewTime(s.clock.Now().Add(-time.Minute))})
	expect.Applied(t, env.Client, expect.BoundPod(suiteNamespace, "web", "stale-marked", "1", "1Gi"))

	s.round()

	marked := s.claim("stale-marked")
	s.g.Expect(marked.DeletionTimestamp).To(BeNil())
	s.g.Expect(condition(marked, v1alpha1.ConditionDisrupting)).To(Equal("False Cancelled: nothing replaces or deletes the claim any more"))
}

// Disruption applies its own conditions only, under its own field
// manager: the lifecycle's conditions in the same list stay the
// lifecycle's, which can change and remove them, and disruption's stay
// when the lifecycle applies its own.
func TestExecutionWritesOnlyItsOwnConditions(t *testing.T) {
	s := newScenario(t)
	// Empty at once, and held by the budget: a round writes Empty and
	// Consolidatable.
	pool := s.pool("owned", "0", func(d *v1alpha1.Disruption) { d.ConsolidateAfter = &metav1.Duration{} })
	hourAgo := metav1.NewTime(s.clock.Now().Add(-time.Hour))
	lifecycle := func(types ...string) *statusapply.Conditions {
		owned := &statusapply.Conditions{}
		for _, conditionType := range types {
			owned.Conditions = append(owned.Conditions, metav1.Condition{Type: conditionType, Status: metav1.ConditionTrue, Reason: conditionType, LastTransitionTime: hourAgo})
		}
		return owned
	}
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "owned-a", Labels: map[string]string{v1alpha1.LabelNodePool: pool.Name}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: small.Name, CPU: *small.Capacity.Cpu(), Memory: *small.Capacity.Memory()},
		},
	}
	expect.Applied(t, env.Client, claim, expect.ReadyNode("owned-a", "fake://test/owned-a", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: pool.Name}))
	status := struct {
		ProviderID string             `json:"providerID"`
		NodeName   string             `json:"nodeName"`
		Conditions []metav1.Condition `json:"conditions"`
	}{"fake://test/owned-a", "owned-a", lifecycle(v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady).Conditions}
	_, err := statusapply.Apply(s.ctx, env.Client, "NodeClaim", claim.Name, &status, "nodeclaim")
	s.g.Expect(err).NotTo(HaveOccurred())

	s.round()

	written := s.claim("owned-a")
	s.g.Expect(condition(written, v1alpha1.ConditionEmpty)).To(HavePrefix("True Empty: "))
	s.g.Expect(condition(written, v1alpha1.ConditionConsolidatable)).To(HavePrefix("False " + v1alpha1.ConsolidatableReasonDisruptionBudget + ":"))
	managers := map[string]metav1.ManagedFieldsOperationType{}
	for _, entry := range written.ManagedFields {
		if entry.Subresource == "status" {
			managers[entry.Manager] = entry.Operation
		}
	}
	s.g.Expect(managers).To(HaveKeyWithValue(Name, metav1.ManagedFieldsOperationApply), "disruption applies under its own field manager")

	// The lifecycle no longer says Launched: gone, as nobody else owns it;
	// disruption's conditions stay.
	status.Conditions = lifecycle(v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady).Conditions
	_, err = statusapply.Apply(s.ctx, env.Client, "NodeClaim", claim.Name, &status, "nodeclaim")
	s.g.Expect(err).NotTo(HaveOccurred())
	written = s.claim("owned-a")
	s.g.Expect(condition(written, v1alpha1.ConditionLaunched)).To(BeEmpty(), "the lifecycle's condition is the lifecycle's to remove")
	s.g.Expect(condition(written, v1alpha1.ConditionEmpty)).To(HavePrefix("True Empty: "))
	s.g.Expect(condition(written, v1alpha1.ConditionConsolidatable)).To(HavePrefix("False " + v1alpha1.ConsolidatableReasonDisruptionBudget + ":"))
}
