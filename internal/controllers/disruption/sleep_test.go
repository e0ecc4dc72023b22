package disruption

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// Machines that sleep instead of dying, against the real API server: what
// a round writes to the claims (the mark, the suspend annotation, a
// deletion) and to the pool (SleepAllowed), on pkg/provider/fake's power.
// The lifecycle's part (drain, stop, Suspended) is not run here: a claim
// asleep is written as the lifecycle leaves it.

// unpowered is the fake provider without the power calls at all, as a
// provider built before them.
type unpowered struct{ provider.Provider }

// power says what the scenario's provider can do.
type power int

const (
	// withPower: pkg/provider/fake manages power.
	withPower power = iota
	// powerDisabled: the fake says at run time that it cannot
	// (CanManagePower false), as a plugin without the power calls.
	powerDisabled
	// withoutPowerCalls: the provider has no Suspend or Resume.
	withoutPowerCalls
)

// newSleepScenario is a scenario whose provider can manage power or not,
// and whose controller keeps decision records.
func newSleepScenario(t *testing.T, can power) *scenario {
	s := newScenario(t)
	switch can {
	case powerDisabled:
		s.infra.DisablePower()
	case withoutPowerCalls:
		s.c.Providers = fake.Resolver{Provider: unpowered{s.c.Providers.(fake.Resolver).Provider}}
	}
	s.c.Decisions = decisions.NewStore(false)
	s.c.wire()
	return s
}

// sleepPool writes a pool whose machines may sleep, machines of them at
// once, with no disruption budget to speak of.
func (s *scenario) sleepPool(name, machines string, disruption func(*v1alpha1.Disruption)) *v1alpha1.NodePool {
	return s.pool(name, "100%", func(d *v1alpha1.Disruption) {
		d.Sleep = &v1alpha1.Sleep{Machines: machines}
		if disruption != nil {
			disruption(d)
		}
	})
}

// asleep writes a claim of pool whose machine sleeps, as the lifecycle
// leaves it: the suspend annotation, Suspended=True an hour ago, its
// providerID kept, no node; annotations on top.
func (s *scenario) asleep(pool *v1alpha1.NodePool, name string, annotations map[string]string) {
	hourAgo := metav1.NewTime(s.clock.Now().Add(-time.Hour))
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: pool.Name},
			Annotations: map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)},
			Finalizers:  []string{v1alpha1.TerminationFinalizer},
		},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: small.Name, CPU: *small.Capacity.Cpu(), Memory: *small.Capacity.Memory()},
		},
		Status: v1alpha1.NodeClaimStatus{ProviderID: "fake://test/" + name, Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue, Reason: v1alpha1.ConditionLaunched, LastTransitionTime: hourAgo},
			{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSuspended, Message: "asleep", LastTransitionTime: hourAgo},
			// The mark of the node removed, as it went to sleep.
			{Type: v1alpha1.ConditionDisrupting, Status: metav1.ConditionTrue, Reason: string(v1alpha1.DisruptionReasonEmpty), Message: sleepNote("empty"), LastTransitionTime: hourAgo},
		}},
	}
	for key, value := range annotations {
		claim.Annotations[key] = value
	}
	expect.Applied(s.t, env.Client, claim)
}

// sleepAllowed is the pool's SleepAllowed condition as "Status Reason".
func (s *scenario) sleepAllowed(name string) string {
	s.t.Helper()
	var pool v1alpha1.NodePool
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: name}, &pool)).To(Succeed())
	found := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionSleepAllowed)
	if found == nil {
		return ""
	}
	return string(found.Status) + " " + found.Reason
}

func TestSleepSuspendsAnEmptyNodeInsteadOfDeletingIt(t *testing.T) {
	s := newSleepScenario(t, withPower)
	pool := s.sleepPool("sleep-empty", "2", nil)
	s.node(pool, "sleep-empty-idle", small, s.emptyFor(time.Hour))
	s.node(pool, "sleep-empty-busy", small)
	expect.Applied(t, env.Client, expect.BoundPod(suiteNamespace, "web", "sleep-empty-busy", "500m", "512Mi"))

	s.round()

	idle := s.claim("sleep-empty-idle")
	s.g.Expect(idle.DeletionTimestamp).To(BeNil(), "the claim stays: its machine is to sleep")
	s.g.Expect(idle.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationSuspend, string(v1alpha1.DisruptionReasonEmpty)))
	s.g.Expect(condition(idle, v1alpha1.ConditionDisrupting)).To(Equal("True Empty: "+sleepNotePrefix+": node sleep-empty-idle has been empty for 30s"),
		"marked as for deletion, saying it sleeps")
	s.g.Expect(s.claim("sleep-empty-busy").Annotations).NotTo(HaveKey(v1alpha1.AnnotationSuspend), "the node that runs a pod stays up")
	s.g.Expect(s.events("Disrupting", sleepNotePrefix+": node sleep-empty-idle")).NotTo(BeEmpty())
	record, ok := s.c.Decisions.Node("sleep-empty-idle")
	s.g.Expect(ok).To(BeTrue())
	s.g.Expect(record.Outcome).To(Equal(decisions.NodeDisrupting))
	s.g.Expect(record.Message).To(HavePrefix(sleepNotePrefix), "kubectl claimscale why says it sleeps")
	s.g.Expect(s.sleepAllowed("sleep-empty")).To(Equal("True " + v1alpha1.ReasonWithinSleepBudget))

	// The lifecycle takes its time to drain and stop the machine: the
	// mark is not released as stale, and the claim is not taken again.
	s.clock.Step(time.Minute)
	s.round()
	idle = s.claim("sleep-empty-idle")
	s.g.Expect(idle.DeletionTimestamp).To(BeNil())
	s.g.Expect(condition(idle, v1alpha1.ConditionDisrupting)).To(HavePrefix("True Empty: "), "a suspending claim's mark holds")
}

