package harness

import (
	"time"

	. "github.com/onsi/gomega"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// CreateConsolidatingPool makes the scenario's provider and a pool that
// consolidates underused nodes after consolidateAfter, offering a 4-cpu
// shape and a 2-cpu one at half its price; mutate changes it further.
func (s *Scenario) CreateConsolidatingPool(consolidateAfter time.Duration, mutate ...func(*v1alpha1.NodePool)) {
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "c4", CPU: Qty("4"), Memory: Qty("16Gi"), Price: "0.4"},
			{Name: "c2", CPU: Qty("2"), Memory: Qty("8Gi"), Price: "0.2"},
		}
		pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmptyOrUnderutilized
		pool.Spec.Disruption.ConsolidateAfter.Duration = consolidateAfter
		for _, change := range mutate {
			change(pool)
		}
	})
}

// WithBudgetOfZero lets a pool disrupt no node.
func WithBudgetOfZero(pool *v1alpha1.NodePool) {
	pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0"}}
}

// SetConsolidationPolicy changes the scenario pool's consolidation policy.
func (s *Scenario) SetConsolidationPolicy(policy v1alpha1.ConsolidationPolicy) {
	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.ConsolidationPolicy = policy
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
}

// DropWarmCapacity takes the scenario pool's minNodes, headroom and
// capacity schedules away, so cleanup can remove its nodes.
func (s *Scenario) DropWarmCapacity() {
	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return client.IgnoreNotFound(err)
		}
		pool.Spec.MinNodes, pool.Spec.Headroom, pool.Spec.CapacitySchedules = 0, nil, nil
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
}

// RepairAllowed is the scenario pool's RepairAllowed condition, nil until
// it is written.
func (s *Scenario) RepairAllowed() *metav1.Condition {
	pool := &v1alpha1.NodePool{}
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, pool)).To(Succeed())
	return meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionRepairAllowed)
}

// CreatePodDisruptionBudget makes a budget over the app's pods and waits
// until its status allows maxUnavailable disruptions.
func (s *Scenario) CreatePodDisruptionBudget(app string, maxUnavailable int32) {
	s.G.Expect(env.Client.Create(s.Ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: s.Namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: Ptr(intstr.FromInt32(maxUnavailable)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	})).To(Succeed())
	s.G.Eventually(func() int32 {
		var budget policyv1.PodDisruptionBudget
		_ = env.Client.Get(s.Ctx, client.ObjectKey{Namespace: s.Namespace, Name: app}, &budget)
		return budget.Status.DisruptionsAllowed
	}).Should(BeEquivalentTo(maxUnavailable), "the budget's status is up to date")
}
