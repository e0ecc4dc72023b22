// Package clusterstate follows, from the informers' events, whether
// anything provisioning and disruption decide on has changed: pods where
// they are bound and what they ask, nodes' labels, taints and readiness,
// claims, pools, providers, PodDisruptionBudgets and DaemonSets. Loops
// that would otherwise decide again on a timer wait for it, so a large
// cluster with nothing to do costs next to nothing.
package clusterstate

import (
	"context"
	"fmt"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Changes counts the changes that matter to a decision and signals each
// one. Updates that change nothing a decision reads (a node's heartbeat,
// a pool's or provider's status counters) are not counted: at a thousand
// nodes they alone would wake the loops every few milliseconds.
type Changes struct {
	generation atomic.Uint64
	signal     chan struct{}
}

// New returns a Changes that has seen nothing yet.
func New() *Changes {
	return &Changes{signal: make(chan struct{}, 1)}
}

// Generation counts the changes seen so far.
func (c *Changes) Generation() uint64 { return c.generation.Load() }

// C receives after a change. One signal stands for every change since the
// last receive: a reader that was busy finds one waiting, not a backlog.
func (c *Changes) C() <-chan struct{} { return c.signal }

// Changed counts a change and signals it.
func (c *Changes) Changed() {
	c.generation.Add(1)
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// Watch registers the event handlers on the informers of everything the
// decisions read. The handlers only compare and count: they copy nothing
// and never block the informer.
func (c *Changes) Watch(ctx context.Context, informers cache.Informers) error {
	for _, watch := range []struct {
		object   client.Object
		relevant func(old, updated any) bool
	}{
		{&corev1.Pod{}, podChanged},
		{&corev1.Node{}, NodeChanged},
		{&v1alpha1.NodeClaim{}, resourceVersionChanged},
		{&v1alpha1.NodePool{}, specChanged},
		{&v1alpha1.NodeProvider{}, providerChanged},
		{&policyv1.PodDisruptionBudget{}, resourceVersionChanged},
		{&appsv1.DaemonSet{}, specChanged},
	} {
		informer, err := informers.GetInformer(ctx, watch.object)
		if err != nil {
			return fmt.Errorf("watching %T for changes: %w", watch.object, err)
		}
		relevant := watch.relevant
		if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { c.Changed() },
			UpdateFunc: func(old, updated any) {
				if relevant(old, updated) {
					c.Changed()
				}
			},
			DeleteFunc: func(any) { c.Changed() },
		}); err != nil {
			return fmt.Errorf("watching %T for changes: %w", watch.object, err)
		}
	}
	return nil
}

// podChanged: where a pod is bound or nominated (a nominated pod counts
// on its node: scheduling.CountedOn), its phase, its labels and annotations
// (owners, do-not-disrupt, spread and affinity selectors), its spec
// (generation: requests resized in place) and whether the scheduler gave
// up on it. Readiness flapping and container restarts are not.
func podChanged(old, updated any) bool {
	a, okA := old.(*corev1.Pod)
	b, okB := updated.(*corev1.Pod)
	if !okA || !okB {
		return true
	}
	return a.Spec.NodeName != b.Spec.NodeName || a.Status.NominatedNodeName != b.Status.NominatedNodeName ||
		a.Status.Phase != b.Status.Phase ||
		a.Generation != b.Generation || a.DeletionTimestamp.IsZero() != b.DeletionTimestamp.IsZero() ||
		len(a.Spec.SchedulingGates) != len(b.Spec.SchedulingGates) ||
		!equality.Semantic.DeepEqual(a.Labels, b.Labels) || !equality.Semantic.DeepEqual(a.Annotations, b.Annotations) ||
		podScheduled(a) != podScheduled(b)
}

func podScheduled(pod *corev1.Pod) string {
	for _, condition := range pod.Status.Conditions {
		if condition.Type == corev1.PodScheduled {
			return string(condition.Status) + "/" + condition.Reason
		}
	}
	return ""
}

// NodeChanged says whether a node update changed what a decision or a
// claim's lifecycle reads: labels, annotations, spec (taints,
// unschedulable, providerID), capacity, allocatable and readiness. Heartbeats move
// only condition times and are not changes.
func NodeChanged(old, updated any) bool {
	a, okA := old.(*corev1.Node)
	b, okB := updated.(*corev1.Node)
	if !okA || !okB {
		return true
	}
	return a.DeletionTimestamp.IsZero() != b.DeletionTimestamp.IsZero() ||
		!equality.Semantic.DeepEqual(a.Labels, b.Labels) || !equality.Semantic.DeepEqual(a.Annotations, b.Annotations) ||
		!equality.Semantic.DeepEqual(a.Spec, b.Spec) || !equality.Semantic.DeepEqual(a.Status.Allocatable, b.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(a.Status.Capacity, b.Status.Capacity) ||
		nodeReady(a) != nodeReady(b)
}

func nodeReady(node *corev1.Node) corev1.ConditionStatus {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status
		}
	}
	return corev1.ConditionUnknown
}

// specChanged: a new generation, deletion, or new labels and annotations.
// Status (a pool's node count, a DaemonSet's rollout) follows from other
// objects that are followed themselves.
func specChanged(old, updated any) bool {
	a, errA := meta.Accessor(old)
	b, errB := meta.Accessor(updated)
	if errA != nil || errB != nil {
		return true
	}
	return a.GetGeneration() != b.GetGeneration() || (a.GetDeletionTimestamp() == nil) != (b.GetDeletionTimestamp() == nil) ||
		!equality.Semantic.DeepEqual(a.GetLabels(), b.GetLabels()) || !equality.Semantic.DeepEqual(a.GetAnnotations(), b.GetAnnotations())
}

// providerChanged: its spec, or whether it is ready; not the times of its
// periodic checks.
func providerChanged(old, updated any) bool {
	if specChanged(old, updated) {
		return true
	}
	a, okA := old.(*v1alpha1.NodeProvider)
	b, okB := updated.(*v1alpha1.NodeProvider)
	if !okA || !okB {
		return true
	}
	if len(a.Status.Conditions) != len(b.Status.Conditions) {
		return true
	}
	for i := range a.Status.Conditions {
		ca, cb := a.Status.Conditions[i], b.Status.Conditions[i]
		if ca.Type != cb.Type || ca.Status != cb.Status || ca.Reason != cb.Reason {
			return true
		}
	}
	return false
}

// resourceVersionChanged: any write. Claims and PodDisruptionBudgets are
// written only when something happens to them.
func resourceVersionChanged(old, updated any) bool {
	a, errA := meta.Accessor(old)
	b, errB := meta.Accessor(updated)
	return errA != nil || errB != nil || a.GetResourceVersion() != b.GetResourceVersion()
}