func TestSleepDeletesWhenTheSleepBudgetIsUsedUp(t *testing.T) {
	s := newSleepScenario(t, withPower)
	pool := s.sleepPool("sleep-full", "1", nil)
	s.asleep(pool, "sleep-full-asleep", nil)
	s.node(pool, "sleep-full-idle", small, s.emptyFor(time.Hour))

	s.round()

	idle := s.claim("sleep-full-idle")
	s.g.Expect(idle.DeletionTimestamp).NotTo(BeNil(), "one machine sleeps already, as many as the pool allows")
	s.g.Expect(idle.Annotations).NotTo(HaveKey(v1alpha1.AnnotationSuspend))
	s.g.Expect(condition(idle, v1alpha1.ConditionDisrupting)).To(Equal("True Empty: node sleep-full-idle has been empty for 30s"))
	s.g.Expect(s.sleepAllowed("sleep-full")).To(Equal("False " + v1alpha1.ReasonSleepBudgetUsedUp))

	asleep := s.claim("sleep-full-asleep")
	s.g.Expect(asleep.DeletionTimestamp).To(BeNil(), "the sleeping machine stays asleep")
	s.g.Expect(condition(asleep, v1alpha1.ConditionDisrupting)).To(HavePrefix("False "+v1alpha1.ReasonSuspended+": "),
		"an asleep claim is not disrupting: its node is gone and nothing takes it away")
}

func TestSleepDeletesWhenTheProviderCannotManagePower(t *testing.T) {
	for i, tt := range []struct {
		name string
		can  power
	}{
		{"a provider that says it cannot manage power", powerDisabled},
		{"a provider without the power calls", withoutPowerCalls},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSleepScenario(t, tt.can)
			name := []string{"sleep-nopower", "sleep-nocalls"}[i]
			pool := s.sleepPool(name, "2", nil)
			s.node(pool, name+"-idle", small, s.emptyFor(time.Hour))

			s.round()

			idle := s.claim(name + "-idle")
			s.g.Expect(idle.DeletionTimestamp).NotTo(BeNil())
			s.g.Expect(idle.Annotations).NotTo(HaveKey(v1alpha1.AnnotationSuspend))
			s.g.Expect(s.sleepAllowed(name)).To(Equal("False " + v1alpha1.ReasonPowerNotSupported))
			s.g.Expect(s.events(v1alpha1.ReasonPowerNotSupported, "cannot stop and start machines")).NotTo(BeEmpty())
		})
	}
}

// A drifted or expired node of a pool that sleeps is deleted: only
// emptiness and underuse put machines to sleep.
func TestSleepNeverForDriftOrExpiry(t *testing.T) {
	tests := []struct {
		name       string
		disruption func(*v1alpha1.Disruption)
		// claim marks the node's claim as drifted, if so.
		claim  []metav1.Condition
		step   time.Duration
		reason v1alpha1.DisruptionReason
	}{
		{
			name: "a drifted empty node is deleted", reason: v1alpha1.DisruptionReasonDrifted,
			claim: []metav1.Condition{{Type: v1alpha1.ConditionDrifted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProviderDrifted, Message: "the settings changed"}},
		},
		{
			name: "an expired empty node is deleted", reason: reasonExpired, step: 2 * time.Hour,
			disruption: func(d *v1alpha1.Disruption) { d.ExpireAfter = &metav1.Duration{Duration: time.Hour} },
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSleepScenario(t, withPower)
			name := []string{"sleep-drift", "sleep-expiry"}[i]
			pool := s.sleepPool(name, "2", tt.disruption)
			conditions := []metav1.Condition{s.emptyFor(time.Hour)}
			for _, c := range tt.claim {
				c.LastTransitionTime = metav1.NewTime(s.clock.Now())
				conditions = append(conditions, c)
			}
			s.node(pool, name+"-a", small, conditions...)
			if len(tt.claim) > 0 {
				// Drifted from the provider's settings, as the observer
				// judges it again every round.
				claim := s.claim(name + "-a")
				patch := client.MergeFrom(claim.DeepCopy())
				claim.Annotations = map[string]string{AnnotationProviderHash: "stale"}
				s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())
			}
			s.clock.Step(tt.step)

			s.round()

			claim := s.claim(name + "-a")
			s.g.Expect(claim.DeletionTimestamp).NotTo(BeNil(), "deleted")
			s.g.Expect(claim.Annotations).NotTo(HaveKey(v1alpha1.AnnotationSuspend), "never put to sleep")
			s.g.Expect(condition(claim, v1alpha1.ConditionDisrupting)).To(HavePrefix("True " + string(tt.reason) + ": "))
			s.g.Expect(condition(claim, v1alpha1.ConditionDisrupting)).NotTo(ContainSubstring(sleepNotePrefix))
		})
	}
}

