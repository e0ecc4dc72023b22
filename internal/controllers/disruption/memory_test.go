package disruption

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestStability(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pod := func(uid string, bound time.Time) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(bound)},
			}},
		}
	}
	initialized := start.Add(-time.Hour)
	tracker := newStability()
	a, b := pod("a", start.Add(-10*time.Minute)), pod("b", start.Add(-5*time.Minute))

	if since := tracker.observe("n", []*corev1.Pod{a, b}, initialized, start); !since.Equal(b.Status.Conditions[0].LastTransitionTime.Time) {
		t.Fatalf("first seen: stable since %s, want the last pod's binding", since)
	}
	if since := tracker.observe("n", []*corev1.Pod{b, a}, initialized, start.Add(time.Minute)); !since.Equal(start.Add(-5 * time.Minute)) {
		t.Fatalf("same pods: stable since %s, want unchanged", since)
	}
	if since := tracker.observe("n", []*corev1.Pod{a}, initialized, start.Add(2*time.Minute)); !since.Equal(start.Add(2 * time.Minute)) {
		t.Fatalf("a pod left: stable since %s, want now", since)
	}
	if since := tracker.observe("empty", nil, initialized, start); !since.Equal(initialized) {
		t.Fatalf("a node without pods is stable since its initialization, not %s", since)
	}
	tracker.prune(map[string]bool{"n": true})
	if _, ok := tracker.nodes["empty"]; ok {
		t.Fatal("a node no longer seen was kept")
	}
}

func TestMemory(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	m := newMemory(time.Minute)
	m.remember("claim", "Underutilized", 1, start)
	tests := []struct {
		name        string
		reason      string
		fingerprint uint64
		at          time.Time
		skip        bool
	}{
		{"the same cluster is skipped", "Underutilized", 1, start.Add(30 * time.Second), true},
		{"a changed cluster is tried again", "Underutilized", 2, start.Add(30 * time.Second), false},
		{"after the backoff it is tried again", "Underutilized", 1, start.Add(time.Minute), false},
		{"another reason is its own question", "Drifted", 1, start.Add(30 * time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.skip("claim", v1alpha1.DisruptionReason(tt.reason), tt.fingerprint, tt.at); got != tt.skip {
				t.Fatalf("skip %v, want %v", got, tt.skip)
			}
		})
	}
	m.prune(start.Add(time.Minute))
	if len(m.entries) != 0 {
		t.Fatal("an entry past its backoff was kept")
	}
}

func TestEventMemo(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	e := newEventMemo(time.Minute)
	if !e.due("claim", "DisruptionBlocked", "note", start) {
		t.Fatal("a first event was held back")
	}
	if e.due("claim", "DisruptionBlocked", "note", start.Add(time.Second)) {
		t.Fatal("the same event went out again at once")
	}
	if !e.due("claim", "DisruptionBlocked", "another note", start.Add(time.Second)) {
		t.Fatal("a different note was held back")
	}
	if !e.due("claim", "DisruptionBlocked", "note", start.Add(time.Minute)) {
		t.Fatal("the event was not repeated after a while")
	}
}

// departuresAt is, per node, the last departure and the pods seen leaving.
type departuresAt map[string]struct {
	at   time.Time
	gone []types.UID
}

func (d departuresAt) LastLeft(node string, gone ...types.UID) (time.Time, bool) {
	left, ok := d[node]
	if !ok {
		return time.Time{}, false
	}
	for _, uid := range gone {
		if !slices.Contains(left.gone, uid) {
			return time.Time{}, false
		}
	}
	return left.at, true
}

// An emptied node's clock starts when its last pod left, by the pod's own
// timestamps, not when a round first sees it empty. That holds too when
// the round that last saw the pod there looked after it had left, through
// a cache behind its deletion, as after a scale to zero. A departure from
// before that look is the last one only once the pod the look saw has been
// seen leaving.
func TestEmptyNodesCountFromTheirLastPodsDeparture(t *testing.T) {
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	busy := []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "a"}}}
	type departure = struct {
		at   time.Time
		gone []types.UID
	}
	tracker := newStability()
	tracker.departures = departuresAt{
		"after-the-look":          departure{at: start.Add(3 * time.Second)},
		"before-the-look":         departure{at: start.Add(-10 * time.Second), gone: []types.UID{"a"}},
		"other-pod-before":        departure{at: start.Add(-time.Minute), gone: []types.UID{"b"}},
		"after-now":               departure{at: start.Add(time.Minute), gone: []types.UID{"a"}},
		"after-the-look-and-gone": departure{at: start.Add(5 * time.Second), gone: []types.UID{"a"}},
	}
	nodes := []string{"after-the-look", "before-the-look", "other-pod-before", "after-now", "after-the-look-and-gone", "unknown"}
	for _, node := range nodes {
		tracker.observe(node, busy, start.Add(-time.Hour), start)
		tracker.observe(node, nil, start.Add(-time.Hour), start.Add(20*time.Second))
	}
	for node, want := range map[string]time.Time{
		"after-the-look":          start.Add(3 * time.Second),
		"before-the-look":         start.Add(-10 * time.Second),
		"other-pod-before":        start.Add(20 * time.Second),
		"after-now":               start.Add(20 * time.Second),
		"after-the-look-and-gone": start.Add(5 * time.Second),
		"unknown":                 start.Add(20 * time.Second),
	} {
		if since, ok := tracker.emptySince(node); !ok || !since.Equal(want) {
			t.Errorf("node %s: empty since %s (%t), want %s", node, since, ok, want)
		}
	}
}
