package nodeclaim

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// afterStatus holds what one reconcile does only once its status write has
// succeeded: its events, because a reconcile whose write conflicts runs
// again and must not tell the same news twice; and the claim's deletion,
// because the condition that says why must be on the claim first.
type afterStatus struct {
	events      []pendingEvent
	counts      []func()
	deleteClaim bool
}

type pendingEvent struct {
	regarding, related        runtime.Object
	eventType, reason, action string
	note                      string
	args                      []any
}

type afterStatusKey struct{}

func withAfterStatus(ctx context.Context) (context.Context, *afterStatus) {
	after := &afterStatus{}
	return context.WithValue(ctx, afterStatusKey{}, after), after
}

// eventf queues an event for after the status write, or records it at once
// outside a reconcile that writes status.
func (c *Controller) eventf(ctx context.Context, regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	if after, ok := ctx.Value(afterStatusKey{}).(*afterStatus); ok {
		after.events = append(after.events, pendingEvent{regarding, related, eventType, reason, action, note, args})
		return
	}
	c.Recorder.Eventf(regarding, related, eventType, reason, action, note, args...)
}

// countAfterStatus moves a metric once the status that records the
// change is written: a reconcile whose write fails runs again and would
// count the same launch twice.
func countAfterStatus(ctx context.Context, count func()) {
	if after, ok := ctx.Value(afterStatusKey{}).(*afterStatus); ok {
		after.counts = append(after.counts, count)
		return
	}
	count()
}

// deleteAfterStatus asks for the claim to be deleted once its status,
// which says why, is written.
func deleteAfterStatus(ctx context.Context) {
	if after, ok := ctx.Value(afterStatusKey{}).(*afterStatus); ok {
		after.deleteClaim = true
	}
}

// run records the queued events and metrics and deletes the claim if
// asked.
func (a *afterStatus) run(ctx context.Context, kube client.Client, recorder events.EventRecorder, claim *v1alpha1.NodeClaim) error {
	for _, e := range a.events {
		recorder.Eventf(e.regarding, e.related, e.eventType, e.reason, e.action, e.note, e.args...)
	}
	a.events = nil
	for _, count := range a.counts {
		count()
	}
	a.counts = nil
	if a.deleteClaim {
		if err := kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting claim %s: %w", claim.Name, err)
		}
	}
	return nil
}
