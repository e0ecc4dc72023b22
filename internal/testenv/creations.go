package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// Creations remembers each object of one kind in a namespace as the API
// server announced it when it appeared. A watch opened before the create
// first sees the object in an ADDED event, carrying what the create call
// stored; a second call that labels or annotates it afterwards arrives as
// MODIFIED and changes nothing here. That is the API server's own record
// of the call, so a conformance check can tell ownership tags set when a
// machine is made from tags added by a later call, which look the same
// once Create has returned.
type Creations struct {
	mu      sync.Mutex
	first   map[string]*unstructured.Unstructured
	changed chan struct{}
	err     error
}

// RecordCreations watches objects of gvk in namespace until the test ends.
// Objects that exist before it starts are remembered as they are then.
func (e *Environment) RecordCreations(t testing.TB, gvk schema.GroupVersionKind, namespace string) *Creations {
	t.Helper()
	mapping, err := e.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("finding the resource of %s: %v", gvk, err)
	}
	dynamicClient, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("building a dynamic client: %v", err)
	}
	resource := dynamicClient.Resource(mapping.Resource).Namespace(namespace)
	// Opened here, not in the goroutine, so that every create the test
	// makes after this returns falls inside the watch.
	watcher, err := resource.Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching %s in %s: %v", mapping.Resource, namespace, err)
	}
	c := &Creations{first: map[string]*unstructured.Unstructured{}, changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.follow(ctx, resource, watcher)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// follow records the first sight of each name, reopening the watch from
// the last resource version when the API server closes it.
func (c *Creations) follow(ctx context.Context, resource dynamic.ResourceInterface, watcher watch.Interface) {
	for {
		resourceVersion := ""
		for event := range watcher.ResultChan() {
			object, ok := event.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			resourceVersion = object.GetResourceVersion()
			if event.Type == watch.Added {
				c.remember(object)
			}
		}
		watcher.Stop()
		if ctx.Err() != nil {
			return
		}
		var err error
		watcher, err = resource.Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion})
		if err != nil {
			c.fail(fmt.Errorf("reopening the watch at resource version %q: %w", resourceVersion, err))
			return
		}
	}
}

func (c *Creations) remember(object *unstructured.Unstructured) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.first[object.GetName()]; seen {
		return
	}
	c.first[object.GetName()] = object
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Creations) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	close(c.changed)
	c.changed = make(chan struct{})
}

// Created returns the object named name as it was when it was created,
// waiting for its watch event until ctx ends.
func (c *Creations) Created(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	for {
		c.mu.Lock()
		object, changed, err := c.first[name], c.changed, c.err
		c.mu.Unlock()
		switch {
		case object != nil:
			return object.DeepCopy(), nil
		case err != nil:
			return nil, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("no creation of %s seen: %w", name, ctx.Err())
		}
	}
}
