package provisioning

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/capacitybackoff"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// The provisioning round against a real API server: each test writes the
// cluster it starts from, runs one round (or a few, stepping a fake clock)
// and reads the claims the round wrote. The provider is pkg/provider/fake.

var env *testenv.Environment

func TestMain(m *testing.M) {
	testenv.RunMain(m, testenv.Options{}, &env, nil)
}

const namespace = "default"

var (
	c2 = provider.Shape{Name: "c2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.1}
	c4 = provider.Shape{Name: "c4", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}, Price: 0.2}
)

// round is one test's cluster, provider and provisioner.
type round struct {
	t           *testing.T
	g           *WithT
	ctx         context.Context
	infra       *fake.Infrastructure
	clock       *clocktesting.FakeClock
	recorder    *events.FakeRecorder
	provisioner *Provisioner
}

func newRound(t *testing.T, shapes ...provider.Shape) *round {
	expect.Cleared(t, env.Client, namespace)
	infra := fake.NewInfrastructure(shapes...)
	clk := clocktesting.NewFakeClock(time.Now())
	recorder := events.NewFakeRecorder(1000)
	return &round{
		t: t, g: NewWithT(t), ctx: context.Background(), infra: infra, clock: clk, recorder: recorder,
		provisioner: &Provisioner{
			Kube: env.Client, Providers: fake.Resolver{Provider: infra.Provider("test")},
			Capacity: capacitybackoff.NewBackoff(clk), Recorder: recorder, Clock: clk,
		},
	}
}

func (r *round) run() {
	r.t.Helper()
	r.g.Expect(r.provisioner.Provision(r.ctx)).To(Succeed())
}

// shapes are the shape names of claims, in order.
func shapes(claims []v1alpha1.NodeClaim) []string {
	out := make([]string, 0, len(claims))
	for _, claim := range claims {
		out = append(out, claim.Spec.Shape.Name)
	}
	return out
}

func TestRoundWritesOneClaimForPendingPodsThatShareANode(t *testing.T) {
	r := newRound(t, c2, c4)
	pool := expect.Pool("general", "sim", "c2", "c4")
	pool.Spec.Template.Labels = map[string]string{"workload": "web"}
	expect.Applied(t, env.Client, expect.Provider("sim"), pool,
		expect.PendingPod(namespace, "web-1", "500m", "1Gi"), expect.PendingPod(namespace, "web-2", "500m", "1Gi"))

	r.run()

	claims := expect.Claims(t, env.Client, "general")
	r.g.Expect(shapes(claims)).To(Equal([]string{"c2"}), "the cheapest shape holding both pods")
	claim := claims[0]
	r.g.Expect(claim.Labels).To(And(
		HaveKeyWithValue(v1alpha1.LabelNodePool, "general"),
		HaveKeyWithValue(v1alpha1.LabelNodeProvider, "sim"),
		HaveKeyWithValue("workload", "web")))
	r.g.Expect(claim.Annotations).To(HaveKey(v1alpha1.AnnotationTemplateHash))
	r.g.Expect(claim.Spec.Requirements.Resources.Cpu().String()).To(Equal("1"))
	r.g.Expect(r.infra.Calls(fake.Create)).To(BeEmpty(), "provisioning writes claims; the lifecycle makes machines")
}

func TestRoundBuysNothingForPodsAClaimInFlightHolds(t *testing.T) {
	r := newRound(t, c2)
	pool := expect.Pool("general", "sim", "c2")
	booting := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "general-booting", Labels: map[string]string{v1alpha1.LabelNodePool: "general"}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "general"},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
	expect.Applied(t, env.Client, expect.Provider("sim"), pool, booting, expect.PendingPod(namespace, "web", "1", "1Gi"))

	r.run()

	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1), "the booting claim holds the pod: no second machine")

	// A pod the booting claim cannot also hold gets a claim of its own.
	expect.Applied(t, env.Client, expect.PendingPod(namespace, "big", "1500m", "1Gi"))
	r.run()
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(2))
}

func TestRoundPlacesNothingOnALeavingNode(t *testing.T) {
	r := newRound(t, c2)
	pool := expect.Pool("general", "sim", "c2")
	node := expect.ReadyNode("general-old", "fake://test/general-old", "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: "general"})
	leaving := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "general-old", Labels: map[string]string{v1alpha1.LabelNodePool: "general"},
			// Held by its finalizer while it drains, as the lifecycle's is.
			Finalizers: []string{v1alpha1.TerminationFinalizer}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "general"},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
		Status: v1alpha1.NodeClaimStatus{ProviderID: node.Spec.ProviderID, NodeName: node.Name,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionRegistered, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRegistered, LastTransitionTime: metav1.Now()}}},
	}
	expect.Applied(t, env.Client, expect.Provider("sim"), pool, node, leaving, expect.PendingPod(namespace, "web", "1", "1Gi"))

	// While the node stays, it holds the pod: nothing is bought.
	r.run()
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1))

	r.g.Expect(env.Client.Delete(r.ctx, leaving)).To(Succeed())
	r.run()
	var names []string
	for _, claim := range expect.Claims(t, env.Client, "general") {
		names = append(names, claim.Name)
	}
	r.g.Expect(names).To(HaveLen(2), "the node of a claim being deleted holds nothing new")
	r.g.Expect(names).To(ContainElement("general-old"))
}

