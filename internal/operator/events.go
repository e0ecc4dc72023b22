package operator

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// maxEventNote is the API server's limit on an events.k8s.io/v1 Event's
// note (k8s.io/kubernetes/pkg/apis/events/validation: NoteLengthLimit,
// 1 kB). An event with a longer note is refused, and with it the news.
const maxEventNote = 1024

// truncatedMarker ends a note that was cut.
const truncatedMarker = " …[truncated]"

// truncatingRecorder cuts every note to what the API server accepts, so a
// long provider error still becomes an event, cut, instead of none.
type truncatingRecorder struct{ next events.EventRecorder }

func newEventRecorder(next events.EventRecorder) events.EventRecorder {
	return truncatingRecorder{next: next}
}

func (r truncatingRecorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	r.next.Eventf(regarding, related, eventType, reason, action, "%s", truncateNote(fmt.Sprintf(note, args...)))
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
