package clusterstate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/internal/scheduling"
)

// Objects reads pods and nodes straight from the informers' stores. A
// List through the cache, even without deep copies, copies every object's
// struct into the list: at ten thousand pods that was most of a
// provisioning round. The objects returned are the cache's own, shared
// with every reader: nothing may write to them.
//
// It also keeps the nodes and their pods as the scheduling simulation
// starts from them (scheduling.Existing), told of each change by the
// informers' handlers.
type Objects struct {
	pods, nodes toolscache.Store
	existing    *scheduling.Existing
}

// NewObjects finds the stores of the pod and node informers, and has
// their handlers keep the Existing up to date.
func NewObjects(ctx context.Context, informers cache.Informers) (*Objects, error) {
	pods, err := storeOf(ctx, informers, &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	nodes, err := storeOf(ctx, informers, &corev1.Node{})
	if err != nil {
		return nil, err
	}
	existing, err := keepExisting(ctx, informers)
	if err != nil {
		return nil, err
	}
	return &Objects{pods: pods, nodes: nodes, existing: existing}, nil
}

// ObjectsOf reads pods and nodes from the stores given, with the Existing
// given (nil: none).
func ObjectsOf(pods, nodes toolscache.Store, existing *scheduling.Existing) *Objects {
	return &Objects{pods: pods, nodes: nodes, existing: existing}
}

// Existing returns the nodes and pods as the scheduling simulation starts
// from them, or nil when none is kept.
func (o *Objects) Existing() *scheduling.Existing { return o.existing }

// keepExisting registers the handlers that tell a scheduling.Existing of
// every pod and node. They run after the informer's store has the object,
// so the Existing lags the store by at most the handlers' queue, as one
// informer's store lags another's.
func keepExisting(ctx context.Context, informers cache.Informers) (*scheduling.Existing, error) {
	existing := scheduling.NewExisting()
	var registrations []toolscache.ResourceEventHandlerRegistration
	for _, watch := range []struct {
		object  client.Object
		set     func(any)
		deleted func(any)
	}{
		{&corev1.Pod{}, func(o any) {
			if pod, ok := o.(*corev1.Pod); ok {
				existing.SetPod(pod)
			}
		}, func(o any) {
			if pod, ok := withoutTombstone(o).(*corev1.Pod); ok {
				existing.DeletePod(pod)
			}
		}},
		{&corev1.Node{}, func(o any) {
			if node, ok := o.(*corev1.Node); ok {
				existing.SetNode(node)
			}
		}, func(o any) {
			if node, ok := withoutTombstone(o).(*corev1.Node); ok {
				existing.DeleteNode(node.Name)
			}
		}},
	} {
		informer, err := informers.GetInformer(ctx, watch.object)
		if err != nil {
			return nil, fmt.Errorf("keeping %T for scheduling: %w", watch.object, err)
		}
		registration, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    watch.set,
			UpdateFunc: func(_, updated any) { watch.set(updated) },
			DeleteFunc: watch.deleted,
		})
		if err != nil {
			return nil, fmt.Errorf("keeping %T for scheduling: %w", watch.object, err)
		}
		registrations = append(registrations, registration)
	}
	existing.SetSynced(func() bool {
		for _, registration := range registrations {
			if !registration.HasSynced() {
				return false
			}
		}
		return true
	})
	return existing, nil
}

func storeOf(ctx context.Context, informers cache.Informers, object client.Object) (toolscache.Store, error) {
	informer, err := informers.GetInformer(ctx, object)
	if err != nil {
		return nil, fmt.Errorf("reading the informer of %T: %w", object, err)
	}
	// controller-runtime's informers are client-go's shared informers.
	withStore, ok := informer.(interface{ GetStore() toolscache.Store })
	if !ok {
		return nil, fmt.Errorf("the informer of %T (%T) has no store to read", object, informer)
	}
	return withStore.GetStore(), nil
}

// Pods returns every cached pod. Read only.
func (o *Objects) Pods() []*corev1.Pod { return listOf[*corev1.Pod](o.pods) }

// Nodes returns every cached node. Read only.
func (o *Objects) Nodes() []*corev1.Node { return listOf[*corev1.Node](o.nodes) }

func listOf[T any](store toolscache.Store) []T {
	items := store.List()
	out := make([]T, 0, len(items))
	for _, item := range items {
		if object, ok := item.(T); ok {
			out = append(out, object)
		}
	}
	return out
}
