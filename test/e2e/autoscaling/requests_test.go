package autoscaling

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/provisioningrequest"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// An atomic ProvisioningRequest for three pods that need a node each buys
// the three nodes at once and is Provisioned once all three are Ready.
// The request's pods, when they come, run on them without another claim,
// and the booking ends as consumed.
func TestProvisioningRequestBuysEveryNodeAtOnceAndItsPodsRunThere(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "provreq-atomic")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	s.CreatePodTemplate("trainer", "3")
	s.CreateProvisioningRequest("train", autoscalingv1.ClassBestEffortAtomicScaleUp, "trainer", 3)

	s.G.Eventually(func() int { return len(s.Claims()) }).Should(Equal(3))
	s.G.Expect(s.RequestCondition("train", autoscalingv1.ConditionProvisioned).Status).NotTo(Equal(metav1.ConditionTrue),
		"not provisioned before the nodes are Ready")
	s.G.Eventually(func() metav1.ConditionStatus {
		return s.RequestCondition("train", autoscalingv1.ConditionProvisioned).Status
	}).Should(Equal(metav1.ConditionTrue))
	s.G.Expect(s.ReadyClaims()).To(Equal(3), "Provisioned means every node is Ready")

	s.CreateConsumers("trainer", "train", "3", 3)
	s.G.Eventually(func() int { return s.RunningPods("trainer") }).Should(Equal(3))
	s.G.Expect(s.Claims()).To(HaveLen(3), "the pods ran on the nodes bought for them")
	s.G.Eventually(func() string { return s.RequestCondition("train", autoscalingv1.ConditionBookingExpired).Reason }).
		Should(Equal(autoscalingv1.ReasonCapacityBookingConsumed))
}

// One node of an atomic request cannot be launched: the others are
// removed with it, nothing of the request is left, and the request says
// Failed with why.
func TestProvisioningRequestLeavesNoPartialSetWhenALaunchFails(t *testing.T) {
	registry := operator.DefaultRegistry(env.Client)
	// One count for every provider the resolver builds of the NodeProvider.
	launches := &launchCount{}
	registry.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		inner, err := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})(ctx, np, opts)
		if err != nil {
			return nil, err
		}
		return &secondLaunchFails{Provider: inner, launches: launches}, nil
	})
	harness.StartOperator(t, harness.OperatorOptions{Registry: registry})
	s := harness.NewScenario(t, "provreq-launch-fails")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	s.CreatePodTemplate("trainer", "3")
	s.CreateProvisioningRequest("train", autoscalingv1.ClassBestEffortAtomicScaleUp, "trainer", 3)

	s.G.Eventually(func() metav1.ConditionStatus {
		return s.RequestCondition("train", autoscalingv1.ConditionFailed).Status
	}).Should(Equal(metav1.ConditionTrue))
	failed := s.RequestCondition("train", autoscalingv1.ConditionFailed)
	s.G.Expect(failed.Reason).To(Equal(autoscalingv1.ReasonLaunchFailed))
	s.G.Expect(failed.Message).To(ContainSubstring("the rack is full"))
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero(), "no partial set is left")
	s.G.Consistently(func() int { return len(s.Claims()) }, 2*time.Second, 250*time.Millisecond).Should(BeZero(), "and none is bought again")
}

// secondLaunchFails refuses, for good, to launch the second claim it is
// asked for (a rack out of room).
type secondLaunchFails struct {
	provider.Provider
	launches *launchCount
}

// launchCount remembers the claims asked for, in order.
type launchCount struct {
	mu     sync.Mutex
	claims []string
}

// second says whether the claim is the second asked for.
func (c *launchCount) second(claim string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.claims, claim) {
		c.claims = append(c.claims, claim)
	}
	return len(c.claims) > 1 && c.claims[1] == claim
}

func (p *secondLaunchFails) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	if p.launches.second(claim.Name) {
		return nil, provider.NewTerminal(errors.New("the rack is full"))
	}
	return p.Provider.Create(ctx, claim, opts)
}

// A check-capacity request finds room on the node there is and buys
// nothing; an atomic request's nodes stay, empty, while booked, past the
// pool's consolidateAfter, and go once the booking expires on the
// requests' clock.
func TestProvisioningRequestBookingKeepsNodesUntilItExpires(t *testing.T) {
	bookingClock := clocktesting.NewFakePassiveClock(time.Now())
	harness.StartOperator(t, harness.OperatorOptions{RequestClock: bookingClock})
	s := harness.NewScenario(t, "provreq-booking")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) { pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second })
	s.CreateDeployment("base", 1, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("base") }).Should(Equal(1))

	s.CreatePodTemplate("small", "1")
	s.CreateProvisioningRequest("check", autoscalingv1.ClassCheckCapacity, "small", 2)
	s.G.Eventually(func() string { return s.RequestCondition("check", autoscalingv1.ConditionProvisioned).Reason }).
		Should(Equal(autoscalingv1.ReasonCapacityIsFound))
	s.CreateProvisioningRequest("check-more", autoscalingv1.ClassCheckCapacity, "small", 2)
	s.G.Eventually(func() string { return s.RequestCondition("check-more", autoscalingv1.ConditionProvisioned).Reason }).
		Should(Equal(autoscalingv1.ReasonCapacityIsNotFound), "the first request's booking holds 2 of the 3 cpu left")
	s.G.Expect(s.Claims()).To(HaveLen(1), "check-capacity buys nothing")

	s.CreatePodTemplate("trainer", "3")
	s.CreateProvisioningRequest("train", autoscalingv1.ClassBestEffortAtomicScaleUp, "trainer", 2)
	s.G.Eventually(func() metav1.ConditionStatus {
		return s.RequestCondition("train", autoscalingv1.ConditionProvisioned).Status
	}).Should(Equal(metav1.ConditionTrue))
	s.G.Expect(s.Claims()).To(HaveLen(3))
	s.G.Consistently(func() int { return len(s.Claims()) }, 5*time.Second, 250*time.Millisecond).Should(Equal(3),
		"empty past consolidateAfter, but booked")
	s.G.Eventually(func() []string {
		var kept []string
		for _, claim := range s.Claims() {
			if c := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable); c != nil && c.Status == metav1.ConditionFalse {
				kept = append(kept, c.Message)
			}
		}
		return kept
	}).Should(ContainElement(ContainSubstring("room booked for ProvisioningRequest "+s.Namespace+"/train")), "the claims say what keeps them")

	bookingClock.SetTime(bookingClock.Now().Add(provisioningrequest.DefaultBookingTime))
	s.G.Eventually(func() string { return s.RequestCondition("train", autoscalingv1.ConditionBookingExpired).Reason }).
		Should(Equal(autoscalingv1.ReasonCapacityReservationTimeExpired))
	s.G.Eventually(func() metav1.ConditionStatus {
		return s.RequestCondition("check", autoscalingv1.ConditionBookingExpired).Status
	}).
		Should(Equal(metav1.ConditionTrue), "the check-capacity booking expires on the same clock")
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(Equal(1), "the nodes bought for the request go once nobody books them")
}
