package provisioning

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/testenv/expect"
)

// asleepClaim is a claim of pool general whose c2 machine registered,
// then slept: the suspend annotation set, Suspended=True, its providerID
// kept and its Node gone, as the nodeclaim lifecycle leaves it.
func asleepClaim(name string) *v1alpha1.NodeClaim {
	now := metav1.Now()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{v1alpha1.LabelNodePool: "general"},
			Annotations: map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)},
		},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "general"},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
		Status: v1alpha1.NodeClaimStatus{ProviderID: "fake://test/" + name, NodeName: name},
	}
	for _, condition := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized} {
		claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: condition, LastTransitionTime: now})
	}
	claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSuspended, LastTransitionTime: now,
	})
	return claim
}

func TestRoundWakesASleepingClaimInsteadOfCreatingOne(t *testing.T) {
	r := newRound(t, c2, c4)
	r.provisioner.Decisions = decisions.NewStore(false)
	expect.Applied(t, env.Client, expect.Provider("sim"), expect.Pool("general", "sim", "c2", "c4"),
		asleepClaim("general-sleepy"), expect.PendingPod(namespace, "web", "1", "1Gi"))

	r.run()

	claims := expect.Claims(t, env.Client, "general")
	r.g.Expect(claims).To(HaveLen(1), "the sleeping machine holds the pod: no new claim")
	r.g.Expect(claims[0].Name).To(Equal("general-sleepy"))
	r.g.Expect(claims[0].Annotations).NotTo(HaveKey(v1alpha1.AnnotationSuspend), "woken by removing the annotation")
	r.g.Expect(expect.Events(r.recorder)).To(ContainElements(
		ContainSubstring("Woken woken: sleeping claim general-sleepy"),
		And(ContainSubstring("Nominated"), ContainSubstring("woken: sleeping claim general-sleepy")),
	))
	record, ok := r.provisioner.Decisions.Pod(namespace, "web")
	r.g.Expect(ok).To(BeTrue())
	r.g.Expect(record.Outcome).To(Equal(decisions.PodWoken))
	r.g.Expect(record.Reason).To(Equal("woken: sleeping claim general-sleepy"))

	// Waking, the claim is in flight: the next round buys nothing either.
	r.run()
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1), "the waking claim holds the pod")
}

// A claim that changed since the round read it is not woken, and its pods
// get no new claim this round; the round fails with the conflict, so the
// controller runs the next one on its backoff (a second), not at the
// periodic round 30 s later, and it decides on what the claim is then.
func TestAWakeThatConflictsIsNotReplacedInTheSameRound(t *testing.T) {
	r := newRound(t, c2)
	pool := expect.Pool("general", "sim", "c2")
	claim := asleepClaim("general-sleepy")
	pod := expect.PendingPod(namespace, "web", "1", "1Gi")
	expect.Applied(t, env.Client, expect.Provider("sim"), pool, claim, pod)
	stale := claim.DeepCopy()
	// Someone else writes the claim after the round read it.
	changed := claim.DeepCopy()
	changed.Labels["example.com/touched"] = "yes"
	r.g.Expect(env.Client.Patch(r.ctx, changed, client.MergeFrom(claim))).To(Succeed())

	newNode := scheduling.NewNode{Name: "general-new-1", Pool: "general", Shape: scheduling.Shape{Name: "c2"}, Pods: []*corev1.Pod{pod}, Wake: stale.Name}
	err := r.provisioner.createClaims(r.ctx, map[string]*v1alpha1.NodePool{"general": pool},
		map[string]*v1alpha1.NodeClaim{stale.Name: stale}, scheduling.Result{NewNodes: []scheduling.NewNode{newNode}})
	r.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the round reports the conflict, and is retried soon: %v", err)

	claims := expect.Claims(t, env.Client, "general")
	r.g.Expect(claims).To(HaveLen(1), "no new claim for the pods of a wake that conflicted")
	r.g.Expect(claims[0].Annotations).To(HaveKey(v1alpha1.AnnotationSuspend), "the changed claim was not woken")

	// Next round, on the claim as it is now, it is woken.
	r.run()
	var now v1alpha1.NodeClaim
	r.g.Expect(env.Client.Get(r.ctx, client.ObjectKeyFromObject(claim), &now)).To(Succeed())
	r.g.Expect(now.Annotations).NotTo(HaveKey(v1alpha1.AnnotationSuspend))
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1))
}

// A sleeping claim deleted after the round read it cannot be woken: its
// pods get a new machine in the same round.
func TestAWakeOfAClaimGoneMakesANewClaim(t *testing.T) {
	r := newRound(t, c2)
	pool := expect.Pool("general", "sim", "c2")
	claim := asleepClaim("general-sleepy")
	pod := expect.PendingPod(namespace, "web", "1", "1Gi")
	expect.Applied(t, env.Client, expect.Provider("sim"), pool, claim, pod)
	stale := claim.DeepCopy()
	r.g.Expect(env.Client.Delete(r.ctx, claim)).To(Succeed())

	newNode := scheduling.NewNode{Name: "general-new-1", Pool: "general", Shape: scheduling.Shape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")}, Pods: []*corev1.Pod{pod}, Wake: stale.Name}
	err := r.provisioner.createClaims(r.ctx, map[string]*v1alpha1.NodePool{"general": pool},
		map[string]*v1alpha1.NodeClaim{stale.Name: stale}, scheduling.Result{NewNodes: []scheduling.NewNode{newNode}})
	r.g.Expect(err).NotTo(HaveOccurred(), "a claim that is gone is no failure: its pods got a new claim")

	claims := expect.Claims(t, env.Client, "general")
	r.g.Expect(claims).To(HaveLen(1))
	r.g.Expect(claims[0].Name).NotTo(Equal("general-sleepy"), "a new claim for the pods of the claim that is gone")
}
