package autoscaling

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// A pool with 4 cpu of headroom keeps a node with 4 free cpu, even though
// the node is empty and the pool removes empty nodes after a second. A
// Deployment that fits the headroom runs at once, on that node, and a new
// node for fresh headroom follows. When the Deployment goes, the pool is
// back to one spare node.
func TestHeadroomKeepsRoomFreeAndBuysItAgainOnceUsed(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "headroom")
	defer s.Cleanup()
	defer s.DropWarmCapacity()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Headroom = &v1alpha1.Headroom{CPU: harness.Qty("4")}
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
	})
	headroomClaims := func() float64 {
		var metric dto.Metric
		s.G.Expect(metrics.NodeClaimsCreated.WithLabelValues(s.Name, metrics.ReasonHeadroom).Write(&metric)).To(Succeed())
		return metric.GetCounter().GetValue()
	}
	s.G.Eventually(s.ReadyClaims).Should(Equal(1), "one node for 4 cpu of headroom")
	s.G.Expect(headroomClaims()).To(BeEquivalentTo(1))
	// Empty for longer than consolidateAfter, and neither removed nor
	// doubled.
	s.G.Consistently(func() int { return len(s.Claims()) }, 5*time.Second, 250*time.Millisecond).Should(Equal(1))
	warm := s.Nodes()
	s.G.Expect(warm).To(HaveLen(1))

	created := time.Now()
	deployment := s.CreateDeployment("burst", 4, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("burst") }, 2*time.Second, 50*time.Millisecond).Should(Equal(4),
		"pods that fit the headroom run within 2s")
	t.Logf("4 pods Running %s after the Deployment was created", time.Since(created).Round(10*time.Millisecond))
	for _, pod := range s.Pods("burst") {
		s.G.Expect(pod.Spec.NodeName).To(Equal(warm[0].Name), "pod %s runs on the warm node", pod.Name)
	}
	s.G.Eventually(s.ReadyClaims).Should(Equal(2), "a new node for fresh headroom")
	t.Logf("fresh headroom Ready %s after the Deployment was created", time.Since(created).Round(10*time.Millisecond))
	s.G.Expect(headroomClaims()).To(BeEquivalentTo(2))
	s.G.Consistently(func() int { return len(s.Claims()) }, 3*time.Second, 250*time.Millisecond).Should(Equal(2))

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(Equal(1), "back to one spare node once the pods are gone")
}

// A capacity schedule turns warm capacity on for its window and off after
// it: two warm nodes and room for three 3-cpu pods on weekdays from 07:00
// for 12 hours, nothing otherwise. The schedule's clock is stepped; all
// else runs in real time. The warm nodes hold two of the three pods'
// room, so the pool has three nodes, not five.
func TestCapacityScheduleTurnsWarmCapacityOnAndOff(t *testing.T) {
	monday := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	scheduleClock := clocktesting.NewFakePassiveClock(monday.Add(6*time.Hour + 59*time.Minute))
	harness.StartOperator(t, harness.OperatorOptions{WarmCapacityClock: scheduleClock})
	s := harness.NewScenario(t, "capacity-schedule")
	defer s.Cleanup()
	defer s.DropWarmCapacity()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		pool.Spec.CapacitySchedules = []v1alpha1.CapacitySchedule{{
			Schedule: "0 7 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour},
			MinNodes: harness.Ptr(int32(2)),
			Headroom: &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: 3, CPU: *harness.Qty("3")}},
		}}
	})
	s.G.Consistently(func() int { return len(s.Claims()) }, 3*time.Second, 250*time.Millisecond).Should(BeZero(), "no warm capacity before 07:00")

	scheduleClock.SetTime(monday.Add(7 * time.Hour))
	s.G.Eventually(s.ReadyClaims).Should(Equal(3), "two warm nodes and one more for the third 3-cpu pod of headroom")
	s.G.Consistently(func() int { return len(s.Claims()) }, 3*time.Second, 250*time.Millisecond).Should(Equal(3))

	scheduleClock.SetTime(monday.Add(19*time.Hour + time.Second))
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero(), "warm capacity gone after the window")
}
