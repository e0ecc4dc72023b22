package repair

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
)

// One API server for the package; each test works in a pool of its own.
var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

// scenario is one pool and its claims and nodes on the shared API server,
// a repair controller on a fake clock, and the events it recorded.
type scenario struct {
	t        *testing.T
	g        *WithT
	ctx      context.Context
	pool     *v1alpha1.NodePool
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	c        *Controller
}

func newScenario(t *testing.T, name string, repair *v1alpha1.Repair) *scenario {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2", CPU: &cpu, Memory: &memory}}},
			Repair:      repair,
		},
	}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	s := &scenario{
		t: t, g: g, ctx: ctx, pool: pool,
		// Truncated: the API server keeps times to the second.
		clock:    clocktesting.NewFakeClock(time.Now().Truncate(time.Second)),
		recorder: events.NewFakeRecorder(100),
	}
	s.c = &Controller{Kube: env.Client, Recorder: s.recorder, Clock: s.clock}
	t.Cleanup(s.cleanup)
	return s
}

// cleanup releases the pool's claims (the finalizer stands in for the
// lifecycle controller's) and deletes what the test made.
func (s *scenario) cleanup() {
	for _, claim := range s.claims() {
		patch := client.MergeFrom(claim.DeepCopy())
		controllerutil.RemoveFinalizer(&claim, v1alpha1.TerminationFinalizer)
		_ = env.Client.Patch(s.ctx, &claim, patch)
		_ = env.Client.Delete(s.ctx, &claim)
	}
	var nodes corev1.NodeList
	_ = env.Client.List(s.ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodePool: s.pool.Name})
	for i := range nodes.Items {
		_ = env.Client.Delete(s.ctx, &nodes.Items[i])
		_ = env.Client.Delete(s.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: nodes.Items[i].Name}})
	}
	_ = env.Client.Delete(s.ctx, s.pool)
}

// node makes an initialized claim and its node, Ready=status since the
// given time. The claim carries the termination finalizer, so a deleted
// claim stays visible, as it does while the lifecycle drains it.
func (s *scenario) node(name string, status corev1.ConditionStatus, since time.Time) {
	s.t.Helper()
	s.nodeOnce(name, status, since, true)
}

// nodeOnce makes a claim and its node, initialized once or never.
func (s *scenario) nodeOnce(name string, status corev1.ConditionStatus, since time.Time, initialized bool) {
	s.t.Helper()
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Finalizers: []string{v1alpha1.TerminationFinalizer},
			Labels: map[string]string{v1alpha1.LabelNodePool: s.pool.Name},
		},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: cpu, Memory: memory},
			Requirements: v1alpha1.NodeClaimRequirements{
				Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
			},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, claim)).To(Succeed())
	claim.Status.NodeName = name
	claim.Status.ProviderID = "test://" + name
	// The lifecycle turns Initialized False again when the node goes
	// NotReady; the node's label says it once was.
	claim.SetCondition(v1alpha1.ConditionInitialized, metav1.ConditionFalse, "NodeNotReady", "node is not Ready", s.clock.Now())
	s.g.Expect(env.Client.Status().Update(s.ctx, claim)).To(Succeed())

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		v1alpha1.LabelNodePool: s.pool.Name, v1alpha1.LabelNodeClaim: name,
	}}}
	if initialized {
		node.Labels[v1alpha1.LabelInitialized] = "true"
	}
	s.g.Expect(env.Client.Create(s.ctx, node)).To(Succeed())
	s.setReady(name, status, since)
}

// setReady sets a node's Ready condition as the node lifecycle controller
// or the kubelet would.
func (s *scenario) setReady(name string, status corev1.ConditionStatus, since time.Time) {
	s.t.Helper()
	node := &corev1.Node{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	reason := map[corev1.ConditionStatus]string{
		corev1.ConditionTrue: "KubeletReady", corev1.ConditionFalse: "KubeletNotReady", corev1.ConditionUnknown: "NodeStatusUnknown",
	}[status]
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: reason,
		LastHeartbeatTime: metav1.NewTime(since), LastTransitionTime: metav1.NewTime(since),
	}}
	s.g.Expect(env.Client.Status().Update(s.ctx, node)).To(Succeed())
}

// lease writes the node's heartbeat lease, last renewed at the given time.
func (s *scenario) lease(name string, renewed time.Time) {
	s.t.Helper()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: renewed},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, lease)).To(Succeed())
}

// reconcile runs one check of the pool.
func (s *scenario) reconcile() reconcile.Result {
	s.t.Helper()
	result, err := s.c.Reconcile(s.ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: s.pool.Name}})
	s.g.Expect(err).NotTo(HaveOccurred())
	return result
}

func (s *scenario) claims() []v1alpha1.NodeClaim {
	var claims v1alpha1.NodeClaimList
	s.g.Expect(env.Client.List(s.ctx, &claims)).To(Succeed())
	var mine []v1alpha1.NodeClaim
	for _, claim := range claims.Items {
		if claim.Spec.NodePoolRef.Name == s.pool.Name {
			mine = append(mine, claim)
		}
	}
	return mine
}

func (s *scenario) claim(name string) *v1alpha1.NodeClaim {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: name}, claim)).To(Succeed())
	return claim
}

// deleted names the pool's claims being deleted.
func (s *scenario) deleted() []string {
	var names []string
	for _, claim := range s.claims() {
		if !claim.DeletionTimestamp.IsZero() {
			names = append(names, claim.Name)
		}
	}
	return names
}

// replacements are the pool's claims that replace another.
func (s *scenario) replacements() map[string]v1alpha1.NodeClaim {
	found := map[string]v1alpha1.NodeClaim{}
	for _, claim := range s.claims() {
		if replaces := claim.Annotations["claimscale.io/replaces"]; replaces != "" {
			found[replaces] = claim
		}
	}
	return found
}

func (s *scenario) repairAllowed() *metav1.Condition {
	pool := &v1alpha1.NodePool{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(s.pool), pool)).To(Succeed())
	for _, condition := range pool.Status.Conditions {
		if condition.Type == v1alpha1.ConditionRepairAllowed {
			return &condition
		}
	}
	return nil
}

// recorded drains the events recorded so far.
func (s *scenario) recorded() []string {
	var found []string
	for {
		select {
		case event := <-s.recorder.Events:
			found = append(found, event)
		default:
			return found
		}
	}
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
