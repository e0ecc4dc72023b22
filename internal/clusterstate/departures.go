package clusterstate

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	nodes map[string]*nodeDepartures
}

type nodeDepartures struct {
	last time.Time
	// pods are the pods seen leaving lately, by when they left.
	pods map[types.UID]time.Time
	// pruneAbove is the size of pods past which the departures older
	// than departureMemory are forgotten; it doubles with what stays, so
	// a node a hundred pods leave at once is not scanned a hundred times.
	pruneAbove int
}

// departureMemory is how long a pod's departure is kept for LastLeft's
// gone. A caller asks about the pods it saw on the node a round before,
// in a cache seconds behind; one that asks later, or about more pods than
// are kept, learns only the last departure.
const departureMemory = 2 * time.Minute

// minPruneAbove: a node with few departures is not pruned at all.
const minPruneAbove = 16

// NewDepartures returns Departures that has seen none; clock tells the
// time of a departure a pod's timestamps do not (a pod deleted at once).
func NewDepartures(clock clock.PassiveClock) *Departures {
	return &Departures{clock: clock, nodes: map[string]*nodeDepartures{}}
}

// LastLeft is when a pod last left the node, if one was seen to and each
// of gone was seen leaving it. A caller that saw gone on the node in a
// cache lagging behind their deletions learns when the node emptied: no
// departure it could have missed is later than the one known, short of
// one not handled yet.
func (d *Departures) LastLeft(node string, gone ...types.UID) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.nodes[node]
	if n == nil {
		return time.Time{}, false
	}
	for _, uid := range gone {
		if _, ok := n.pods[uid]; !ok {
			return time.Time{}, false
		}
	}
	return n.last, true
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
				delete(d.nodes, node.Name)
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
	d.left(after.Spec.NodeName, after.UID, d.leftAt(after))
}

// deleted notes a pod that went without first being seen to leave (a
// forced deletion, or a watch that missed the update).
func (d *Departures) deleted(obj any) {
	pod, ok := withoutTombstone(obj).(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || !keepsNodeBusy(pod) {
		return
	}
	d.left(pod.Spec.NodeName, pod.UID, d.leftAt(pod))
}

func (d *Departures) left(node string, uid types.UID, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.nodes[node]
	if n == nil {
		n = &nodeDepartures{pods: map[types.UID]time.Time{}, pruneAbove: minPruneAbove}
		d.nodes[node] = n
	}
	if earlier, ok := n.pods[uid]; ok && !at.Before(earlier) {
		// Seen leaving before (a tombstone of its state before): the
		// first time stays.
		return
	}
	n.pods[uid] = at
	if at.After(n.last) {
		n.last = at
	}
	if len(n.pods) > n.pruneAbove {
		horizon := d.clock.Now().Add(-departureMemory)
		for uid, left := range n.pods {
			if left.Before(horizon) {
				delete(n.pods, uid)
			}
		}
		n.pruneAbove = max(minPruneAbove, 2*len(n.pods))
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
