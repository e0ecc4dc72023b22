package capacitybuffer

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

// Buffers keep the room of every CapacityBuffer the controller resolved:
// its replicas of its pod template, as headroom placeholders at the lowest
// priority that may land on any node of any pool their pods can use.
// Provisioning and disruption read them (warmcapacity.Reservations).
type Buffers struct {
	mu       sync.Mutex
	resolved map[types.NamespacedName]resolved
}

// resolved is what a buffer asks for: replicas pods of template.
type resolved struct {
	template *corev1.PodTemplateSpec
	replicas int32
}

// keep records what a buffer asks for now; it reports whether that
// changed.
func (b *Buffers) keep(key types.NamespacedName, r resolved) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.resolved == nil {
		b.resolved = map[types.NamespacedName]resolved{}
	}
	old, ok := b.resolved[key]
	b.resolved[key] = r
	b.updateMetric()
	return !ok || old.replicas != r.replicas || !equality.Semantic.DeepEqual(old.template, r.template)
}

// forget drops a buffer; it reports whether it had one.
func (b *Buffers) forget(key types.NamespacedName) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.resolved[key]
	delete(b.resolved, key)
	b.updateMetric()
	return ok
}

func (b *Buffers) updateMetric() {
	total := 0
	for _, r := range b.resolved {
		total += int(r.replicas)
	}
	metrics.CapacityBufferPlaceholderPods.Set(float64(total))
}

// Placeholders are every buffer's pods, buffer by buffer in name order.
func (b *Buffers) Placeholders(context.Context) []*corev1.Pod {
	b.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(b.resolved))
	for key := range b.resolved {
		keys = append(keys, key)
	}
	snapshot := make(map[types.NamespacedName]resolved, len(b.resolved))
	for key, r := range b.resolved {
		snapshot[key] = r
	}
	b.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var pods []*corev1.Pod
	for _, key := range keys {
		r := snapshot[key]
		owner := "CapacityBuffer " + key.String()
		name := fmt.Sprintf("buffer-%s-%s", key.Namespace, key.Name)
		for i := range min(int(r.replicas), warmcapacity.MaxPods) {
			pods = append(pods, warmcapacity.Reserved(owner, name, i, r.template, warmcapacity.BufferPriority, ""))
		}
	}
	return pods
}
