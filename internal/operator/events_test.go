package operator

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/claimscale/claimscale/internal/scheme"
)

func TestTruncateNoteCutsLongNotesToTheAPILimitOnARuneBoundary(t *testing.T) {
	short := "machine launched"
	if got := truncateNote(short); got != short {
		t.Fatalf("a short note changed: %q", got)
	}
	long := strings.Repeat("ä", 2000) // two bytes each
	got := truncateNote(long)
	if len(got) > maxEventNote {
		t.Fatalf("note is %d bytes, the API accepts %d", len(got), maxEventNote)
	}
	if !utf8.ValidString(got) || !strings.HasSuffix(got, truncatedMarker) {
		t.Fatalf("cut note is not valid UTF-8 or does not say it was cut: %q", got[len(got)-40:])
	}
}

// countingSink counts the events created and the series updates.
type countingSink struct{ created, patched atomic.Int32 }

func (s *countingSink) Create(_ context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	s.created.Add(1)
	return event, nil
}

func (s *countingSink) Update(_ context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	return event, nil
}

func (s *countingSink) Patch(_ context.Context, event *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	s.patched.Add(1)
	return event, nil
}

// The same event about a pod in two rounds, the pod's resourceVersion
// changed in between (a scheduling attempt rewrote its status), is one
// Event with a count of two, not two Events.
func TestEventsAboutAPodCountUpAcrossItsVersions(t *testing.T) {
	g := NewWithT(t)
	sink := &countingSink{}
	broadcaster := events.NewBroadcaster(sink)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.Expect(broadcaster.StartRecordingToSinkWithContext(ctx)).To(Succeed())
	defer broadcaster.Shutdown()
	recorder := newEventRecorder(broadcaster.NewRecorder(scheme.New(), "provisioning"), scheme.New())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web", ResourceVersion: "1"}}
	recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedProvisioning", "Provision", "no pool can hold the pod")
	g.Eventually(sink.created.Load).Should(BeEquivalentTo(1))
	pod.ResourceVersion = "2"
	recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedProvisioning", "Provision", "no pool can hold the pod")
	g.Eventually(sink.patched.Load).Should(BeEquivalentTo(1), "the second is counted in the first's series")
	g.Consistently(sink.created.Load, 200*time.Millisecond).Should(BeEquivalentTo(1), "one Event for the pod")
}
