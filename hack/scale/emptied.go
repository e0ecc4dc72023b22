package main

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// emptiedNodes splits a scale-down's time between the control plane and
// the controller. When a node empties is kube-controller-manager's (the
// order the ReplicaSets delete their pods in) and kwok's (when a deleted
// pod is gone); from then on it is the controller's: an emptied node may
// go once its last pod was asked to leave consolidateAfter ago and is
// gone, and whatever passes after that before its claim is deleted is the
// controller's own delay. Runs on different days differ by tens of
// seconds in the first; the second is what a change of the controller
// can move.
type emptiedNodes struct {
	consolidateAfter time.Duration

	mu     sync.Mutex
	podsOn map[string]map[types.UID]bool
	// lastAsked is when the latest of a node's pods was asked to leave
	// (its deletionTimestamp less its grace period), lastGone when the
	// last of them was gone.
	lastAsked, lastGone map[string]time.Time
	claimsDeleted       map[string]bool
	// delays are, per node whose claim was deleted with no pod left on
	// it, the time from when it could have gone to its claim's deletion.
	delays []time.Duration
}

func newEmptiedNodes(consolidateAfter time.Duration) *emptiedNodes {
	return &emptiedNodes{consolidateAfter: consolidateAfter, podsOn: map[string]map[types.UID]bool{},
		lastAsked: map[string]time.Time{}, lastGone: map[string]time.Time{}, claimsDeleted: map[string]bool{}}
}

func (e *emptiedNodes) podHandler() toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.podSeen(obj) },
		UpdateFunc: func(_, obj any) { e.podSeen(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				e.podGone(pod, time.Now())
			}
		},
	}
}

func (e *emptiedNodes) claimHandler() toolscache.ResourceEventHandlerFuncs {
	seen := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if claim, ok := obj.(*v1alpha1.NodeClaim); ok && claim.DeletionTimestamp != nil {
			e.claimDeleted(claim, time.Now())
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: seen,
	}
}

func (e *emptiedNodes) podSeen(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	node := pod.Spec.NodeName
	if e.podsOn[node] == nil {
		e.podsOn[node] = map[types.UID]bool{}
	}
	e.podsOn[node][pod.UID] = true
	if pod.DeletionTimestamp != nil {
		asked := pod.DeletionTimestamp.Time
		if pod.DeletionGracePeriodSeconds != nil {
			asked = asked.Add(-time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
		}
		if asked.After(e.lastAsked[node]) {
			e.lastAsked[node] = asked
		}
	}
}

func (e *emptiedNodes) podGone(pod *corev1.Pod, now time.Time) {
	node := pod.Spec.NodeName
	if node == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if pod.DeletionTimestamp == nil && now.After(e.lastAsked[node]) {
		// Deleted at once, as a pod of no grace period can be.
		e.lastAsked[node] = now
	}
	delete(e.podsOn[node], pod.UID)
	if len(e.podsOn[node]) == 0 {
		e.lastGone[node] = now
	}
}

func (e *emptiedNodes) claimDeleted(claim *v1alpha1.NodeClaim, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.claimsDeleted[claim.Name] {
		return
	}
	e.claimsDeleted[claim.Name] = true
	node := claim.Status.NodeName
	if node == "" || len(e.podsOn[node]) > 0 || e.lastGone[node].IsZero() {
		// A consolidation moving pods, or a node that never ran any.
		return
	}
	due := e.lastAsked[node].Add(e.consolidateAfter)
	if gone := e.lastGone[node]; gone.After(due) {
		due = gone
	}
	e.delays = append(e.delays, now.Sub(due))
}

// firstEmptiedAfter is the first time after since that a node lost its
// last pod, and whether one did.
func (e *emptiedNodes) firstEmptiedAfter(since time.Time) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var first time.Time
	for _, gone := range e.lastGone {
		if gone.After(since) && (first.IsZero() || gone.Before(first)) {
			first = gone
		}
	}
	return first, !first.IsZero()
}

// removalDelays are the median and largest controller's delays over the
// emptied nodes removed, and how many there were.
func (e *emptiedNodes) removalDelays() (median, largest time.Duration, n int) {
	e.mu.Lock()
	delays := slices.Clone(e.delays)
	e.mu.Unlock()
	if len(delays) == 0 {
		return 0, 0, 0
	}
	slices.Sort(delays)
	return delays[len(delays)/2], delays[len(delays)-1], len(delays)
}
