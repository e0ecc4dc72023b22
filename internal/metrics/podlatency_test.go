package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

var created = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func pendingPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
	}}
}

// bind returns the pod as the API server's binding leaves it: on a node,
// PodScheduled=True stamped with the binding's time (zero: no condition).
func bind(pod *corev1.Pod, at time.Time) *corev1.Pod {
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "node-1"
	if !at.IsZero() {
		bound.Status.Conditions = append(bound.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at),
		})
	}
	return bound
}

// observed returns the pool's histogram count and sum.
func observed(t *testing.T, pool string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := PodBoundSeconds.WithLabelValues(pool).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestPodLatencyTimesProvisionedPodsFromCreationToBinding(t *testing.T) {
	latency := NewPodLatency()
	pod, other := pendingPod("web-1"), pendingPod("not-provisioned")
	latency.Provisioned(pod, "latency-a")

	// A status change before the binding is not the binding.
	latency.OnUpdate(pod, pod)
	if n, _ := observed(t, "latency-a"); n != 0 {
		t.Fatalf("observed %d pods before any was bound", n)
	}
	latency.OnUpdate(other, bind(other, created.Add(time.Minute)))
	latency.OnUpdate(pod, bind(pod, created.Add(42*time.Second)))
	if n, sum := observed(t, "latency-a"); n != 1 || sum != 42 {
		t.Errorf("observed %d pods, %v s in all; want the provisioned one only, 42 s after its creation", n, sum)
	}
	// Later changes of the bound pod (Running, Ready) are not bindings.
	latency.OnUpdate(pod, bind(pod, created.Add(42*time.Second)))
	if n, _ := observed(t, "latency-a"); n != 1 {
		t.Errorf("observed the same pod %d times", n)
	}
	if latency.Tracked() != 0 {
		t.Errorf("%d pods still tracked after the binding", latency.Tracked())
	}
}

func TestPodLatencyCountsAPodOnceInItsLatestClaimsPool(t *testing.T) {
	latency := NewPodLatency()
	pod := pendingPod("retried")
	latency.Provisioned(pod, "latency-first")
	latency.Provisioned(pod, "latency-second") // the first claim failed
	latency.OnAdd(bind(pod, created.Add(3*time.Minute)), false)
	if n, _ := observed(t, "latency-first"); n != 0 {
		t.Errorf("observed %d in the pool of the failed claim", n)
	}
	if n, sum := observed(t, "latency-second"); n != 1 || sum != 180 {
		t.Errorf("observed %d pods, %v s; want one, 180 s", n, sum)
	}
}

func TestPodLatencyUsesItsClockWithoutAScheduledCondition(t *testing.T) {
	latency := &PodLatency{Clock: clocktesting.NewFakePassiveClock(created.Add(7 * time.Second))}
	pod := pendingPod("no-condition")
	latency.Provisioned(pod, "latency-clock")
	latency.OnUpdate(pod, bind(pod, time.Time{}))
	if n, sum := observed(t, "latency-clock"); n != 1 || sum != 7 {
		t.Errorf("observed %d pods, %v s; want one, 7 s by the clock", n, sum)
	}
}

func TestPodLatencyForgetsPodsThatAreDeletedOrNeverBind(t *testing.T) {
	latency := &PodLatency{MaxTracked: 2}
	deleted, tombstoned := pendingPod("deleted"), pendingPod("tombstoned")
	latency.Provisioned(deleted, "latency-forget")
	latency.Provisioned(tombstoned, "latency-forget")
	latency.OnDelete(deleted)
	latency.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "default/tombstoned", Obj: tombstoned})
	if latency.Tracked() != 0 {
		t.Fatalf("%d pods tracked after both were deleted", latency.Tracked())
	}

	// Past MaxTracked, the pod provisioned for longest ago goes first.
	oldest, middle, newest := pendingPod("oldest"), pendingPod("middle"), pendingPod("newest")
	latency.Provisioned(oldest, "latency-forget")
	latency.Provisioned(middle, "latency-forget")
	latency.Provisioned(newest, "latency-forget")
	if latency.Tracked() != 2 {
		t.Fatalf("%d pods tracked, want at most MaxTracked (2)", latency.Tracked())
	}
	latency.OnUpdate(oldest, bind(oldest, created.Add(time.Second)))
	if n, _ := observed(t, "latency-forget"); n != 0 {
		t.Errorf("a forgotten pod was observed")
	}
	latency.OnUpdate(newest, bind(newest, created.Add(time.Second)))
	if n, _ := observed(t, "latency-forget"); n != 1 {
		t.Errorf("observed %d, want the newest pod", n)
	}

	// A nil PodLatency (dry run, externalgrpc mode) does nothing.
	var none *PodLatency
	none.Provisioned(oldest, "latency-forget")
	none.OnUpdate(oldest, bind(oldest, created))
	none.OnDelete(oldest)
}

// What timing a pod costs provisioning and the pod informer: one
// Provisioned and one binding per pod.
func BenchmarkPodLatency(b *testing.B) {
	latency := NewPodLatency()
	pods := make([]*corev1.Pod, 1000)
	bound := make([]*corev1.Pod, len(pods))
	for i := range pods {
		pods[i] = pendingPod(fmt.Sprintf("bench-%d", i))
		bound[i] = bind(pods[i], created.Add(time.Duration(i)*time.Millisecond))
	}
	b.ReportAllocs()
	for b.Loop() {
		for i, pod := range pods {
			latency.Provisioned(pod, "latency-bench")
			latency.OnUpdate(pod, bound[i])
		}
	}
}
