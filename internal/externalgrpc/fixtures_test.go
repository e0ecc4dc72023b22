package externalgrpc

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// holdFinalizer keeps a deleted claim around in the deleting state, as the
// termination finalizer does while a node drains.
const holdFinalizer = "test.claimscale.io/hold"

// world is one test's objects, named after it; its cleanup removes them.
type world struct {
	t    testing.TB
	g    *WithT
	ctx  context.Context
	name string
}

func newWorld(t testing.TB, name string) *world {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	g.SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	w := &world{t: t, g: g, ctx: context.Background(), name: name}
	t.Cleanup(w.cleanup)
	return w
}

// pool makes a simulated NodeProvider and a pool of two shapes, c2 (the
// cheaper) and c4, with at most five nodes; mutate adjusts it.
func (w *world) pool(name string, mutate func(*v1alpha1.NodePool)) *v1alpha1.NodePool {
	nodeProvider := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &v1alpha1.SimulatedSettings{
			Zones: []string{"zone-a"},
		}},
	}
	w.g.Expect(env.Client.Create(w.ctx, nodeProvider)).To(Succeed())
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: name},
			Template: v1alpha1.NodeTemplate{
				Labels: map[string]string{"team": "a"},
				Taints: []corev1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}},
				Kubelet: v1alpha1.KubeletConfiguration{
					KubeReserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
			},
			Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "c4", CPU: qty("4"), Memory: qty("8Gi"), Price: "0.2"},
				{Name: "c2", CPU: qty("2"), Memory: qty("4Gi"), Price: "0.1"},
			}},
			Limits:   &v1alpha1.Limits{Nodes: ptr(int32(5))},
			MinNodes: 1,
		},
	}
	if mutate != nil {
		mutate(pool)
	}
	w.g.Expect(env.Client.Create(w.ctx, pool)).To(Succeed())
	w.synced(pool)
	w.synced(nodeProvider)
	return pool
}

// claim writes a claim of pool in its shape c2 the way the shim does;
// setStatus, if given, then writes its status as the lifecycle controller
// would.
func (w *world) claim(pool *v1alpha1.NodePool, setStatus func(*v1alpha1.NodeClaim)) *v1alpha1.NodeClaim {
	return w.claimOf(pool, "c2", setStatus)
}

// shapes of the test pools, by name.
var testShapes = map[string]scheduling.Shape{
	"c2": {Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Price: 0.1},
	"c4": {Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("8Gi"), Price: 0.2},
}

// claimOf is claim of another shape.
func (w *world) claimOf(pool *v1alpha1.NodePool, shape string, setStatus func(*v1alpha1.NodeClaim)) *v1alpha1.NodeClaim {
	claim := poolclaims.New(pool, testShapes[shape], nil, nil)
	w.g.Expect(env.Client.Create(w.ctx, claim)).To(Succeed())
	if setStatus != nil {
		setStatus(claim)
		w.g.Expect(env.Client.Status().Update(w.ctx, claim)).To(Succeed())
	}
	w.synced(claim)
	return claim
}

// claimQuietly is claim without waiting for the cache, for bulk setups.
func (w *world) claimQuietly(pool *v1alpha1.NodePool, setStatus func(*v1alpha1.NodeClaim)) *v1alpha1.NodeClaim {
	claim := poolclaims.New(pool, scheduling.Shape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Price: 0.1}, nil, nil)
	w.g.Expect(env.Client.Create(w.ctx, claim)).To(Succeed())
	setStatus(claim)
	w.g.Expect(env.Client.Status().Update(w.ctx, claim)).To(Succeed())
	return claim
}

// nodeQuietly is node without waiting for the cache.
func (w *world) nodeQuietly(claim *v1alpha1.NodeClaim) *corev1.Node {
	node := nodeOf(claim)
	w.g.Expect(env.Client.Create(w.ctx, node)).To(Succeed())
	return node
}

// deleting deletes a claim that a finalizer holds, so it stays in the
// deleting state.
func (w *world) deleting(claim *v1alpha1.NodeClaim) {
	patch := client.MergeFrom(claim.DeepCopy())
	controllerutil.AddFinalizer(claim, holdFinalizer)
	w.g.Expect(env.Client.Patch(w.ctx, claim, patch)).To(Succeed())
	w.g.Expect(env.Client.Delete(w.ctx, claim)).To(Succeed())
	w.g.Eventually(func() bool {
		var seen v1alpha1.NodeClaim
		return cached.Get(w.ctx, client.ObjectKeyFromObject(claim), &seen) == nil && !seen.DeletionTimestamp.IsZero()
	}).Should(BeTrue(), "cache sees claim %s deleting", claim.Name)
}

// suspend gives a claim the suspend annotation, as native mode's
// disruption did before the switch to externalgrpc: its machine is being
// put to sleep, or sleeps once the status says Suspended (asleepStatus).
func (w *world) suspend(claim *v1alpha1.NodeClaim) {
	patch := client.MergeFrom(claim.DeepCopy())
	if claim.Annotations == nil {
		claim.Annotations = map[string]string{}
	}
	claim.Annotations[v1alpha1.AnnotationSuspend] = string(v1alpha1.DisruptionReasonEmpty)
	w.g.Expect(env.Client.Patch(w.ctx, claim, patch)).To(Succeed())
	w.synced(claim)
}

