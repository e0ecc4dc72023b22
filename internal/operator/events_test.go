package operator

import (
	"strings"
	"testing"
	"unicode/utf8"
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
