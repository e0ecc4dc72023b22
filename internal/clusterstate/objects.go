package clusterstate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Objects reads pods and nodes straight from the informers' stores. A
// List through the cache, even without deep copies, copies every object's
// struct into the list: at ten thousand pods that was most of a
// provisioning round. The objects returned are the cache's own, shared
// with every reader: nothing may write to them.
type Objects struct {
	pods, nodes toolscache.Store
}

// NewObjects finds the stores of the pod and node informers.
func NewObjects(ctx context.Context, informers cache.Informers) (*Objects, error) {
	pods, err := storeOf(ctx, informers, &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	nodes, err := storeOf(ctx, informers, &corev1.Node{})
	if err != nil {
		return nil, err
	}
	return &Objects{pods: pods, nodes: nodes}, nil
}

// ObjectsOf reads pods and nodes from the stores given.
func ObjectsOf(pods, nodes toolscache.Store) *Objects {
	return &Objects{pods: pods, nodes: nodes}
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
