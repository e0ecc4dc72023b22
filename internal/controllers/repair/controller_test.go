package repair

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/statusapply"
)

func repairAfter(after time.Duration, maxUnhealthy, budget string) *v1alpha1.Repair {
	return &v1alpha1.Repair{After: &metav1.Duration{Duration: after}, MaxUnhealthy: maxUnhealthy, Budget: budget}
}

func TestNodeNotReadyLongerThanRepairAfterGetsAReplacementAndIsDeleted(t *testing.T) {
	s := newScenario(t, "notready", repairAfter(10*time.Minute, "20%", "1"))
	now := s.clock.Now()
	for _, name := range []string{"notready-a", "notready-b", "notready-c", "notready-d"} {
		s.node(name, corev1.ConditionTrue, now.Add(-time.Hour))
	}
	s.node("notready-dead", corev1.ConditionFalse, now.Add(-11*time.Minute))

	s.reconcile()

	s.g.Expect(s.deleted()).To(ConsistOf("notready-dead"))
	replacement, ok := s.replacements()["notready-dead"]
	s.g.Expect(ok).To(BeTrue(), "a replacement names the claim it replaces")
	s.g.Expect(replacement.Annotations).To(HaveKeyWithValue("claimscale.io/disruption-reason", "Unhealthy"))
	s.g.Expect(replacement.Spec.Shape.Name).To(Equal("c2"))
	s.g.Expect(replacement.Spec.Requirements.Resources.Cpu().String()).To(Equal("1500m"))
	s.g.Expect(replacement.Labels).To(HaveKeyWithValue(v1alpha1.LabelNodePool, s.pool.Name))

	disrupting := s.claim("notready-dead").Status.Conditions
	s.g.Expect(disrupting).To(ContainElement(And(
		HaveField("Type", v1alpha1.ConditionDisrupting), HaveField("Status", metav1.ConditionTrue),
		HaveField("Reason", "Unhealthy"), HaveField("Message", ContainSubstring("Ready=False")),
	)))
	s.g.Expect(s.recorded()).To(ContainElement(And(ContainSubstring("Unhealthy"), ContainSubstring("replaced by "+replacement.Name))))
	s.g.Expect(s.repairAllowed()).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", ReasonWithinThreshold)))

	s.g.Expect(valueOf(metrics.NodesRepaired.WithLabelValues(s.pool.Name))).To(Equal(1.0))
	s.g.Expect(valueOf(metrics.NodeClaimsCreated.WithLabelValues(s.pool.Name, metrics.ReasonRepair))).To(Equal(1.0))

	// The next check makes no second replacement.
	s.reconcile()
	s.g.Expect(s.claims()).To(HaveLen(6))
	s.g.Expect(valueOf(metrics.NodesRepaired.WithLabelValues(s.pool.Name))).To(Equal(1.0))
}

func TestNodeUnknownForLessThanRepairAfterIsKeptUntilItIsDue(t *testing.T) {
	s := newScenario(t, "unknown", repairAfter(10*time.Minute, "50%", "1"))
	now := s.clock.Now()
	s.node("unknown-a", corev1.ConditionTrue, now.Add(-time.Hour))
	s.node("unknown-b", corev1.ConditionUnknown, now.Add(-4*time.Minute))

	result := s.reconcile()
	s.g.Expect(s.deleted()).To(BeEmpty())
	s.g.Expect(result.RequeueAfter).To(Equal(6*time.Minute), "the pool is looked at again when the node is due")

	s.clock.Step(6*time.Minute + time.Second)
	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("unknown-b"))
	s.g.Expect(s.claim("unknown-b").Status.Conditions).To(ContainElement(HaveField("Message", ContainSubstring("Ready=Unknown (NodeStatusUnknown)"))))
}

func TestNodeThatRecoversBeforeRepairAfterIsKept(t *testing.T) {
	s := newScenario(t, "recovers", repairAfter(10*time.Minute, "100%", "1"))
	now := s.clock.Now()
	s.node("recovers-a", corev1.ConditionFalse, now.Add(-9*time.Minute))
	s.setReady("recovers-a", corev1.ConditionTrue, now)
	s.clock.Step(time.Hour)

	s.reconcile()
	s.g.Expect(s.deleted()).To(BeEmpty())
	s.g.Expect(s.replacements()).To(BeEmpty())
}

func TestHeartbeatLeaseNotRenewedForLongerThanRepairAfterCountsAsUnhealthy(t *testing.T) {
	s := newScenario(t, "lease", repairAfter(5*time.Minute, "100%", "2"))
	now := s.clock.Now()
	// Both nodes still say Ready: nobody marked them Unknown (no node
	// lifecycle controller), but one kubelet stopped renewing its lease.
	s.node("lease-fresh", corev1.ConditionTrue, now.Add(-time.Hour))
	s.lease("lease-fresh", now.Add(-5*time.Second))
	s.node("lease-stale", corev1.ConditionTrue, now.Add(-time.Hour))
	s.lease("lease-stale", now.Add(-6*time.Minute))

	result := s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("lease-stale"))
	s.g.Expect(s.claim("lease-stale").Status.Conditions).To(ContainElement(HaveField("Message", ContainSubstring("has not renewed its heartbeat lease"))))
	s.g.Expect(result.RequeueAfter).To(Equal(35*time.Second), "the fresh lease is looked at again when it expires")
}