// A sleeping machine no longer what its pool makes is deleted, not woken:
// no node, no budget.
func TestSleepDeletesADriftedOrExpiredSleepingClaim(t *testing.T) {
	tests := []struct {
		name        string
		disruption  func(*v1alpha1.Disruption)
		annotations map[string]string
		step        time.Duration
		want        string
	}{
		{
			name: "a sleeping claim whose provider's settings changed is deleted", annotations: map[string]string{AnnotationProviderHash: "stale"},
			want: "True Drifted: sleeping claim sleep-stale-0 drifted: the settings of NodeProvider sim changed since the claim was made; deleted, not woken",
		},
		{
			name: "a sleeping claim older than the pool's expireAfter is deleted", step: 2 * time.Hour,
			disruption: func(d *v1alpha1.Disruption) { d.ExpireAfter = &metav1.Duration{Duration: time.Hour} },
			want:       "True Expired: sleeping claim sleep-stale-1 expired: older than the pool's expireAfter of 1h0m0s; deleted, not woken",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSleepScenario(t, withPower)
			name := []string{"sleep-stale-0", "sleep-stale-1"}[i]
			// No disruption at all: budgets do not hold sleeping claims.
			pool := s.pool(name, "0", func(d *v1alpha1.Disruption) {
				d.Sleep = &v1alpha1.Sleep{Machines: "2"}
				if tt.disruption != nil {
					tt.disruption(d)
				}
			})
			s.asleep(pool, name, tt.annotations)
			s.asleep(pool, name+"-fresh", map[string]string{})
			s.clock.Step(tt.step)

			s.round()

			stale := s.claim(name)
			s.g.Expect(stale.DeletionTimestamp).NotTo(BeNil(), "deleted")
			s.g.Expect(condition(stale, v1alpha1.ConditionDisrupting)).To(Equal(tt.want))
			s.g.Expect(s.events("Disrupting", "deleting: sleeping claim "+name)).NotTo(BeEmpty())
			if tt.step == 0 {
				fresh := s.claim(name + "-fresh")
				s.g.Expect(fresh.DeletionTimestamp).To(BeNil(), "a sleeping claim that matches its pool stays asleep")
				s.g.Expect(condition(fresh, v1alpha1.ConditionDrifted)).To(BeEmpty())
			}
		})
	}
}

// A plan (simulate --scale-down, why's round taken now) asks no provider:
// it reads whether the pool's provider can manage power from the
// SleepAllowed condition the controller wrote, and says of a node the
// round would put to sleep that it sleeps.
func TestAPlanSaysSuspendWhereTheRoundWould(t *testing.T) {
	s := newSleepScenario(t, withPower)
	pool := s.sleepPool("sleep-plan", "2", nil)
	s.node(pool, "sleep-plan-busy", small)
	expect.Applied(t, env.Client, expect.BoundPod(suiteNamespace, "web", "sleep-plan-busy", "500m", "512Mi"))
	s.round()
	s.g.Expect(s.sleepAllowed("sleep-plan")).To(Equal("True " + v1alpha1.ReasonWithinSleepBudget))

	s.node(pool, "sleep-plan-idle", small, s.emptyFor(time.Hour))
	s.synced()
	s.g.Eventually(func(g Gomega) {
		plan, err := PlanScaleDown(s.ctx, cached, s.c.Pools, s.clock)
		g.Expect(err).NotTo(HaveOccurred())
		var verdict *Verdict
		for i := range plan.Nodes {
			if plan.Nodes[i].Node == "sleep-plan-idle" {
				verdict = &plan.Nodes[i]
			}
		}
		g.Expect(verdict).NotTo(BeNil())
		g.Expect(verdict.Message).To(HavePrefix(sleepNotePrefix), "the plan says what the round would do: suspend")
		g.Expect(plan.Decision).NotTo(BeNil())
		g.Expect(plan.Decision.Action).To(Equal(actionSuspend))
	}).Should(Succeed())
}
