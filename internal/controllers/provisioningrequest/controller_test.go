package provisioningrequest

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

const (
	checkCapacity = autoscalingv1.ClassCheckCapacity
	atomic        = autoscalingv1.ClassBestEffortAtomicScaleUp
)

func TestCheckCapacityFindsRoomOnExistingNodesAndBooksIt(t *testing.T) {
	f := newFixture(t)
	f.pool(10)
	expect.Applied(t, env.Client, expect.ReadyNode("general-a", "fake://test/general-a", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: "general"}))
	f.template("worker", "500m")
	f.request("fits", checkCapacity, "worker", 2, nil)

	f.reconcile("fits")

	f.g.Expect(f.condition("fits", autoscalingv1.ConditionAccepted).Status).To(Equal(metav1.ConditionTrue))
	provisioned := f.condition("fits", autoscalingv1.ConditionProvisioned)
	f.g.Expect(provisioned.Status).To(Equal(metav1.ConditionTrue), provisioned.Message)
	f.g.Expect(provisioned.Reason).To(Equal(autoscalingv1.ReasonCapacityIsFound))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty(), "check-capacity buys nothing")
	booked := f.controller.Bookings.Placeholders(f.ctx)
	f.g.Expect(booked).To(HaveLen(2), "both pods' room is booked")
	f.g.Expect(pinnedTo(booked[0])).To(Equal("general-a"))

	// The booked cpu is taken: a second request of three more does not
	// fit the one cpu left, and is told so.
	f.request("too-much", checkCapacity, "worker", 3, nil)
	f.reconcile("too-much")
	notFound := f.condition("too-much", autoscalingv1.ConditionProvisioned)
	f.g.Expect(notFound.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(notFound.Reason).To(Equal(autoscalingv1.ReasonCapacityIsNotFound))
	f.g.Expect(notFound.Message).To(ContainSubstring("fit nowhere"))
}

func TestBookedRoomIsKeptFromOtherPendingPods(t *testing.T) {
	f := newFixture(t)
	f.pool(10)
	expect.Applied(t, env.Client, expect.ReadyNode("general-a", "fake://test/general-a", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: "general"}))
	f.template("worker", "1500m")
	f.request("booked", checkCapacity, "worker", 1, nil)
	f.reconcile("booked")
	f.g.Expect(f.condition("booked", autoscalingv1.ConditionProvisioned).Status).To(Equal(metav1.ConditionTrue))

	// A pending pod that would fit the node but for the booking gets a
	// node of its own.
	expect.Applied(t, env.Client, expect.PendingPod("default", "web", "1", "1Gi"))
	f.g.Expect(f.provisioner.Provision(f.ctx)).To(Succeed())
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1), "the booked room is not the pending pod's")
}

func TestAtomicScaleUpBuysEveryNodeAtOnceAndIsProvisionedWhenAllAreReady(t *testing.T) {
	f := newFixture(t)
	f.pool(5)
	f.template("trainer", "1500m")
	f.request("train", atomic, "trainer", 3, nil)

	f.reconcile("train")

	claims := expect.Claims(t, env.Client, "general")
	f.g.Expect(claims).To(HaveLen(3), "one node per pod, bought together")
	for _, claim := range claims {
		f.g.Expect(claim.Annotations).To(And(
			HaveKeyWithValue(v1alpha1.AnnotationProvisioningRequest, f.namespace+"/train"),
			HaveKeyWithValue(v1alpha1.AnnotationProvisioningRequestClaims, "3")))
	}
	waiting := f.condition("train", autoscalingv1.ConditionProvisioned)
	f.g.Expect(waiting.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(waiting.Reason).To(Equal(autoscalingv1.ReasonCapacityIsBeingProvisioned))
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(HaveLen(3), "the room is booked while the nodes boot")

	// The provisioning round does not buy the request's nodes again.
	f.g.Expect(f.provisioner.Provision(f.ctx)).To(Succeed())
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(3))

	f.ready(&claims[0])
	f.ready(&claims[1])
	f.reconcile("train")
	f.g.Expect(f.condition("train", autoscalingv1.ConditionProvisioned).Status).To(Equal(metav1.ConditionFalse), "two of three Ready is not provisioned")

	f.ready(&claims[2])
	f.reconcile("train")
	provisioned := f.condition("train", autoscalingv1.ConditionProvisioned)
	f.g.Expect(provisioned.Status).To(Equal(metav1.ConditionTrue), provisioned.Message)
	f.g.Expect(provisioned.Reason).To(Equal(autoscalingv1.ReasonCapacityIsProvisioned))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(3), "nothing more bought")

	// A pod of the request bound to the third node takes the room booked
	// there, and only there.
	f.consumer("trainer-0", "train", claims[2].Name, "1500m")
	booked := f.controller.Bookings.Placeholders(f.ctx)
	f.g.Expect(booked).To(HaveLen(2))
	for _, pod := range booked {
		f.g.Expect(pinnedTo(pod)).To(BeElementOf(claims[0].Name, claims[1].Name))
	}
}

