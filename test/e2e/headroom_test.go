package e2e

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// A pool with 4 cpu of headroom keeps a node with 4 free cpu, even though
// the node is empty and the pool removes empty nodes after a second. A
// Deployment that fits the headroom runs at once, on that node, and a new
// node for fresh headroom follows. When the Deployment goes, the pool is
// back to one spare node.
func TestHeadroomKeepsRoomFreeAndBuysItAgainOnceUsed(t *testing.T) {
	startOperator(t, operatorOptions{})
	s := newScenario(t, "headroom")
	defer s.cleanup()
	defer s.dropWarmCapacity()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Headroom = &v1alpha1.Headroom{CPU: qty("4")}
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
	})
	headroomClaims := func() float64 {
		var metric dto.Metric
		s.g.Expect(metrics.NodeClaimsCreated.WithLabelValues(s.name, metrics.ReasonHeadroom).Write(&metric)).To(Succeed())
		return metric.GetCounter().GetValue()
	}
	s.g.Eventually(s.readyClaims).Should(Equal(1), "one node for 4 cpu of headroom")
	s.g.Expect(headroomClaims()).To(BeEquivalentTo(1))
	// Empty for longer than consolidateAfter, and neither removed nor
	// doubled.
	s.g.Consistently(func() int { return len(s.claims()) }, 5*time.Second, 250*time.Millisecond).Should(Equal(1))
	warm := s.nodes()
	s.g.Expect(warm).To(HaveLen(1))

	created := time.Now()
	deployment := s.createDeployment("burst", 4, "1", nil)
	s.g.Eventually(func() int { return s.runningPods("burst") }, 2*time.Second, 50*time.Millisecond).Should(Equal(4),
		"pods that fit the headroom run within 2s")
	t.Logf("4 pods Running %s after the Deployment was created", time.Since(created).Round(10*time.Millisecond))
	for _, pod := range s.pods("burst") {
		s.g.Expect(pod.Spec.NodeName).To(Equal(warm[0].Name), "pod %s runs on the warm node", pod.Name)
	}
	s.g.Eventually(s.readyClaims).Should(Equal(2), "a new node for fresh headroom")
	t.Logf("fresh headroom Ready %s after the Deployment was created", time.Since(created).Round(10*time.Millisecond))
	s.g.Expect(headroomClaims()).To(BeEquivalentTo(2))
	s.g.Consistently(func() int { return len(s.claims()) }, 3*time.Second, 250*time.Millisecond).Should(Equal(2))

	s.scale(deployment, 0)
	s.g.Eventually(func() int { return len(s.claims()) }).Should(Equal(1), "back to one spare node once the pods are gone")
}

// dropWarmCapacity takes the scenario pool's minNodes, headroom and
// capacity schedules away, so cleanup can remove its nodes.
func (s *scenario) dropWarmCapacity() {
	s.g.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool); err != nil {
			return client.IgnoreNotFound(err)
		}
		pool.Spec.MinNodes, pool.Spec.Headroom, pool.Spec.CapacitySchedules = 0, nil, nil
		return env.Client.Update(s.ctx, &pool)
	}).Should(Succeed())
}

// A capacity schedule turns warm capacity on for its window and off after
// it: two warm nodes and room for three 3-cpu pods on weekdays from 07:00
// for 12 hours, nothing otherwise. The schedule's clock is stepped; all
// else runs in real time. The warm nodes hold two of the three pods'
// room, so the pool has three nodes, not five.
func TestCapacityScheduleTurnsWarmCapacityOnAndOff(t *testing.T) {
	monday := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	scheduleClock := clocktesting.NewFakePassiveClock(monday.Add(6*time.Hour + 59*time.Minute))
	startOperator(t, operatorOptions{warmCapacityClock: scheduleClock})
	s := newScenario(t, "capacity-schedule")
	defer s.cleanup()
	defer s.dropWarmCapacity()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		pool.Spec.CapacitySchedules = []v1alpha1.CapacitySchedule{{
			Schedule: "0 7 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour},
			MinNodes: ptr(int32(2)),
			Headroom: &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: 3, CPU: *qty("3")}},
		}}
	})
	s.g.Consistently(func() int { return len(s.claims()) }, 3*time.Second, 250*time.Millisecond).Should(BeZero(), "no warm capacity before 07:00")

	scheduleClock.SetTime(monday.Add(7 * time.Hour))
	s.g.Eventually(s.readyClaims).Should(Equal(3), "two warm nodes and one more for the third 3-cpu pod of headroom")
	s.g.Consistently(func() int { return len(s.claims()) }, 3*time.Second, 250*time.Millisecond).Should(Equal(3))

	scheduleClock.SetTime(monday.Add(19*time.Hour + time.Second))
	s.g.Eventually(func() int { return len(s.claims()) }).Should(BeZero(), "warm capacity gone after the window")
}