func TestRepairPausesWhileMoreThanMaxUnhealthyOfThePoolIsUnhealthy(t *testing.T) {
	s := newScenario(t, "partition", repairAfter(10*time.Minute, "20%", "5"))
	now := s.clock.Now()
	for _, name := range []string{"partition-a", "partition-b", "partition-c"} {
		s.node(name, corev1.ConditionTrue, now.Add(-time.Hour))
	}
	s.node("partition-d", corev1.ConditionUnknown, now.Add(-20*time.Minute))
	s.node("partition-e", corev1.ConditionUnknown, now.Add(-20*time.Minute))

	s.reconcile()
	s.g.Expect(s.deleted()).To(BeEmpty(), "2 of 5 unhealthy is more than 20% (1 node)")
	s.g.Expect(s.replacements()).To(BeEmpty())
	condition := s.repairAllowed()
	s.g.Expect(condition).NotTo(BeNil())
	s.g.Expect(condition.Status).To(Equal(metav1.ConditionFalse))
	s.g.Expect(condition.Reason).To(Equal(ReasonTooManyUnhealthy))
	s.g.Expect(condition.Message).To(ContainSubstring("2 of 5 nodes are unhealthy"))
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring(ReasonTooManyUnhealthy)))
	s.g.Expect(valueOf(metrics.RepairPaused.WithLabelValues(s.pool.Name))).To(Equal(1.0))
	s.g.Expect(valueOf(metrics.RepairUnhealthyNodes.WithLabelValues(s.pool.Name))).To(Equal(2.0))

	// One comes back: the other is within the share and is repaired.
	s.setReady("partition-e", corev1.ConditionTrue, now)
	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("partition-d"))
	s.g.Expect(s.repairAllowed().Status).To(Equal(metav1.ConditionTrue))
	s.g.Expect(valueOf(metrics.RepairPaused.WithLabelValues(s.pool.Name))).To(Equal(0.0))
}

func TestRepairBudgetBoundsNodesUnderRepairAtOnce(t *testing.T) {
	s := newScenario(t, "budget", repairAfter(10*time.Minute, "100%", "1"))
	now := s.clock.Now()
	s.node("budget-a", corev1.ConditionTrue, now.Add(-time.Hour))
	s.node("budget-older", corev1.ConditionFalse, now.Add(-30*time.Minute))
	s.node("budget-newer", corev1.ConditionFalse, now.Add(-20*time.Minute))

	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("budget-older"), "the longest broken goes first")

	// While it terminates, the budget is spent.
	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("budget-older"))

	// Once it is gone, the next one goes.
	older := s.claim("budget-older")
	patch := client.MergeFrom(older.DeepCopy())
	older.Finalizers = nil
	s.g.Expect(env.Client.Patch(s.ctx, older, patch)).To(Succeed())
	s.g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(s.ctx, clientKey("budget-older"), older))
	}).Should(BeTrue())
	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("budget-newer"))
}

func TestReplacementMadeBeforeACrashIsReused(t *testing.T) {
	s := newScenario(t, "crash", repairAfter(10*time.Minute, "100%", "1"))
	now := s.clock.Now()
	s.node("crash-dead", corev1.ConditionFalse, now.Add(-time.Hour))
	s.node("crash-made", corev1.ConditionTrue, now)
	made := s.claim("crash-made")
	patch := client.MergeFrom(made.DeepCopy())
	made.Annotations = map[string]string{"claimscale.io/replaces": "crash-dead", "claimscale.io/disruption-reason": "Unhealthy"}
	s.g.Expect(env.Client.Patch(s.ctx, made, patch)).To(Succeed())

	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("crash-dead"))
	s.g.Expect(s.claims()).To(HaveLen(2), "no second replacement")
	s.g.Expect(s.recorded()).To(ContainElement(ContainSubstring("replaced by crash-made")))
}

func TestNodeThatNeverBecameReadyIsLeftToTheRegistrationTimeout(t *testing.T) {
	s := newScenario(t, "neverready", repairAfter(time.Minute, "100%", "1"))
	s.nodeOnce("neverready-a", corev1.ConditionFalse, s.clock.Now().Add(-time.Hour), false)

	s.reconcile()
	s.g.Expect(s.deleted()).To(BeEmpty())
	s.g.Expect(s.replacements()).To(BeEmpty())
}

func TestClaimMarkedUnhealthyBeforeACrashIsDeletedWithoutSpendingMoreBudget(t *testing.T) {
	s := newScenario(t, "resume", repairAfter(10*time.Minute, "100%", "1"))
	now := s.clock.Now()
	s.node("resume-marked", corev1.ConditionFalse, now.Add(-time.Hour))
	s.node("resume-next", corev1.ConditionFalse, now.Add(-30*time.Minute))
	marked := s.claim("resume-marked")
	marked.SetCondition(v1alpha1.ConditionDisrupting, metav1.ConditionTrue, "Unhealthy", "replaced by resume-x", now)
	s.g.Expect(env.Client.Status().Update(s.ctx, marked)).To(Succeed())

	s.reconcile()
	s.g.Expect(s.deleted()).To(ConsistOf("resume-marked"), "the marked claim holds the budget of one")
	s.g.Expect(s.replacements()).To(HaveKey("resume-marked"))
}