// asleepStatus is a claim whose machine sleeps, as the lifecycle leaves
// it: its providerID kept, Suspended=True, no Node.
func asleepStatus(claim *v1alpha1.NodeClaim) {
	registeredStatus(claim)
	claim.Status.NodeName = ""
	setCondition(claim, v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended)
}

// node writes the Node of a claim, labelled as the lifecycle controller
// labels it.
func (w *world) node(claim *v1alpha1.NodeClaim) *corev1.Node {
	node := nodeOf(claim)
	w.g.Expect(env.Client.Create(w.ctx, node)).To(Succeed())
	w.synced(node)
	return node
}

func nodeOf(claim *v1alpha1.NodeClaim) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Status.NodeName, Labels: map[string]string{
			v1alpha1.LabelNodePool:         claim.Spec.NodePoolRef.Name,
			v1alpha1.LabelNodeClaim:        claim.Name,
			corev1.LabelInstanceTypeStable: claim.Spec.Shape.Name,
		}},
		Spec: corev1.NodeSpec{ProviderID: claim.Status.ProviderID},
	}
}

// registeredStatus is a claim whose node joined.
func registeredStatus(claim *v1alpha1.NodeClaim) {
	claim.Status.ProviderID = "simulated://" + claim.Name
	claim.Status.NodeName = claim.Name
	setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched")
	setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionTrue, "Registered")
}

// launchedStatus is a claim whose machine is booting.
func launchedStatus(claim *v1alpha1.NodeClaim) {
	claim.Status.ProviderID = "simulated://" + claim.Name
	setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched")
}

func failedStatus(reason string) func(*v1alpha1.NodeClaim) {
	return func(claim *v1alpha1.NodeClaim) {
		setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, reason)
	}
}

func setCondition(claim *v1alpha1.NodeClaim, conditionType string, status metav1.ConditionStatus, reason string) {
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: reason + " in a test",
	})
}

// synced waits until the server's cache has the object as written.
func (w *world) synced(obj client.Object) {
	w.t.Helper()
	key := client.ObjectKeyFromObject(obj)
	copied := obj.DeepCopyObject().(client.Object)
	w.g.Eventually(func() string {
		if err := cached.Get(w.ctx, key, copied); err != nil {
			return err.Error()
		}
		return copied.GetResourceVersion()
	}).Should(Equal(obj.GetResourceVersion()), "cache catches up with %s", key.Name)
}

// claims lists the pool's claims from the API server.
func (w *world) claims(pool string) []v1alpha1.NodeClaim {
	var list v1alpha1.NodeClaimList
	w.g.Expect(env.Client.List(w.ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: pool})).To(Succeed())
	return list.Items
}

// liveClaims names the pool's claims that are not being deleted.
func (w *world) liveClaims(pool string) []string {
	var names []string
	for _, claim := range w.claims(pool) {
		if claim.DeletionTimestamp.IsZero() {
			names = append(names, claim.Name)
		}
	}
	return names
}

// cleanup deletes what the test made, claims held by no finalizer first.
func (w *world) cleanup() {
	var claims v1alpha1.NodeClaimList
	_ = env.Client.List(w.ctx, &claims)
	var pools v1alpha1.NodePoolList
	_ = env.Client.List(w.ctx, &pools)
	mine := map[string]bool{}
	for _, pool := range pools.Items {
		if len(pool.Name) >= len(w.name) && pool.Name[:len(w.name)] == w.name {
			mine[pool.Name] = true
			_ = env.Client.Delete(w.ctx, &pool)
			_ = env.Client.Delete(w.ctx, &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: pool.Name}})
		}
	}
	for i := range claims.Items {
		claim := &claims.Items[i]
		if !mine[claim.Spec.NodePoolRef.Name] {
			continue
		}
		if len(claim.Status.Conditions) > 0 {
			// Without its launch error the claim leaves no remembered
			// failure behind for a later test's pool of the same name.
			claim.Status.Conditions = nil
			if err := env.Client.Status().Update(w.ctx, claim); err != nil && !apierrors.IsNotFound(err) {
				w.t.Errorf("clearing the conditions of claim %s: %v", claim.Name, err)
			}
		}
		patch := client.MergeFrom(claim.DeepCopy())
		if controllerutil.RemoveFinalizer(claim, holdFinalizer) {
			if err := env.Client.Patch(w.ctx, claim, patch); err != nil && !apierrors.IsNotFound(err) {
				w.t.Errorf("releasing claim %s: %v", claim.Name, err)
			}
		}
		_ = env.Client.Delete(w.ctx, claim)
		if name := claim.Status.NodeName; name != "" {
			_ = env.Client.Delete(w.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}
}

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func ptr[T any](v T) *T { return &v }
