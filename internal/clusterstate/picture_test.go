package clusterstate

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// everyPoolOpen is a pool usability under which every pool can make
// nodes of one shape of 2 cpu and 4 GiB.
type everyPoolOpen struct{}

func (everyPoolOpen) UsablePools(_ context.Context, pools []v1alpha1.NodePool, _ map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool) {
	open = map[string]scheduling.Pool{}
	for i := range pools {
		open[pools[i].Name] = scheduling.Pool{NodePool: &pools[i], Shapes: scheduling.Shapes{Fixed: []scheduling.Shape{
			{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Price: 0.1},
		}}}
	}
	return open, nil
}

// pictureScenario is a pool of the test's own on the API server, with
// claims and nodes of it.
type pictureScenario struct {
	t    *testing.T
	ctx  context.Context
	pool *v1alpha1.NodePool
}

func newPictureScenario(t *testing.T, name string) *pictureScenario {
	t.Helper()
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2", CPU: &cpu, Memory: &memory}}},
		},
	}
	s := &pictureScenario{t: t, ctx: context.Background(), pool: pool}
	must(t, env.Client.Create(s.ctx, pool))
	t.Cleanup(s.cleanup)
	return s
}

func (s *pictureScenario) cleanup() {
	var claims v1alpha1.NodeClaimList
	_ = env.Client.List(s.ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: s.pool.Name})
	for i := range claims.Items {
		claim := &claims.Items[i]
		patch := client.MergeFrom(claim.DeepCopy())
		controllerutil.RemoveFinalizer(claim, v1alpha1.TerminationFinalizer)
		_ = env.Client.Patch(s.ctx, claim, patch)
		_ = env.Client.Delete(s.ctx, claim)
	}
	var nodes corev1.NodeList
	_ = env.Client.List(s.ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodePool: s.pool.Name})
	for i := range nodes.Items {
		_ = env.Client.Delete(s.ctx, &nodes.Items[i])
	}
	_ = env.Client.Delete(s.ctx, s.pool)
}

// claim is a claim of the pool as provisioning writes it, not yet
// written.
func (s *pictureScenario) claim(name string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Finalizers: []string{v1alpha1.TerminationFinalizer},
			Labels: map[string]string{v1alpha1.LabelNodePool: s.pool.Name},
		},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
}

// registered makes a claim registered and initialized with its node, of
// 2 cpu, by providerID.
func (s *pictureScenario) registered(name string) (*v1alpha1.NodeClaim, *corev1.Node) {
	s.t.Helper()
	claim := s.claim(name)
	must(s.t, env.Client.Create(s.ctx, claim))
	claim.Status.ProviderID = "sim://" + name
	claim.Status.NodeName = name
	now := metav1.Now()
	for _, condition := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized} {
		claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: condition, LastTransitionTime: now})
	}
	must(s.t, env.Client.Status().Update(s.ctx, claim))
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, v1alpha1.LabelNodePool: s.pool.Name, v1alpha1.LabelNodeClaim: name,
		}},
		Spec: corev1.NodeSpec{ProviderID: "sim://" + name},
	}
	must(s.t, env.Client.Create(s.ctx, node))
	node.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	node.Status.Capacity = node.Status.Allocatable
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	must(s.t, env.Client.Status().Update(s.ctx, node))
	return claim, node
}

// picture reads the picture of the pool's part of the cluster, with the
// writes given.
func (s *pictureScenario) picture(writes *Writes) *Picture {
	s.t.Helper()
	picture, err := (&Cluster{Kube: env.Client, Writes: writes}).Picture(s.ctx, everyPoolOpen{})
	if err != nil {
		s.t.Fatal(err)
	}
	return picture
}

// placed solves a pod of the given cpu on the picture and says whether
// it needs a new node.
func (s *pictureScenario) needsNewNode(picture *Picture, cpu string) bool {
	s.t.Helper()
	pod := testPod("pending-"+s.pool.Name, cpu)
	pod.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: s.pool.Name}
	input := scheduling.Input{Cluster: picture.Cluster, Pending: []*corev1.Pod{pod}}
	input.Pools = slices.DeleteFunc(slices.Clone(input.Pools), func(p scheduling.Pool) bool { return p.NodePool.Name != s.pool.Name })
	input.InFlight = slices.DeleteFunc(slices.Clone(input.InFlight), func(f scheduling.InFlight) bool { return f.Pool != s.pool.Name })
	result, err := scheduling.Solve(s.ctx, input)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(result.Unschedulable) > 0 {
		s.t.Fatalf("the pod fits nowhere: %s", result.Unschedulable[0].Reason)
	}
	return len(result.NewNodes) > 0
}

