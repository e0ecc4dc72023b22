package autoscaling

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1beta1 "github.com/claimscale/claimscale/api/autoscaling/v1beta1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// A CapacityBuffer of one 3-cpu chunk keeps a warm node of a pool that
// removes empty nodes after a second; a pod like the chunk runs on that
// node without waiting for a claim (the buffer then buys its room
// again); deleting the buffer lets the spare node go.
func TestCapacityBufferKeepsAWarmNodeUntilItIsDeleted(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "capacitybuffer")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) { pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second })
	s.CreatePodTemplate("chunk", "3")
	buffer := &autoscalingv1beta1.CapacityBuffer{
		ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: s.Namespace},
		Spec: autoscalingv1beta1.CapacityBufferSpec{
			PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "chunk"}, Replicas: harness.Ptr(int32(1)),
		},
	}
	s.G.Expect(env.Client.Create(s.Ctx, buffer)).To(Succeed())

	s.G.Eventually(s.ReadyClaims).Should(Equal(1), "a warm node for the buffer's chunk")
	s.G.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(buffer), buffer)).To(Succeed())
		g.Expect(buffer.Status.Replicas).To(HaveValue(BeEquivalentTo(1)))
		g.Expect(meta.IsStatusConditionTrue(buffer.Status.Conditions, autoscalingv1beta1.ConditionReadyForProvisioning)).To(BeTrue())
		g.Expect(meta.IsStatusConditionTrue(buffer.Status.Conditions, autoscalingv1beta1.ConditionProvisioning)).To(BeTrue())
	}).Should(Succeed())
	s.G.Consistently(func() int { return len(s.Claims()) }, 3*time.Second, 250*time.Millisecond).Should(Equal(1),
		"empty past consolidateAfter, kept and not doubled")
	warm := s.Nodes()
	s.G.Expect(warm).To(HaveLen(1))

	s.CreateDeployment("burst", 1, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("burst") }, 2*time.Second, 50*time.Millisecond).Should(Equal(1),
		"the pod runs at once: no claim to wait for")
	s.G.Expect(s.Pods("burst")[0].Spec.NodeName).To(Equal(warm[0].Name), "on the warm node")
	s.G.Eventually(s.ReadyClaims).Should(Equal(2), "the buffer's room is bought again")

	s.G.Expect(env.Client.Delete(s.Ctx, buffer)).To(Succeed())
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(Equal(1), "without the buffer the spare node goes")
	s.G.Expect(s.Claims()[0].Status.NodeName).To(Equal(warm[0].Name), "the node that runs the pod stays")
}
