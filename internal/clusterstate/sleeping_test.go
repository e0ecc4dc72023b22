package clusterstate

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// claimsCounted is everyPoolOpen that also notes how many claims of each
// pool the picture gave it to count against the pool's limits.
type claimsCounted struct{ counted map[string]int }

func (c *claimsCounted) UsablePools(ctx context.Context, pools []v1alpha1.NodePool, claimsByPool map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool) {
	c.counted = map[string]int{}
	for name, claims := range claimsByPool {
		c.counted[name] = len(claims)
	}
	return everyPoolOpen{}.UsablePools(ctx, pools, claimsByPool)
}

// asleep makes a claim that registered, then slept: the suspend
// annotation set, Suspended=True, its providerID kept, its Node gone.
// change, when set, alters the claim before it is written.
func (s *pictureScenario) asleep(name string, change func(*v1alpha1.NodeClaim)) *v1alpha1.NodeClaim {
	s.t.Helper()
	claim := s.claim(name)
	claim.Annotations = map[string]string{
		v1alpha1.AnnotationSuspend:      string(v1alpha1.DisruptionReasonEmpty),
		v1alpha1.AnnotationTemplateHash: s.pool.TemplateHash(claim.Spec.Shape),
	}
	if change != nil {
		change(claim)
	}
	status := claim.Status
	must(s.t, env.Client.Create(s.ctx, claim))
	claim.Status = status
	claim.Status.ProviderID = "sim://" + name
	claim.Status.NodeName = name
	now := metav1.Now()
	for _, condition := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized} {
		claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue, Reason: condition, LastTransitionTime: now})
	}
	claim.Status.Conditions = append(claim.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSuspended, LastTransitionTime: now,
	})
	must(s.t, env.Client.Status().Update(s.ctx, claim))
	return claim
}

func sleepingNames(picture *Picture) []string {
	var names []string
	for _, sleeping := range picture.Asleep {
		names = append(names, sleeping.Name)
	}
	return names
}

// wakes solves a pod of the given cpu on the picture and names the claim
// it wakes, "" when it wakes none.
func (s *pictureScenario) wakes(picture *Picture, cpu string) string {
	s.t.Helper()
	pod := testPod("pending-"+s.pool.Name, cpu)
	pod.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: s.pool.Name}
	input := scheduling.Input{Cluster: picture.Cluster, Pending: []*corev1.Pod{pod}}
	input.Sleeping = picture.Asleep
	mine := func(pool string) bool { return pool == s.pool.Name }
	input.Pools = slices.DeleteFunc(slices.Clone(input.Pools), func(p scheduling.Pool) bool { return !mine(p.NodePool.Name) })
	input.InFlight = slices.DeleteFunc(slices.Clone(input.InFlight), func(f scheduling.InFlight) bool { return !mine(f.Pool) })
	input.Sleeping = slices.DeleteFunc(slices.Clone(input.Sleeping), func(f scheduling.Sleeping) bool { return !mine(f.Pool) })
	result, err := scheduling.Solve(s.ctx, input)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, newNode := range result.NewNodes {
		if newNode.Wake != "" {
			return newNode.Wake
		}
	}
	return ""
}

// An asleep claim is an offering: not in flight, counted against no
// limit, woken for a pod that needs a node of its pool.
func TestAnAsleepClaimIsASleepingMachine(t *testing.T) {
	s := newPictureScenario(t, "asleep")
	claim := s.asleep("asleep-a", nil)
	usability := &claimsCounted{}
	picture, err := (&Cluster{Kube: env.Client}).Picture(s.ctx, usability)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sleepingNames(picture), claim.Name) {
		t.Errorf("sleeping %v, want %s", sleepingNames(picture), claim.Name)
	}
	if slices.Contains(inFlightNames(picture), claim.Name) {
		t.Errorf("the asleep claim is in flight: %v", inFlightNames(picture))
	}
	if n := usability.counted[s.pool.Name]; n != 0 {
		t.Errorf("%d claims count against the pool's limits, want none: an asleep machine uses none", n)
	}
	if woken := s.wakes(picture, "1"); woken != claim.Name {
		t.Errorf("a pod that needs a node of the pool wakes %q, want %s", woken, claim.Name)
	}
}