func inFlightNames(picture *Picture) []string {
	var names []string
	for _, inFlight := range picture.InFlight {
		names = append(names, inFlight.Name)
	}
	return names
}

func nodeNames(picture *Picture) []string {
	var names []string
	for _, node := range picture.Nodes {
		names = append(names, node.Name)
	}
	return names
}

// A claim not yet registered is a phantom node: a pod that fits on it
// needs no new node, and one only needs one once the claim is gone.
func TestABootingClaimIsAPhantomNode(t *testing.T) {
	s := newPictureScenario(t, "phantom")
	if !s.needsNewNode(s.picture(nil), "1") {
		t.Fatal("with no claim, the pod fits on a node that does not exist")
	}
	must(t, env.Client.Create(s.ctx, s.claim("phantom-a")))
	picture := s.picture(nil)
	if !slices.Contains(inFlightNames(picture), "phantom-a") {
		t.Fatalf("in flight %v, want phantom-a", inFlightNames(picture))
	}
	if s.needsNewNode(picture, "1") {
		t.Error("a pod that fits on the booting claim's node buys a new node")
	}
}

// A node whose claim is being deleted holds nothing new; a node matched
// to a live claim does, and carries its claim's labels.
func TestALeavingNodeIsLeftOut(t *testing.T) {
	s := newPictureScenario(t, "leaving")
	claim, node := s.registered("leaving-a")
	picture := s.picture(nil)
	if !slices.Contains(nodeNames(picture), node.Name) || slices.Contains(inFlightNames(picture), claim.Name) {
		t.Fatalf("nodes %v, in flight %v: want the registered claim's node, not in flight", nodeNames(picture), inFlightNames(picture))
	}
	if s.needsNewNode(picture, "1") {
		t.Fatal("a pod that fits on the empty node buys a new node")
	}
	must(t, env.Client.Delete(s.ctx, claim))
	picture = s.picture(nil)
	if slices.Contains(nodeNames(picture), node.Name) {
		t.Errorf("the node of a claim being deleted is in the picture: %v", nodeNames(picture))
	}
	if !s.needsNewNode(picture, "1") {
		t.Error("a pod fits on a node that is going")
	}
}

// The controller's own writes count before the cache shows them: a claim
// it created is in flight, a claim it deleted leaves, and once the cache
// shows the write the record is forgotten.
func TestOwnWritesCountBeforeTheCacheShowsThem(t *testing.T) {
	s := newPictureScenario(t, "own")
	clock := clocktesting.NewFakeClock(time.Now())
	writes := NewWrites(clock)

	// Created, as the API server answered, but not yet in the cache: the
	// picture is read from the API server itself, so a claim never
	// written stands for one the cache does not show yet.
	created := s.claim("own-created")
	created.UID = "not-yet-seen"
	writes.Created(created)
	if !slices.Contains(inFlightNames(s.picture(writes)), created.Name) {
		t.Errorf("a claim the controller created is not in flight before the cache shows it")
	}
	if slices.Contains(inFlightNames(s.picture(nil)), created.Name) {
		t.Fatal("without the record, the claim is in flight anyway: the test proves nothing")
	}
	// Read without the rest of the picture, as repair does, the same.
	claims, err := (&Cluster{Kube: env.Client, Writes: writes}).Claims(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(claims, func(c v1alpha1.NodeClaim) bool { return c.Name == created.Name }) {
		t.Error("the claims read for repair lack a claim the controller created")
	}

	claim, node := s.registered("own-deleted")
	writes.Deleted(claim)
	if slices.Contains(nodeNames(s.picture(writes)), node.Name) {
		t.Errorf("the node of a claim the controller deleted is in the picture before the cache shows the deletion")
	}
	if !slices.Contains(nodeNames(s.picture(nil)), node.Name) {
		t.Fatal("without the record, the node is left out anyway: the test proves nothing")
	}
	if !writes.Pending(claim.Name) {
		t.Fatal("the deletion the cache does not show is forgotten")
	}
	must(t, env.Client.Delete(s.ctx, claim))
	s.picture(writes)
	if writes.Pending(claim.Name) {
		t.Error("the deletion the cache shows is still recorded")
	}

	// A write the cache never shows is forgotten in time.
	clock.Step(2 * ownWriteMemory)
	if slices.Contains(inFlightNames(s.picture(writes)), created.Name) {
		t.Error("a created claim the cache never showed is remembered for ever")
	}
}

// Await wakes on the claim informer's event, not on a timer: the write
// is seen well before the fallback would look, and a write that never
// shows ends the wait at its limit.
func TestAwaitWakesOnTheInformersEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newPictureScenario(t, "await")
	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	writes := NewWrites(clocktesting.NewFakeClock(time.Now()))
	must(t, writes.Watch(ctx, informers))
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}

	claim := s.claim("await-a")
	must(t, env.Client.Create(ctx, claim))
	writes.Created(claim)
	err = writes.Await(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		var cached v1alpha1.NodeClaim
		err := informers.Get(ctx, client.ObjectKeyFromObject(claim), &cached)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("the cache never showed the claim: %v", err)
	}
	// The claim's event forgets the record, unless it came before the
	// record did (the informer can be quicker than the caller that
	// created the claim); then the next read of the cache forgets it.
	var listed v1alpha1.NodeClaimList
	must(t, informers.List(ctx, &listed))
	writes.overlay(listed.Items)
	if writes.Pending(claim.Name) {
		t.Error("the cache shows the created claim, but it is still recorded")
	}

	// With no claim event, a write never shown is looked for once, not
	// every awaitInterval, and the wait ends at its limit.
	looked := 0
	err = writes.Await(ctx, 20*awaitInterval, func(context.Context) (bool, error) {
		looked++
		return false, nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a write never shown ended the wait with %v, want the deadline", err)
	}
	if looked > 3 {
		t.Errorf("looked at the cache %d times with no claim event; the informer's events should wake the wait", looked)
	}
}

