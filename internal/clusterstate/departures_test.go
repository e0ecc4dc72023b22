package clusterstate

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestDeparturesTellWhenThePodsThemselvesLeft(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	running := func(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: "node-" + name},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
		for _, m := range mutate {
			m(pod)
		}
		return pod
	}
	grace := int64(30)
	// As the API server answers a graceful delete asked for 40 s ago: the
	// request's time plus the grace period.
	deleting := func(pod *corev1.Pod) {
		at := metav1.NewTime(now.Add(-40*time.Second + time.Duration(grace)*time.Second))
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &at, &grace
	}
	succeeded := func(pod *corev1.Pod) {
		pod.Status.Phase = corev1.PodSucceeded
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{
			{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(now.Add(-time.Minute))}}},
			{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(now.Add(-50 * time.Second))}}},
		}
	}
	daemon := func(pod *corev1.Pod) {
		controller := true
		pod.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &controller}}
	}

	departures := NewDepartures(clocktesting.NewFakePassiveClock(now))
	departures.updated(running("deleted"), running("deleted", deleting))
	departures.updated(running("finished"), running("finished", succeeded))
	departures.deleted(running("forced"))
	departures.deleted(toolscache.DeletedFinalStateUnknown{Obj: running("missed")})
	departures.updated(running("daemon", daemon), running("daemon", daemon, deleting))
	departures.updated(running("relabelled"), running("relabelled", func(pod *corev1.Pod) { pod.Labels = map[string]string{"a": "b"} }))
	// Gone after it was seen leaving: the departure stays the earlier one.
	departures.deleted(running("deleted", deleting))

	for node, want := range map[string]time.Time{
		"node-deleted":  now.Add(-40 * time.Second),
		"node-finished": now.Add(-50 * time.Second),
		"node-forced":   now,
		"node-missed":   now,
	} {
		if left, ok := departures.LastLeft(node); !ok || !left.Equal(want) {
			t.Errorf("%s: last left %s (%t), want %s", node, left, ok, want)
		}
	}
	for _, node := range []string{"node-daemon", "node-relabelled"} {
		if left, ok := departures.LastLeft(node); ok {
			t.Errorf("%s: a departure at %s was noted, but no pod of its workload left", node, left)
		}
	}
}

// A caller that saw pods on a node learns the node's last departure only
// once each of them has been seen leaving; departures older than
// departureMemory are forgotten once a node has many.
func TestDeparturesTellWhetherThePodsSeenHaveLeft(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakePassiveClock(now)
	departures := NewDepartures(clock)
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: "node"}}
	}
	departures.deleted(pod("a"))
	if left, ok := departures.LastLeft("node", "a"); !ok || !left.Equal(now) {
		t.Errorf("a left at %s (%t), want %s", left, ok, now)
	}
	if left, ok := departures.LastLeft("node", "a", "b"); ok {
		t.Errorf("b was not seen leaving, yet the node's last departure is %s", left)
	}
	clock.SetTime(now.Add(time.Second))
	departures.deleted(pod("b"))
	if left, ok := departures.LastLeft("node", "a", "b"); !ok || !left.Equal(now.Add(time.Second)) {
		t.Errorf("a and b left, the last at %s (%t), want %s", left, ok, now.Add(time.Second))
	}
	// A tombstone of b's state before it left, handled late: b left when
	// it was first seen to.
	clock.SetTime(now.Add(2 * time.Second))
	departures.deleted(toolscache.DeletedFinalStateUnknown{Obj: pod("b")})
	if left, _ := departures.LastLeft("node"); !left.Equal(now.Add(time.Second)) {
		t.Errorf("a second sighting of b leaving moved the last departure to %s", left)
	}

	// Much later, many pods leave at once: the old departures go, the
	// new ones all stay.
	later := now.Add(departureMemory + time.Minute)
	clock.SetTime(later)
	var recent []types.UID
	for i := range 3 * minPruneAbove {
		uid := fmt.Sprintf("later-%d", i)
		departures.deleted(pod(uid))
		recent = append(recent, types.UID(uid))
	}
	if _, ok := departures.LastLeft("node", "a"); ok {
		t.Error("a departure older than departureMemory is still kept")
	}
	if left, ok := departures.LastLeft("node", recent...); !ok || !left.Equal(later) {
		t.Errorf("the pods that left at once: last at %s (%t), want %s", left, ok, later)
	}
}
