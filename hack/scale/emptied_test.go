package main

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestEmptiedNodesCountOnlyTheControllersDelay(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{NodeName: node}}
	}
	deleting := func(p *corev1.Pod, asked time.Time, grace int64) *corev1.Pod {
		p = p.DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: asked.Add(time.Duration(grace) * time.Second)}
		p.DeletionGracePeriodSeconds = ptr.To(grace)
		return p
	}
	claim := func(node string) *v1alpha1.NodeClaim {
		return &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: node, DeletionTimestamp: &metav1.Time{Time: start}},
			Status: v1alpha1.NodeClaimStatus{NodeName: node}}
	}

	e := newEmptiedNodes(30 * time.Second)
	// Node a: both pods asked to leave at 10 s (with a grace period of
	// 5 s) and 12 s, gone at 20 s: due at 42 s, deleted at 43 s.
	a1, a2 := pod("a1", "a"), pod("a2", "a")
	e.podSeen(a1)
	e.podSeen(a2)
	e.podSeen(deleting(a1, at(10), 5))
	e.podSeen(deleting(a2, at(12), 0))
	e.podGone(deleting(a1, at(10), 5), at(15))
	e.podGone(deleting(a2, at(12), 0), at(20))
	e.claimDeleted(claim("a"), at(43))
	// Node b: its pod gone only at 50 s, long after it was asked to
	// leave at 1 s: due when gone, deleted 2 s later.
	b1 := pod("b1", "b")
	e.podSeen(b1)
	e.podSeen(deleting(b1, at(1), 0))
	e.podGone(deleting(b1, at(1), 0), at(50))
	e.claimDeleted(claim("b"), at(52))
	// Node c: deleted with a pod on it, as a consolidation does; not
	// counted, nor is a second sighting of a's deletion.
	e.podSeen(pod("c1", "c"))
	e.claimDeleted(claim("c"), at(5))
	e.claimDeleted(claim("a"), at(90))

	if want := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(e.delays, want) {
		t.Errorf("removal delays %v, want %v (a: 1s, b: 2s)", e.delays, want)
	}
	if median, largest, n := e.removalDelays(); n != 2 || median != 2*time.Second || largest != 2*time.Second {
		t.Errorf("removal delays: median %s, largest %s over %d nodes; want the upper median 2s, 2s over 2", median, largest, n)
	}
	if first, ok := e.firstEmptiedAfter(at(0)); !ok || !first.Equal(at(20)) {
		t.Errorf("first emptied at %s (%v), want %s", first, ok, at(20))
	}
	if _, ok := e.firstEmptiedAfter(at(60)); ok {
		t.Error("a node emptied after 60 s, but none did")
	}
}