// A pending pod an earlier round planned on a claim still booting counts
// on the claim's node and is not pending: packed again, it could be moved
// to another booting claim and lose its room on both. Once registration
// took the plan, the pod counts there a little longer, until its
// nomination shows; a plan on a claim that is not in flight leaves the pod
// pending.
func TestAPodPlannedOnABootingClaimCountsThere(t *testing.T) {
	s := newPictureScenario(t, "planned")
	clock := clocktesting.NewFakeClock(time.Now())
	nominations := NewNominations(clock)
	must(t, env.Client.Create(s.ctx, s.claim("planned-a")))
	planned := testPod("planned-pod", "1500m")
	planned.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: s.pool.Name}
	must(t, env.Client.Create(s.ctx, planned))
	t.Cleanup(func() { _ = env.Client.Delete(s.ctx, planned) })
	planned.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	must(t, env.Client.Status().Update(s.ctx, planned))

	read := func() *Picture {
		t.Helper()
		picture, err := (&Cluster{Kube: env.Client, Nominations: nominations}).Picture(s.ctx, everyPoolOpen{})
		if err != nil {
			t.Fatal(err)
		}
		return picture
	}
	pending := func(picture *Picture) bool {
		return slices.ContainsFunc(picture.Pending, func(p *corev1.Pod) bool { return p.Name == planned.Name })
	}
	plannedOn := func(picture *Picture) []string {
		var on []string
		for _, inFlight := range picture.InFlight {
			for _, p := range inFlight.Pods {
				if p.Name == planned.Name {
					on = append(on, inFlight.Name)
				}
			}
		}
		return on
	}

	if picture := read(); !pending(picture) || s.needsNewNode(picture, "1") {
		t.Fatal("with no plan, the pod is not pending, or a pod beside it does not fit the booting claim: the test proves nothing")
	}
	nominations.Plan("planned-a", []*corev1.Pod{planned})
	picture := read()
	if pending(picture) || !slices.Equal(plannedOn(picture), []string{"planned-a"}) {
		t.Fatalf("pending %t, planned on %v: want the pod on planned-a only", pending(picture), plannedOn(picture))
	}
	if !s.needsNewNode(picture, "1") {
		t.Error("a pod fits on the booting claim's node in the room planned for another")
	}

	nominations.Take("planned-a")
	if picture := read(); pending(picture) {
		t.Error("the pod is pending again as soon as registration took its plan, before its nomination can show")
	}
	clock.Step(takenGrace)
	if picture := read(); !pending(picture) {
		t.Error("the pod of a plan registration took long ago still counts on the claim, not where its nomination says")
	}

	nominations.Plan("planned-gone", []*corev1.Pod{planned})
	if picture := read(); !pending(picture) || len(plannedOn(picture)) > 0 {
		t.Errorf("a pod planned on a claim that is not in flight: pending %t, planned on %v; want pending", pending(picture), plannedOn(picture))
	}
}
