package harness

import (
	"bytes"
	"io"
	"os"
	"slices"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func init() {
	// The controllers' logs go to stderr with E2E_LOGS set, for debugging,
	// and to whatever a test taps.
	if os.Getenv("E2E_LOGS") != "" {
		controllerLogs.tap(os.Stderr)
	}
	log.SetLogger(zap.New(zap.WriteTo(controllerLogs), zap.UseDevMode(true)))
}

// controllerLogs receives every log line of the in-process controllers.
var controllerLogs = &logTee{}

// logTee copies writes to the writers tapped into it.
type logTee struct {
	mu      sync.Mutex
	writers []io.Writer
}

func (l *logTee) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.writers {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

func (l *logTee) tap(w io.Writer) (untap func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writers = append(l.writers, w)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.writers = slices.DeleteFunc(l.writers, func(have io.Writer) bool { return have == w })
	}
}

// LockedBuffer is a buffer safe to write from the controllers and read
// from the test.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TapControllerLogs collects the controllers' logs until the test ends.
func TapControllerLogs(t *testing.T) *LockedBuffer {
	buf := &LockedBuffer{}
	t.Cleanup(controllerLogs.tap(buf))
	return buf
}
