package nodeclaim

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
)

// Registration nominates the pending pods the node was bought for
// (status.nominatedNodeName), and only then takes the unregistered taint
// off, so that kube-scheduler sees the node with their room kept. A pod
// bound elsewhere meanwhile, or nominated by preemption, is left as it is.
func TestRegistrationNominatesThePodsTheNodeWasBoughtForAndUntaintsIt(t *testing.T) {
	s := newScenario(t, "nominate")
	s.c.Nominations = clusterstate.NewNominations(s.clock)
	pending := func(name string) *corev1.Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		s.g.Expect(env.Client.Create(s.ctx, pod)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(s.ctx, pod) })
		return pod
	}
	web, db, preempting := pending("nominate-web"), pending("nominate-db"), pending("nominate-preempting")
	bound := s.pod("nominate-bound", "elsewhere")
	t.Cleanup(func() { _ = env.Client.Delete(s.ctx, bound) })
	preempting.Status.NominatedNodeName = "victims-node"
	s.g.Expect(env.Client.Status().Update(s.ctx, preempting)).To(Succeed())
	s.g.Eventually(func() string {
		seen := &corev1.Pod{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(preempting), seen)
		return seen.Status.NominatedNodeName
	}).Should(Equal("victims-node"))

	s.newClaim("nominate-a")
	s.mustReconcile("nominate-a")
	s.c.Nominations.Plan("nominate-a", []*corev1.Pod{web, db, preempting, bound})
	unregistered := corev1.Taint{Key: v1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule}
	startup := corev1.Taint{Key: "cni-starting", Effect: corev1.TaintEffectNoSchedule}
	s.node("nominate-a", "test://nominate-a", corev1.ConditionTrue, unregistered, startup)
	s.mustReconcile("nominate-a")

	nominated := func(pod *corev1.Pod) string {
		seen := &corev1.Pod{}
		s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(pod), seen)).To(Succeed())
		return seen.Status.NominatedNodeName
	}
	s.g.Expect(nominated(web)).To(Equal("nominate-a"))
	s.g.Expect(nominated(db)).To(Equal("nominate-a"))
	s.g.Expect(nominated(preempting)).To(Equal("victims-node"), "preemption's nomination is the scheduler's")
	s.g.Expect(nominated(bound)).To(BeEmpty(), "a pod bound elsewhere is not nominated")
	node := s.getNode("nominate-a")
	s.g.Expect(node.Spec.Taints).To(ConsistOf(startup), "the unregistered taint is taken off; the node's others stay")
	s.g.Expect(condition(s.claim("nominate-a"), v1alpha1.ConditionRegistered)).To(HaveField("Status", metav1.ConditionTrue))
}