func TestRoundStopsAtThePoolsLimits(t *testing.T) {
	r := newRound(t, c2)
	pool := expect.Pool("general", "sim", "c2")
	two := int32(2)
	pool.Spec.Limits = &v1alpha1.Limits{Nodes: &two}
	expect.Applied(t, env.Client, expect.Provider("sim"), pool)
	for _, name := range []string{"a", "b", "c"} {
		expect.Applied(t, env.Client, expect.PendingPod(namespace, name, "1500m", "1Gi"))
	}

	r.run()

	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(2), "three pods that need a node each, a pool of two nodes at most")
	r.g.Expect(expect.Events(r.recorder)).To(ContainElement(ContainSubstring("FailedProvisioning")), "the pod left over is told why")
}

func TestRoundBacksOffAPoolWhoseProviderFails(t *testing.T) {
	r := newRound(t, c2)
	expect.Applied(t, env.Client, expect.Provider("sim"), expect.Pool("general", "sim", "c2"), expect.PendingPod(namespace, "web", "1", "1Gi"))
	r.infra.FailNext(fake.Shapes, errors.New("connection refused"))

	r.run()
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty())
	r.g.Expect(r.infra.Calls(fake.Shapes)).To(HaveLen(1))

	// Backed off: the next round does not ask the provider again.
	r.run()
	r.g.Expect(r.infra.Calls(fake.Shapes)).To(HaveLen(1), "asked again within the backoff")
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty())

	// After the backoff (1 s at first) the pool provisions again.
	r.clock.Step(2 * time.Second)
	r.run()
	r.g.Expect(r.infra.Calls(fake.Shapes)).To(HaveLen(2))
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(1))
}

func TestRoundSkipsAShapeBackedOffForCapacity(t *testing.T) {
	r := newRound(t, c2, c4)
	expect.Applied(t, env.Client, expect.Provider("sim"), expect.Pool("general", "sim", "c2", "c4"), expect.PendingPod(namespace, "web", "1", "1Gi"))
	backoff := r.provisioner.Capacity.(*capacitybackoff.Backoff)
	backoff.Record("general", "c2", "")

	r.run()

	r.g.Expect(shapes(expect.Claims(t, env.Client, "general"))).To(Equal([]string{"c4"}), "c2 has no capacity now: the next cheapest shape")
}

// An inventory's shapes (bare-metal servers powered on for claims) come
// with a count of free machines: a round claims no more of a shape than
// that, counting the claims not launched yet, and a shape with none free
// is not claimed at all. The pods beyond wait.
func TestRoundClaimsNoMoreOfAnInventoryShapeThanItHasFree(t *testing.T) {
	server := c2
	server.Inventory, server.Available = true, 2
	none := c4
	none.Inventory, none.Available = true, 0
	r := newRound(t, server, none)
	expect.Applied(t, env.Client, expect.Provider("sim"), expect.Pool("general", "sim", "c2", "c4"),
		expect.PendingPod(namespace, "job-1", "1500m", "1Gi"), expect.PendingPod(namespace, "job-2", "1500m", "1Gi"),
		expect.PendingPod(namespace, "job-3", "1500m", "1Gi"), expect.PendingPod(namespace, "job-4", "1500m", "1Gi"))

	r.run()
	r.g.Expect(shapes(expect.Claims(t, env.Client, "general"))).To(Equal([]string{"c2", "c2"}), "two servers free: two claims, and c4 has none")

	r.run()
	r.g.Expect(expect.Claims(t, env.Client, "general")).To(HaveLen(2), "the two claims not launched yet hold the free servers")
}

func TestRoundKeepsWarmCapacityWithoutPods(t *testing.T) {
	r := newRound(t, c2, c4)
	pool := expect.Pool("warm", "sim", "c2", "c4")
	pool.Spec.MinNodes = 2
	expect.Applied(t, env.Client, expect.Provider("sim"), pool)

	r.run()
	r.g.Expect(shapes(expect.Claims(t, env.Client, "warm"))).To(Equal([]string{"c2", "c2"}), "minNodes of the cheapest shape")

	r.run()
	r.g.Expect(expect.Claims(t, env.Client, "warm")).To(HaveLen(2), "warm nodes in flight are not bought twice")
}

func TestDryRunRoundWritesNoClaim(t *testing.T) {
	r := newRound(t, c2)
	r.provisioner.DryRun = true
	expect.Applied(t, env.Client, expect.Provider("sim"), expect.Pool("general", "sim", "c2"), expect.PendingPod(namespace, "web", "1", "1Gi"))

	r.run()

	r.g.Expect(expect.Claims(t, env.Client, "general")).To(BeEmpty())
	r.g.Expect(expect.Events(r.recorder)).To(ContainElement(ContainSubstring("WouldNominate")))
}