func TestPoolWithoutRepairNeverReplacesNodes(t *testing.T) {
	s := newScenario(t, "norepair", nil)
	s.node("norepair-dead", corev1.ConditionUnknown, s.clock.Now().Add(-24*time.Hour))

	result := s.reconcile()
	s.g.Expect(s.deleted()).To(BeEmpty())
	s.g.Expect(s.replacements()).To(BeEmpty())
	s.g.Expect(s.repairAllowed()).To(BeNil())
	s.g.Expect(result.RequeueAfter).To(BeZero())
}

func TestRepairSettingsAreValidatedByTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		name   string
		repair v1alpha1.Repair
		refuse string
	}{
		{"after below the floor", v1alpha1.Repair{After: &metav1.Duration{Duration: 10 * time.Second}}, "repair.after must be at least 30s"},
		{"maxUnhealthy over 100%", v1alpha1.Repair{MaxUnhealthy: "120%"}, "repair.maxUnhealthy must be"},
		{"budget not a number", v1alpha1.Repair{Budget: "one"}, "repair.budget must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &v1alpha1.NodePool{
				ObjectMeta: metav1.ObjectMeta{Name: "invalid-" + strings.ReplaceAll(tc.name, " ", "-")},
				Spec: v1alpha1.NodePoolSpec{
					ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
					Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2"}}},
					Repair:      &tc.repair,
				},
			}
			err := env.Client.Create(t.Context(), pool)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.refuse))
		})
	}
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2"}}},
			Repair:      &v1alpha1.Repair{},
		},
	}
	g.Expect(env.Client.Create(t.Context(), pool)).To(Succeed())
	defer env.Client.Delete(t.Context(), pool)
	g.Expect(pool.Spec.Repair.After.Duration).To(Equal(10 * time.Minute))
	g.Expect(pool.Spec.Repair.MaxUnhealthy).To(Equal("20%"))
	g.Expect(pool.Spec.Repair.Budget).To(Equal("1"))
}

// valueOf reads a counter's or a gauge's value.
func valueOf(metric prometheus.Metric) float64 {
	var m dto.Metric
	if err := metric.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// RepairAllowed is repair's alone in the pool's conditions: applied under
// its own field manager next to the nodepool controller's Ready, and
// removed when the pool no longer repairs, Ready staying.
func TestRepairAllowedIsRepairsAloneAndGoesWithRepair(t *testing.T) {
	s := newScenario(t, "owned", repairAfter(10*time.Minute, "100%", "1"))
	ready := statusapply.Conditions{Conditions: []metav1.Condition{{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "ready",
		LastTransitionTime: metav1.NewTime(s.clock.Now()),
	}}}
	_, err := statusapply.Apply(s.ctx, env.Client, "NodePool", s.pool.Name, &ready, "nodepool")
	s.g.Expect(err).NotTo(HaveOccurred())

	s.reconcile()
	s.g.Expect(s.repairAllowed()).To(HaveField("Status", metav1.ConditionTrue))
	pool := &v1alpha1.NodePool{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(s.pool), pool)).To(Succeed())
	s.g.Expect(pool.ManagedFields).To(ContainElement(And(HaveField("Manager", Name), HaveField("Subresource", "status"),
		HaveField("Operation", metav1.ManagedFieldsOperationApply))), "repair applies under its own field manager")

	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Repair = nil
	s.g.Expect(env.Client.Patch(s.ctx, pool, patch)).To(Succeed())
	s.reconcile()

	s.g.Expect(s.repairAllowed()).To(BeNil(), "a pool that does not repair says nothing of it")
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(s.pool), pool)).To(Succeed())
	s.g.Expect(pool.Status.Conditions).To(ConsistOf(HaveField("Type", v1alpha1.ConditionReady)), "the nodepool controller's condition stays")
}

// A node whose machine is being put to sleep goes NotReady as it stops:
// that is no sickness, and repair leaves it to the lifecycle.
func TestNodeBeingPutToSleepIsNotRepaired(t *testing.T) {
	s := newScenario(t, "sleeping", repairAfter(10*time.Minute, "100%", "1"))
	now := s.clock.Now()
	s.node("sleeping-a", corev1.ConditionTrue, now.Add(-time.Hour))
	s.node("sleeping-stopped", corev1.ConditionFalse, now.Add(-11*time.Minute))
	claim := s.claim("sleeping-stopped")
	patch := client.MergeFrom(claim.DeepCopy())
	claim.Annotations = map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)}
	s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())

	s.reconcile()

	s.g.Expect(s.deleted()).To(BeEmpty())
	s.g.Expect(s.replacements()).To(BeEmpty())
}
