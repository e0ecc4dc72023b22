package harness

import (
	"context"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheme"
)

// Watcher follows objects through a watch and hands every event to a
// function, until stopped.
type Watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Stop ends the watch and waits until the last event was handed on.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

// Watch hands every event of the list's kind that opts select to onEvent.
func (s *Scenario) Watch(list client.ObjectList, onEvent func(watch.Event), opts ...client.ListOption) *Watcher {
	s.T.Helper()
	watching, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	s.G.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	events, err := watching.Watch(ctx, list, opts...)
	s.G.Expect(err).NotTo(HaveOccurred())
	w := &Watcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer events.Stop()
		for event := range events.ResultChan() {
			onEvent(event)
		}
	}()
	return w
}

// WatchClaims calls check with every change to the pool's claims.
func (s *Scenario) WatchClaims(check func(watch.EventType, *v1alpha1.NodeClaim)) *Watcher {
	return s.Watch(&v1alpha1.NodeClaimList{}, func(event watch.Event) {
		if claim, ok := event.Object.(*v1alpha1.NodeClaim); ok {
			check(event.Type, claim)
		}
	}, client.MatchingLabels{v1alpha1.LabelNodePool: s.Name})
}
