package e2e

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
)

// killKubelet makes a node look like one whose kubelet died: kwok stops
// running it (it manages only nodes with its annotation; while it does, it
// sets Ready back to True) and its Ready condition turns Unknown, as the
// node lifecycle controller would write it, since the given time.
func (s *scenario) killKubelet(name string, since time.Time) {
	s.t.Helper()
	s.g.Eventually(func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(s.ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		patch := client.MergeFrom(node.DeepCopy())
		delete(node.Annotations, testenv.KwokNodeAnnotation)
		return env.Client.Patch(s.ctx, node, patch)
	}).Should(Succeed())
	s.g.Eventually(func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(s.ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == corev1.NodeReady {
				node.Status.Conditions[i] = corev1.NodeCondition{
					Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
					Message:           "Kubelet stopped posting node status.",
					LastHeartbeatTime: metav1.NewTime(since), LastTransitionTime: metav1.NewTime(since),
				}
			}
		}
		return env.Client.Status().Update(s.ctx, node)
	}).Should(Succeed())
	// kwok no longer sets it back.
	s.g.Consistently(func() corev1.ConditionStatus {
		node := &corev1.Node{}
		_ = env.Client.Get(s.ctx, client.ObjectKey{Name: name}, node)
		for _, condition := range node.Status.Conditions {
			if condition.Type == corev1.NodeReady {
				return condition.Status
			}
		}
		return ""
	}, time.Second, 100*time.Millisecond).Should(Equal(corev1.ConditionUnknown))
}

func (s *scenario) repairAllowed() *metav1.Condition {
	pool := &v1alpha1.NodePool{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, pool)).To(Succeed())
	return meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionRepairAllowed)
}

// A node whose kubelet died is replaced once it has been Unknown for
// repair.after: the replacement first, then the dead node is drained as far
// as it can be and deleted, and its pod runs again on the replacement.
func TestNodeWithADeadKubeletIsReplacedAfterRepairAfter(t *testing.T) {
	startOperator(t, operatorOptions{})
	s := newScenario(t, "repair")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Repair = &v1alpha1.Repair{After: &metav1.Duration{Duration: 30 * time.Second}, MaxUnhealthy: "50%", Budget: "1"}
	})
	// One 3-cpu pod per 4-cpu node: two nodes.
	s.createDeployment("fleet", 2, "3", nil)
	s.g.Eventually(func() int { return s.runningPods("fleet") }).Should(Equal(2))
	s.g.Eventually(s.readyClaims).Should(Equal(2))
	victim := s.claims()[0]
	survivor := s.claims()[1]

	// Unknown for 25s of the 30s already. Truncated to the second, as
	// the API server stores condition times: the controller counts from
	// the stored time, so the test must too.
	died := time.Now().Add(-25 * time.Second).Truncate(time.Second)
	s.killKubelet(victim.Status.NodeName, died)
	s.g.Consistently(func() bool {
		claim := &v1alpha1.NodeClaim{}
		return env.Client.Get(s.ctx, client.ObjectKeyFromObject(&victim), claim) == nil && claim.DeletionTimestamp.IsZero()
	}, 2*time.Second, 200*time.Millisecond).Should(BeTrue(), "not before repair.after")

	s.g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(s.ctx, client.ObjectKeyFromObject(&victim), &v1alpha1.NodeClaim{}))
	}).Should(BeTrue(), "the dead node's claim is gone")
	repairedAfter := time.Since(died)
	t.Logf("the dead node's claim was gone %s after its kubelet stopped", repairedAfter.Round(100*time.Millisecond))
	s.g.Expect(repairedAfter).To(BeNumerically(">=", 30*time.Second))
	s.g.Eventually(func() error {
		return env.Client.Get(s.ctx, client.ObjectKey{Name: victim.Status.NodeName}, &corev1.Node{})
	}).ShouldNot(Succeed(), "the dead Node is deleted")
	s.g.Eventually(func() int { return s.runningPods("fleet") }).Should(Equal(2), "its pod runs on the replacement")
	s.g.Expect(eventsOf(s.g, "NodeClaim", victim.Name)).To(ContainElement(And(HavePrefix("Unhealthy: "), ContainSubstring("Ready=Unknown"))))
	var names []string
	for _, claim := range s.claims() {
		names = append(names, claim.Name)
	}
	s.g.Expect(names).To(HaveLen(2))
	s.g.Expect(names).To(ContainElement(survivor.Name))
	replacement := names[0]
	if replacement == survivor.Name {
		replacement = names[1]
	}
	s.g.Expect(eventsOf(s.g, "NodeClaim", victim.Name)).To(ContainElement(ContainSubstring("replaced by "+replacement)), "the replacement was made for it")
	s.g.Expect(s.repairAllowed()).To(HaveField("Status", metav1.ConditionTrue))
}

// When more of the pool is unhealthy than maxUnhealthy allows, the cause
// is likely not the nodes: nothing is replaced, and the pool says why.
func TestRepairPausesWhenMoreThanMaxUnhealthyOfThePoolIsUnhealthy(t *testing.T) {
	startOperator(t, operatorOptions{})
	s := newScenario(t, "partition")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Repair = &v1alpha1.Repair{After: &metav1.Duration{Duration: 30 * time.Second}, MaxUnhealthy: "20%", Budget: "2"}
	})
	s.createDeployment("fleet", 2, "3", nil)
	s.g.Eventually(func() int { return s.runningPods("fleet") }).Should(Equal(2))
	s.g.Eventually(s.readyClaims).Should(Equal(2))
	claims := s.claims()

	// Both due 5s from now: the second dies before the first is due, and
	// from then on only maxUnhealthy holds them.
	died := time.Now().Add(-25 * time.Second)
	for _, claim := range claims {
		s.killKubelet(claim.Status.NodeName, died)
	}
	s.g.Eventually(func() string {
		if condition := s.repairAllowed(); condition != nil && condition.Status == metav1.ConditionFalse {
			return condition.Reason + ": " + condition.Message
		}
		return ""
	}).Should(And(HavePrefix("TooManyUnhealthy: "), ContainSubstring("2 of 2 nodes are unhealthy")))
	s.g.Consistently(func() int {
		going := 0
		for _, claim := range s.claims() {
			if !claim.DeletionTimestamp.IsZero() || claim.Annotations["claimscale.io/replaces"] != "" {
				going++
			}
		}
		return going + len(s.claims()) - len(claims)
	}, 8*time.Second, 250*time.Millisecond).Should(BeZero(), "nothing replaced, nothing deleted, also past repair.after")
	s.g.Expect(time.Since(died)).To(BeNumerically(">", 30*time.Second))
	s.g.Expect(eventsOf(s.g, "NodePool", s.name)).To(ContainElement(HavePrefix("TooManyUnhealthy: ")))
	// cleanup deletes the claims: termination must finish on dead nodes.
}
