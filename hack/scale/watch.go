package main

import (
	"context"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/testenv"
)

// watcher follows pods, nodes and claims through informers, as the
// controller does, so that counting them every 200 ms costs the API server
// nothing; and it remembers every claim and node it ever saw, to compare
// with the launches the controller counted.
type watcher struct {
	cache cache.Cache
	ready chan struct{}

	mu                    sync.Mutex
	claimsSeen, nodesSeen map[string]bool
	// claimWrites counts claim updates: the controller still deciding
	// (a condition written as consolidation looks at a node for the first
	// time) is not idle.
	claimWrites       int
	podCPU, podMemory int64

	emptied *emptiedNodes
}

type snapshot struct {
	running, pending, claims, nodes int
	// terminating pods are being deleted; empty nodes run no pod that is
	// not.
	terminating, empty    int
	claimsSeen, nodesSeen int
	claimWrites           int
	perNode, lowerBound   int
	partlyFilled          int
	// going are the claims being deleted: a consolidation under way
	// counts its nodes among the claims and the partly filled.
	going int
}

func newWatcher(env *testenv.Environment, consolidateAfter time.Duration) *watcher {
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		panic(err)
	}
	return &watcher{cache: c, ready: make(chan struct{}), claimsSeen: map[string]bool{}, nodesSeen: map[string]bool{},
		emptied: newEmptiedNodes(consolidateAfter)}
}

func (w *watcher) run(ctx context.Context) {
	remember := func(seen map[string]bool) toolscache.ResourceEventHandlerFuncs {
		return toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			if o, ok := obj.(client.Object); ok {
				w.mu.Lock()
				seen[o.GetName()] = true
				w.mu.Unlock()
			}
		}}
	}
	rememberClaims := remember(w.claimsSeen)
	rememberClaims.UpdateFunc = func(_, _ any) {
		w.mu.Lock()
		w.claimWrites++
		w.mu.Unlock()
	}
	for _, watched := range []struct {
		object   client.Object
		handlers []toolscache.ResourceEventHandlerFuncs
	}{
		{&corev1.Pod{}, []toolscache.ResourceEventHandlerFuncs{w.emptied.podHandler()}},
		{&corev1.Node{}, []toolscache.ResourceEventHandlerFuncs{remember(w.nodesSeen)}},
		{&v1alpha1.NodeClaim{}, []toolscache.ResourceEventHandlerFuncs{rememberClaims, w.emptied.claimHandler()}},
	} {
		informer, err := w.cache.GetInformer(ctx, watched.object)
		if err != nil {
			panic(err)
		}
		for _, handler := range watched.handlers {
			if _, err := informer.AddEventHandler(handler); err != nil {
				panic(err)
			}
		}
	}
	go func() {
		if w.cache.WaitForCacheSync(ctx) {
			close(w.ready)
		}
	}()
	_ = w.cache.Start(ctx)
}

// snapshot counts the cluster now. The lower bound is the pods over the
// most that fit on one node of the pool's shape, by the allocatable of
// the nodes the provider made.
func (w *watcher) snapshot() snapshot {
	select {
	case <-w.ready:
	default:
		return snapshot{}
	}
	ctx := context.Background()
	var (
		pods   corev1.PodList
		nodes  corev1.NodeList
		claims v1alpha1.NodeClaimList
	)
	_ = w.cache.List(ctx, &pods, client.InNamespace("default"), client.UnsafeDisableDeepCopy)
	_ = w.cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy)
	_ = w.cache.List(ctx, &claims, client.UnsafeDisableDeepCopy)
	var s snapshot
	s.nodes, s.claims = len(nodes.Items), len(claims.Items)
	for i := range claims.Items {
		if !claims.Items[i].DeletionTimestamp.IsZero() {
			s.going++
		}
	}
	perNodePods := map[string]int{}
	workload := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !pod.DeletionTimestamp.IsZero() {
			s.terminating++
			continue
		}
		workload++
		switch pod.Status.Phase {
		case corev1.PodRunning:
			s.running++
		case corev1.PodPending:
			s.pending++
		}
		if pod.Spec.NodeName != "" {
			perNodePods[pod.Spec.NodeName]++
		}
		w.mu.Lock()
		if w.podCPU == 0 && len(pod.Spec.Containers) > 0 {
			w.podCPU = pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			w.podMemory = pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	s.claimsSeen, s.nodesSeen = len(w.claimsSeen), len(w.nodesSeen)
	s.claimWrites = w.claimWrites
	podCPU, podMemory := w.podCPU, w.podMemory
	w.mu.Unlock()
	for _, node := range nodes.Items {
		if perNodePods[node.Name] == 0 {
			s.empty++
		}
	}
	if len(nodes.Items) > 0 && podCPU > 0 && podMemory > 0 {
		allocatable := nodes.Items[0].Status.Allocatable
		s.perNode = int(min(allocatable.Cpu().MilliValue()/podCPU, allocatable.Memory().Value()/podMemory, allocatable.Pods().Value()))
		if s.perNode > 0 {
			s.lowerBound = int(math.Ceil(float64(workload) / float64(s.perNode)))
		}
		for _, node := range nodes.Items {
			if perNodePods[node.Name] < s.perNode {
				s.partlyFilled++
			}
		}
	}
	return s
}

// nodeNames names the nodes there are now.
func (w *watcher) nodeNames() map[string]bool {
	var nodes corev1.NodeList
	_ = w.cache.List(context.Background(), &nodes, client.UnsafeDisableDeepCopy)
	names := make(map[string]bool, len(nodes.Items))
	for i := range nodes.Items {
		names[nodes.Items[i].Name] = true
	}
	return names
}

// anyGone says whether one of the nodes named is no longer there.
func (w *watcher) anyGone(names map[string]bool) bool {
	now := w.nodeNames()
	for name := range names {
		if !now[name] {
			return true
		}
	}
	return false
}

// missedByKwok are the pods bound to a node for longer than after that
// are still Pending. kwok v0.8.0 drops a pod's events while it does not
// manage the pod's node yet, and lists a node's pods once when it starts
// managing it: a pod bound in between is never played (run 22: ten pods
// bound a second after their node was made, Pending for minutes while
// every other pod ran, Running within seconds of an update).
func (w *watcher) missedByKwok(after time.Duration) []*corev1.Pod {
	select {
	case <-w.ready:
	default:
		return nil
	}
	var pods corev1.PodList
	_ = w.cache.List(context.Background(), &pods, client.InNamespace("default"), client.UnsafeDisableDeepCopy)
	var missed []*corev1.Pod
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodPending || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		if bound := metrics.BoundAt(pod); !bound.IsZero() && time.Since(bound) > after {
			missed = append(missed, pod.DeepCopy())
		}
	}
	return missed
}
