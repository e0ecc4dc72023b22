package metrics

import (
	"container/list"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// PodBoundSeconds is how long the pods provisioning made a claim for
// waited: from the pod's creation to its binding, both as the API server
// stamped them (creationTimestamp, and the lastTransitionTime of the
// PodScheduled=True condition that the binding sets). Both ends come from
// one clock, so the figure does not depend on the controller's clock,
// its informer's lag or a restart between the two; like the timestamps
// it is whole seconds. By the pool the claim was made in.
var PodBoundSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: namespace, Subsystem: "provisioning", Name: "pod_bound_duration_seconds",
	Help:    "Seconds from the creation of a pod that provisioning made a claim for until it was bound to a node, by the claim's pool.",
	Buckets: []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700, 3600},
}, []string{"nodepool"})

func init() {
	crmetrics.Registry.MustRegister(PodBoundSeconds)
}

// DefaultMaxTrackedPods bounds the pods a PodLatency waits on: about 150
// bytes each, so a few MiB at the most.
const DefaultMaxTrackedPods = 20000

// PodLatency observes PodBoundSeconds: provisioning tells it which pods it
// made claims for, and a pod informer's events tell it when they are bound.
// It forgets a pod once it is bound or deleted, and past MaxTracked it
// forgets the pod it was told about longest ago, so pods that never bind
// cost bounded memory. A nil *PodLatency observes nothing.
type PodLatency struct {
	// Clock stands in for a binding time the pod does not carry.
	Clock clock.PassiveClock
	// MaxTracked pods are waited on at once (default DefaultMaxTrackedPods).
	MaxTracked int

	mu sync.Mutex
	// pods by UID, each an element of order, least recently provisioned
	// at the front.
	pods  map[types.UID]*list.Element
	order list.List
}

type provisionedPod struct {
	uid     types.UID
	pool    string
	created time.Time
}

// NewPodLatency returns a PodLatency on the real clock.
func NewPodLatency() *PodLatency {
	return &PodLatency{Clock: clock.RealClock{}}
}

var _ toolscache.ResourceEventHandler = (*PodLatency)(nil)

// Provisioned notes that provisioning made a claim in pool for the pod. A
// pod provisioned for again (its first claim failed) counts once, in the
// pool of its latest claim.
func (l *PodLatency) Provisioned(pod *corev1.Pod, pool string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pods == nil {
		l.pods = map[types.UID]*list.Element{}
	}
	if e, ok := l.pods[pod.UID]; ok {
		e.Value.(*provisionedPod).pool = pool
		l.order.MoveToBack(e)
		return
	}
	l.pods[pod.UID] = l.order.PushBack(&provisionedPod{uid: pod.UID, pool: pool, created: pod.CreationTimestamp.Time})
	maxTracked := l.MaxTracked
	if maxTracked <= 0 {
		maxTracked = DefaultMaxTrackedPods
	}
	for l.order.Len() > maxTracked {
		oldest := l.order.Front()
		l.order.Remove(oldest)
		delete(l.pods, oldest.Value.(*provisionedPod).uid)
	}
}

// Tracked is how many provisioned pods are not bound yet.
func (l *PodLatency) Tracked() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// OnAdd sees pods as the informer lists them: one bound while the
// informer was down is observed here.
func (l *PodLatency) OnAdd(obj any, _ bool) { l.observe(obj) }

// OnUpdate sees a pod being bound, or any later change of a bound pod
// (if provisioning noted it only after its binding).
func (l *PodLatency) OnUpdate(_, obj any) { l.observe(obj) }

// OnDelete forgets a pod deleted before it was bound.
func (l *PodLatency) OnDelete(obj any) {
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget(pod.UID)
}

func (l *PodLatency) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || l == nil || pod.Spec.NodeName == "" {
		return
	}
	l.mu.Lock()
	e, ok := l.pods[pod.UID]
	if !ok {
		l.mu.Unlock()
		return
	}
	tracked := *e.Value.(*provisionedPod)
	l.forget(pod.UID)
	l.mu.Unlock()
	bound := BoundAt(pod)
	if bound.IsZero() {
		bound = time.Now()
		if l.Clock != nil {
			bound = l.Clock.Now()
		}
	}
	PodBoundSeconds.WithLabelValues(tracked.pool).Observe(max(0, bound.Sub(tracked.created).Seconds()))
}

// forget drops a pod; l.mu is held.
func (l *PodLatency) forget(uid types.UID) {
	if e, ok := l.pods[uid]; ok {
		l.order.Remove(e)
		delete(l.pods, uid)
	}
}

// BoundAt is when the API server bound the pod, zero if it has not: its
// binding subresource sets PodScheduled=True stamped with the time of the
// binding (k8s.io/kubernetes pkg/registry/core/pod/storage,
// setPodHostAndAnnotations, through pkg/api/pod.UpdatePodCondition).
func BoundAt(pod *corev1.Pod) time.Time {
	for _, condition := range pod.Status.Conditions {
		if condition.Type == corev1.PodScheduled && condition.Status == corev1.ConditionTrue {
			return condition.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
