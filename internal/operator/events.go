package operator

import (
	"context"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// maxEventNote is the API server's limit on an events.k8s.io/v1 Event's
// note (k8s.io/kubernetes/pkg/apis/events/validation: NoteLengthLimit,
// 1 kB). An event with a longer note is refused, and with it the news.
const maxEventNote = 1024

// truncatedMarker ends a note that was cut.
const truncatedMarker = " …[truncated]"

// truncatingRecorder cuts every note to what the API server accepts, so a
// long provider error still becomes an event, cut, instead of none; and
// it names the pods an event is about without their resourceVersion.
//
// client-go's broadcaster counts an event in the series of the same
// event about the same object, and the object's reference, resourceVersion
// included, is part of what makes it the same: a pending pod, its status
// rewritten by scheduling attempts, got a new Event object per version
// from every provisioning round, where one with a count says it. Claims
// keep theirs: the note is not part of what makes an event the same, and
// a claim's events change their note (a refusal's reason) far more often
// than a pod's.
type truncatingRecorder struct {
	next   events.EventRecorder
	scheme *runtime.Scheme
}

func newEventRecorder(next events.EventRecorder, scheme *runtime.Scheme) events.EventRecorder {
	return truncatingRecorder{next: next, scheme: scheme}
}

func (r truncatingRecorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	r.next.Eventf(r.versionless(regarding), r.versionless(related), eventType, reason, action, "%s", truncateNote(fmt.Sprintf(note, args...)))
}

// versionless is a reference to a pod without its resourceVersion; any
// other object as it is.
func (r truncatingRecorder) versionless(object runtime.Object) runtime.Object {
	pod, ok := object.(*corev1.Pod)
	if !ok || pod == nil || r.scheme == nil {
		return object
	}
	ref, err := reference.GetReference(r.scheme, object)
	if err != nil {
		return object
	}
	if ref.ResourceVersion != "" {
		copied := *ref
		copied.ResourceVersion = ""
		ref = &copied
	}
	return ref
}

// truncateNote cuts note to maxEventNote bytes, on a rune boundary.
func truncateNote(note string) string {
	if len(note) <= maxEventNote {
		return note
	}
	cut := maxEventNote - len(truncatedMarker)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + truncatedMarker
}

// maxEventWrites bounds the event writes in flight. client-go's events
// broadcaster sends each event from a goroutine of its own, at once. After
// a 10,000-pod scale-up, one disruption round turned the refusals of a
// thousand claims into events: a thousand requests together, more than
// the API server's streams per HTTP/2 connection, and Go's transport
// dialled a TLS connection for nearly every request above them (1,500
// handshakes and 84 MB allocated in 15 s, the controller's peak memory).
// Events wait their turn instead; they only report.
const maxEventWrites = 16

// boundedEventSink lets at most cap(slots) writes reach next at a time.
type boundedEventSink struct {
	next  events.EventSink
	slots chan struct{}
}

func newBoundedEventSink(next events.EventSink, writes int) *boundedEventSink {
	return &boundedEventSink{next: next, slots: make(chan struct{}, writes)}
}

// acquire waits for a free slot; the caller releases it.
func (s *boundedEventSink) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *boundedEventSink) release() { <-s.slots }

func (s *boundedEventSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.next.Create(ctx, event)
}

func (s *boundedEventSink) Update(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.next.Update(ctx, event)
}

func (s *boundedEventSink) Patch(ctx context.Context, oldEvent *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	return s.next.Patch(ctx, oldEvent, data)
}

// startEventBroadcaster records the controllers' events through a sink
// that bounds the writes in flight, until ctx ends. controller-runtime's
// own broadcaster writes without bound and takes no sink of ours.
func startEventBroadcaster(ctx context.Context, mgr manager.Manager) (events.EventBroadcaster, error) {
	eventsClient, err := eventsv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("building the events client: %w", err)
	}
	broadcaster := events.NewBroadcaster(newBoundedEventSink(&events.EventSinkImpl{Interface: eventsClient}, maxEventWrites))
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return nil, fmt.Errorf("recording events: %w", err)
	}
	context.AfterFunc(ctx, broadcaster.Shutdown)
	return broadcaster, nil
}