// A sleeping machine that no longer matches its pool is deleted by
// disruption, never woken.
func TestADriftedAsleepClaimIsNotOffered(t *testing.T) {
	tests := []struct {
		name   string
		change func(*v1alpha1.NodeClaim)
	}{
		{"its pool's template changed since it was made", func(claim *v1alpha1.NodeClaim) {
			claim.Annotations[v1alpha1.AnnotationTemplateHash] = "0000000000000000"
		}},
		{"disruption found it drifted", func(claim *v1alpha1.NodeClaim) {
			claim.Status.Conditions = []metav1.Condition{{
				Type: v1alpha1.ConditionDrifted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProviderDrifted, LastTransitionTime: metav1.Now(),
			}}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newPictureScenario(t, "drifted-"+string(rune('a'+i)))
			claim := s.asleep(s.pool.Name+"-a", tt.change)
			picture := s.picture(nil)
			if slices.Contains(sleepingNames(picture), claim.Name) || slices.Contains(inFlightNames(picture), claim.Name) {
				t.Errorf("sleeping %v, in flight %v: want the drifted claim in neither", sleepingNames(picture), inFlightNames(picture))
			}
			if woken := s.wakes(picture, "1"); woken != "" {
				t.Errorf("the drifted claim %s was woken", woken)
			}
		})
	}
}

// A claim asked to sleep is drained like one being deleted: its node
// holds nothing new, and the claim is no offering yet.
func TestASuspendingClaimsNodeIsLeaving(t *testing.T) {
	s := newPictureScenario(t, "suspending")
	claim, node := s.registered("suspending-a")
	if s.needsNewNode(s.picture(nil), "1") {
		t.Fatal("a pod that fits on the empty node buys a new node: the test proves nothing")
	}
	suspend := client.MergeFrom(claim.DeepCopy())
	claim.Annotations = map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)}
	must(t, env.Client.Patch(s.ctx, claim, suspend))
	picture := s.picture(nil)
	if slices.Contains(nodeNames(picture), node.Name) {
		t.Errorf("the node of a suspending claim is in the picture: %v", nodeNames(picture))
	}
	if slices.Contains(inFlightNames(picture), claim.Name) || slices.Contains(sleepingNames(picture), claim.Name) {
		t.Errorf("in flight %v, sleeping %v: want the suspending claim in neither", inFlightNames(picture), sleepingNames(picture))
	}
	if !s.needsNewNode(picture, "1") {
		t.Error("a pod fits on a node that is going to sleep")
	}
}

// A claim woken (its annotation removed) is in flight, like a launch,
// until a Node with its providerID registers; the controller's own wake
// counts before the cache shows it.
func TestAWakingClaimIsInFlightUntilItsNodeIsBack(t *testing.T) {
	s := newPictureScenario(t, "waking")
	claim := s.asleep("waking-a", nil)
	writes := NewWrites(clocktesting.NewFakeClock(time.Now()))
	woken := claim.DeepCopy()
	delete(woken.Annotations, v1alpha1.AnnotationSuspend)
	writes.Woken(woken)
	picture := s.picture(writes)
	if !slices.Contains(inFlightNames(picture), claim.Name) || slices.Contains(sleepingNames(picture), claim.Name) {
		t.Errorf("in flight %v, sleeping %v: want the claim the controller woke in flight before the cache shows the wake", inFlightNames(picture), sleepingNames(picture))
	}
	if !slices.Contains(sleepingNames(s.picture(nil)), claim.Name) {
		t.Fatal("without the record, the claim is not sleeping anyway: the test proves nothing")
	}

	must(t, env.Client.Patch(s.ctx, woken, client.MergeFrom(claim)))
	picture = s.picture(writes)
	if writes.Pending(claim.Name) {
		t.Error("the wake the cache shows is still recorded")
	}
	if !slices.Contains(inFlightNames(picture), claim.Name) {
		t.Errorf("in flight %v, want the waking claim", inFlightNames(picture))
	}
	if s.needsNewNode(picture, "1") {
		t.Error("a pod that fits on the waking machine buys a new node")
	}

	// Its Node back under another name: matched by providerID, the real
	// node counts and the claim is no longer in flight.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "waking-a-again", Labels: map[string]string{corev1.LabelHostname: "waking-a-again", v1alpha1.LabelNodePool: s.pool.Name}},
		Spec:       corev1.NodeSpec{ProviderID: claim.Status.ProviderID},
	}
	must(t, env.Client.Create(s.ctx, node))
	picture = s.picture(nil)
	if slices.Contains(inFlightNames(picture), claim.Name) {
		t.Errorf("in flight %v: the woken claim's node registered, want it out", inFlightNames(picture))
	}
	if !slices.Contains(nodeNames(picture), node.Name) {
		t.Errorf("nodes %v, want the woken machine's node", nodeNames(picture))
	}
}