func TestAtomicScaleUpLargerThanThePoolFailsAndBuysNothing(t *testing.T) {
	f := newFixture(t)
	f.pool(2)
	f.template("trainer", "1500m")
	f.request("huge", atomic, "trainer", 3, nil)

	f.reconcile("huge")

	failed := f.condition("huge", autoscalingv1.ConditionFailed)
	f.g.Expect(failed.Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(failed.Reason).To(Equal(autoscalingv1.ReasonCapacityIsNotFound))
	f.g.Expect(failed.Message).To(And(ContainSubstring("larger than the pools can hold"), ContainSubstring("limit")))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty(), "not one node of three")
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(BeEmpty())
}

func TestAtomicScaleUpThatCannotFitNowWaitsWithoutBuying(t *testing.T) {
	f := newFixture(t)
	f.pool(3)
	// One node of the pool's three is taken by others.
	expect.Applied(t, env.Client, expect.ReadyNode("general-a", "fake://test/general-a", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: "general"}),
		&v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "general-a", Labels: map[string]string{v1alpha1.LabelNodePool: "general"}},
			Spec: v1alpha1.NodeClaimSpec{NodePoolRef: v1alpha1.NodePoolReference{Name: "general"},
				Shape: v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")}},
			Status: v1alpha1.NodeClaimStatus{ProviderID: "fake://test/general-a", NodeName: "general-a",
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionRegistered, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRegistered, LastTransitionTime: metav1.Now()}}},
		},
		expect.BoundPod("default", "busy", "general-a", "1500m", "1Gi"))
	f.template("trainer", "1500m")
	f.request("later", atomic, "trainer", 3, nil)

	result := f.reconcile("later")

	waiting := f.condition("later", autoscalingv1.ConditionProvisioned)
	f.g.Expect(waiting.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(waiting.Reason).To(Equal(autoscalingv1.ReasonCapacityIsNotFound))
	f.g.Expect(f.condition("later", autoscalingv1.ConditionFailed).Status).To(BeEmpty(), "room may free up: not failed")
	f.g.Expect(result.RequeueAfter).To(BeNumerically(">", 0))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1), "two nodes of three are not bought")

	// With noRetry the same request fails at once.
	f.request("now-or-never", atomic, "trainer", 3, map[string]autoscalingv1.Parameter{autoscalingv1.ParameterNoRetry: "true"})
	f.reconcile("now-or-never")
	f.g.Expect(f.condition("now-or-never", autoscalingv1.ConditionFailed).Status).To(Equal(metav1.ConditionTrue))
}

func TestAtomicScaleUpRemovesEveryClaimWhenOneCannotLaunch(t *testing.T) {
	f := newFixture(t)
	f.pool(5)
	f.template("trainer", "1500m")
	f.request("train", atomic, "trainer", 3, nil)
	f.reconcile("train")
	claims := expect.Claims(t, env.Client, "general")
	f.g.Expect(claims).To(HaveLen(3))

	f.ready(&claims[0])
	meta.SetStatusCondition(&claims[1].Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonLaunchFailed, Message: "quota of the project exhausted", LastTransitionTime: metav1.Now()})
	f.g.Expect(env.Client.Status().Update(f.ctx, &claims[1])).To(Succeed())
	f.reconcile("train")

	failed := f.condition("train", autoscalingv1.ConditionFailed)
	f.g.Expect(failed.Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(failed.Reason).To(Equal(autoscalingv1.ReasonLaunchFailed))
	f.g.Expect(failed.Message).To(And(ContainSubstring(claims[1].Name), ContainSubstring("quota of the project exhausted")))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(3), "the reason is written before a claim is removed")

	f.reconcile("train")
	f.g.Eventually(func() []v1alpha1.NodeClaim { return expect.Claims(t, env.Client, "general") }).Should(BeEmpty(), "no partial set is left")
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(BeEmpty())
}

