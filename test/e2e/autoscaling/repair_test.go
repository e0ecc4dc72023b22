package autoscaling

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// A node whose kubelet died is replaced once it has been Unknown for
// repair.after: the replacement first, then the dead node is drained as far
// as it can be and deleted, and its pod runs again on the replacement.
func TestNodeWithADeadKubeletIsReplacedAfterRepairAfter(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "repair")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Repair = &v1alpha1.Repair{After: &metav1.Duration{Duration: 30 * time.Second}, MaxUnhealthy: "50%", Budget: "1"}
	})
	// One 3-cpu pod per 4-cpu node: two nodes.
	s.CreateDeployment("fleet", 2, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("fleet") }).Should(Equal(2))
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	victim := s.Claims()[0]
	survivor := s.Claims()[1]

	// Unknown for 25s of the 30s already. Truncated to the second, as
	// the API server stores condition times: the controller counts from
	// the stored time, so the test must too.
	died := time.Now().Add(-25 * time.Second).Truncate(time.Second)
	s.KillKubelet(victim.Status.NodeName, died)
	s.G.Consistently(func() bool {
		claim := &v1alpha1.NodeClaim{}
		return env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&victim), claim) == nil && claim.DeletionTimestamp.IsZero()
	}, 2*time.Second, 200*time.Millisecond).Should(BeTrue(), "not before repair.after")

	s.G.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&victim), &v1alpha1.NodeClaim{}))
	}).Should(BeTrue(), "the dead node's claim is gone")
	repairedAfter := time.Since(died)
	t.Logf("the dead node's claim was gone %s after its kubelet stopped", repairedAfter.Round(100*time.Millisecond))
	s.G.Expect(repairedAfter).To(BeNumerically(">=", 30*time.Second))
	s.G.Eventually(func() error {
		return env.Client.Get(s.Ctx, client.ObjectKey{Name: victim.Status.NodeName}, &corev1.Node{})
	}).ShouldNot(Succeed(), "the dead Node is deleted")
	s.G.Eventually(func() int { return s.RunningPods("fleet") }).Should(Equal(2), "its pod runs on the replacement")
	s.G.Expect(harness.EventsOf(s.G, "NodeClaim", victim.Name)).To(ContainElement(And(HavePrefix("Unhealthy: "), ContainSubstring("Ready=Unknown"))))
	var names []string
	for _, claim := range s.Claims() {
		names = append(names, claim.Name)
	}
	s.G.Expect(names).To(HaveLen(2))
	s.G.Expect(names).To(ContainElement(survivor.Name))
	replacement := names[0]
	if replacement == survivor.Name {
		replacement = names[1]
	}
	s.G.Expect(harness.EventsOf(s.G, "NodeClaim", victim.Name)).To(ContainElement(ContainSubstring("replaced by "+replacement)), "the replacement was made for it")
	s.G.Expect(s.RepairAllowed()).To(HaveField("Status", metav1.ConditionTrue))
}

// When more of the pool is unhealthy than maxUnhealthy allows, the cause
// is likely not the nodes: nothing is replaced, and the pool says why.
func TestRepairPausesWhenMoreThanMaxUnhealthyOfThePoolIsUnhealthy(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "partition")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Repair = &v1alpha1.Repair{After: &metav1.Duration{Duration: 30 * time.Second}, MaxUnhealthy: "20%", Budget: "2"}
	})
	s.CreateDeployment("fleet", 2, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("fleet") }).Should(Equal(2))
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	claims := s.Claims()

	// Both due 5s from now: the second dies before the first is due, and
	// from then on only maxUnhealthy holds them.
	died := time.Now().Add(-25 * time.Second)
	for _, claim := range claims {
		s.KillKubelet(claim.Status.NodeName, died)
	}
	s.G.Eventually(func() string {
		if condition := s.RepairAllowed(); condition != nil && condition.Status == metav1.ConditionFalse {
			return condition.Reason + ": " + condition.Message
		}
		return ""
	}).Should(And(HavePrefix("TooManyUnhealthy: "), ContainSubstring("2 of 2 nodes are unhealthy")))
	s.G.Consistently(func() int {
		going := 0
		for _, claim := range s.Claims() {
			if !claim.DeletionTimestamp.IsZero() || claim.Annotations["claimscale.io/replaces"] != "" {
				going++
			}
		}
		return going + len(s.Claims()) - len(claims)
	}, 8*time.Second, 250*time.Millisecond).Should(BeZero(), "nothing replaced, nothing deleted, also past repair.after")
	s.G.Expect(time.Since(died)).To(BeNumerically(">", 30*time.Second))
	s.G.Expect(harness.EventsOf(s.G, "NodePool", s.Name)).To(ContainElement(HavePrefix("TooManyUnhealthy: ")))
	// cleanup deletes the claims: termination must finish on dead nodes.
}
