package clusterstate

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/claimscale/claimscale/internal/scheduling"
)

// Departures keeps, for every node, when a pod last left it, by the pod's
// own timestamps: the time its deletion was asked for (deletionTimestamp
// less the grace period the API server added), or the time its last
// container finished. A node's consolidateAfter clock starts when it
// emptied, and a round that only sees the node empty once its pods are
// gone from the cache would start it late by however long the deletion
// and the round took; after a scale to zero, with ten thousand pods going,
// that is tens of seconds.
//
// DaemonSet and mirror pods are not followed: they do not make a node
// busy, so their going does not make it empty.
type Departures struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	last  map[string]time.Time
}

// NewDepartures returns Departures that has seen none; clock tells the
// time of a departure a pod's timestamps do not (a pod deleted at once).
func NewDepartures(clock clock.PassiveClock) *Departures {
	return &Departures{clock: clock, last: map[string]time.Time{}}
}

// LastLeft is when a pod last left the node, if one was seen to.
func (d *Departures) LastLeft(node string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	left, ok := d.last[node]
	return left, ok
}

// Watch follows the pods leaving their nodes, and forgets nodes that go.
func (d *Departures) Watch(ctx context.Context, informers cache.Informers) error {
	pods, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("watching pods leave their nodes: %w", err)
	}
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, updated any) { d.updated(old, updated) },
		DeleteFunc: func(obj any) { d.deleted(obj) },
	}); err != nil {
		return fmt.Errorf("watching pods leave their nodes: %w", err)
	}
	nodes, err := informers.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("watching nodes go: %w", err)
	}
	if _, err := nodes.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if node, ok := withoutTombstone(obj).(*corev1.Node); ok {
				d.mu.Lock()
				delete(d.last, node.Name)
				d.mu.Unlock()
			}
		},
	}); err != nil {
		return fmt.Errorf("watching nodes go: %w", err)
	}
	return nil
}

func (d *Departures) updated(old, updated any) {
	before, okBefore := old.(*corev1.Pod)
	after, okAfter := updated.(*corev1.Pod)
	if !okBefore || !okAfter || after.Spec.NodeName == "" || !keepsNodeBusy(before) || keepsNodeBusy(after) {
		return
	}
	d.left(after.Spec.NodeName, d.leftAt(after))
}

// deleted notes a pod that went without first being seen to leave (a
// forced deletion, or a watch that missed the update).
func (d *Departures) deleted(obj any) {
	pod, ok := withoutTombstone(obj).(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || !keepsNodeBusy(pod) {
		return
	}
	d.left(pod.Spec.NodeName, d.leftAt(pod))
}

func (d *Departures) left(node string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.After(d.last[node]) {
		d.last[node] = at
	}
}

// keepsNodeBusy: a pod of the node's workload that is neither finished nor
// being deleted.
func keepsNodeBusy(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp.IsZero() && !scheduling.Terminated(pod) && !scheduling.BelongsToNode(pod)
}

// leftAt is when the pod left its node by its own timestamps, never later
// than now.
func (d *Departures) leftAt(pod *corev1.Pod) time.Time {
	now := d.clock.Now()
	at := now
	switch {
	case !pod.DeletionTimestamp.IsZero():
		// The API server sets deletionTimestamp to the time of the request
		// plus the grace period it granted.
		at = pod.DeletionTimestamp.Time
		if pod.DeletionGracePeriodSeconds != nil {
			at = at.Add(-time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
		}
	case scheduling.Terminated(pod):
		var finished time.Time
		for _, status := range pod.Status.ContainerStatuses {
			if terminated := status.State.Terminated; terminated != nil && terminated.FinishedAt.After(finished) {
				finished = terminated.FinishedAt.Time
			}
		}
		if !finished.IsZero() {
			at = finished
		}
	}
	if at.After(now) {
		return now
	}
	return at
}

// withoutTombstone is the object a deletion event is about, also when the
// watch missed the deletion and the informer hands over its last state.
func withoutTombstone(obj any) any {
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return tombstone.Obj
	}
	return obj
}