func TestARequestWithoutItsPodTemplateIsNotAcceptedUntilTheTemplateExists(t *testing.T) {
	f := newFixture(t)
	f.pool(5)
	f.request("early", atomic, "trainer", 2, nil)

	f.reconcile("early")

	accepted := f.condition("early", autoscalingv1.ConditionAccepted)
	f.g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(accepted.Reason).To(Equal(autoscalingv1.ReasonPodTemplateNotFound))
	f.g.Expect(accepted.Message).To(ContainSubstring(f.namespace + "/trainer"))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty())

	f.template("trainer", "1500m")
	f.reconcile("early")
	f.g.Expect(f.condition("early", autoscalingv1.ConditionAccepted).Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(2))
}

func TestARequestBeyondItsNamespacesQuotaBuysNothing(t *testing.T) {
	f := newFixture(t)
	f.pool(5)
	f.template("trainer", "1500m")
	f.g.Expect(env.Client.Create(f.ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: f.namespace},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("2")}},
	})).To(Succeed())
	f.request("over", atomic, "trainer", 2, nil)

	f.reconcile("over")

	provisioned := f.condition("over", autoscalingv1.ConditionProvisioned)
	f.g.Expect(provisioned.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(provisioned.Reason).To(Equal(autoscalingv1.ReasonQuotaExceeded))
	f.g.Expect(provisioned.Message).To(ContainSubstring("ResourceQuota " + f.namespace + "/team"))
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty())
}

func TestBookingExpiresAfterTheBookingTime(t *testing.T) {
	f := newFixture(t)
	f.pool(10)
	expect.Applied(t, env.Client, expect.ReadyNode("general-a", "fake://test/general-a", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: "general"}))
	f.template("worker", "500m")
	f.request("booked", checkCapacity, "worker", 2, nil)
	f.reconcile("booked")
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(HaveLen(2))

	f.clock.Step(9 * time.Minute)
	result := f.reconcile("booked")
	f.g.Expect(f.condition("booked", autoscalingv1.ConditionBookingExpired).Status).To(BeEmpty(), "nine minutes of ten")
	f.g.Expect(result.RequeueAfter).To(BeNumerically(">", 0))

	f.clock.Step(time.Minute)
	f.reconcile("booked")
	expired := f.condition("booked", autoscalingv1.ConditionBookingExpired)
	f.g.Expect(expired.Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(expired.Reason).To(Equal(autoscalingv1.ReasonCapacityReservationTimeExpired))
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(BeEmpty(), "the room is let go")
}

func TestBookingEndsWhenTheRequestsPodsAreBound(t *testing.T) {
	f := newFixture(t)
	f.pool(10)
	expect.Applied(t, env.Client, expect.ReadyNode("general-a", "fake://test/general-a", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: "general"}))
	f.template("worker", "500m")
	f.request("booked", checkCapacity, "worker", 2, nil)
	f.reconcile("booked")

	f.consumer("worker-1", "booked", "general-a", "500m")
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(HaveLen(1), "the pod that arrived takes its placeholder's room")
	f.reconcile("booked")
	f.g.Expect(f.condition("booked", autoscalingv1.ConditionBookingExpired).Status).To(BeEmpty())

	f.consumer("worker-2", "booked", "general-a", "500m")
	f.reconcile("booked")
	consumed := f.condition("booked", autoscalingv1.ConditionBookingExpired)
	f.g.Expect(consumed.Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(consumed.Reason).To(Equal(autoscalingv1.ReasonCapacityBookingConsumed))
	f.g.Expect(f.controller.Bookings.Placeholders(f.ctx)).To(BeEmpty())
}

func TestARequestOfAnotherClassIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	f.pool(5)
	f.template("trainer", "1500m")
	f.request("elsewhere", "queued-provisioning.gke.io", "trainer", 2, nil)

	f.reconcile("elsewhere")

	f.g.Expect(f.condition("elsewhere", autoscalingv1.ConditionAccepted).Type).To(BeEmpty(), "no condition: another autoscaler serves the class")
	f.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty())
}

// pinnedTo is the node a booked placeholder requires.
func pinnedTo(pod *corev1.Pod) string {
	if !warmcapacity.IsBooked(pod) {
		return ""
	}
	for _, term := range pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, field := range term.MatchFields {
			return field.Values[0]
		}
	}
	return ""
}
