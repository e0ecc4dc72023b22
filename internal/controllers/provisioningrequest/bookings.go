package provisioningrequest

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

// Bookings keep the room of the requests being provisioned and of those
// provisioned whose pods have not all arrived: one placeholder per pod of
// the request that is not there yet, pinned to the node (or the booting
// claim) the request's simulation put it on, placed before every real pod.
// Provisioning and disruption read them (warmcapacity.Reservations), so
// other pending pods do not take the room and consolidation does not
// remove it. They live in memory: after a restart the controller books
// every request again from the cluster (restore).
type Bookings struct {
	// Kube reads the consuming pods and the claims (the manager's cache).
	Kube client.Reader

	mu     sync.Mutex
	booked map[types.NamespacedName]*booking
}

// booking is one request's room: a pod template and a pin per pod.
type booking struct {
	uid   types.UID
	class string
	pods  []bookedPod
}

// bookedPod is where one of a request's pods has its room: an existing
// node, or a claim (its node once registered, its phantom until then).
type bookedPod struct {
	template *corev1.PodTemplateSpec
	node     string
	claim    string
}

// book keeps a request's room, replacing what was kept for it before.
func (b *Bookings) book(key types.NamespacedName, bk *booking) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.booked == nil {
		b.booked = map[types.NamespacedName]*booking{}
	}
	b.booked[key] = bk
	b.updateMetric()
}

// forget lets a request's room go; it reports whether there was any.
func (b *Bookings) forget(key types.NamespacedName) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.booked[key]
	delete(b.booked, key)
	b.updateMetric()
	return ok
}

// has says whether the request with this UID has its room kept.
func (b *Bookings) has(key types.NamespacedName, uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	bk, ok := b.booked[key]
	return ok && bk.uid == uid
}

func (b *Bookings) updateMetric() {
	counts := map[string]int{autoscalingv1.ClassCheckCapacity: 0, autoscalingv1.ClassBestEffortAtomicScaleUp: 0}
	for _, bk := range b.booked {
		counts[bk.class]++
	}
	for class, n := range counts {
		metrics.ProvisioningRequestsBooked.WithLabelValues(class).Set(float64(n))
	}
}

// Placeholders are the booked pods not yet there, of every request.
func (b *Bookings) Placeholders(ctx context.Context) []*corev1.Pod {
	return b.placeholders(ctx, types.NamespacedName{})
}

// placeholders are the booked pods not yet there, of every request but
// except.
func (b *Bookings) placeholders(ctx context.Context, except types.NamespacedName) []*corev1.Pod {
	b.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(b.booked))
	bookings := make(map[types.NamespacedName]*booking, len(b.booked))
	for key, bk := range b.booked {
		if key != except {
			keys = append(keys, key)
			bookings[key] = bk
		}
	}
	b.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	nodeOfClaim, err := b.claimNodes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "booked pods left out this round")
		return nil
	}
	var pods []*corev1.Pod
	for _, key := range keys {
		arrived, err := consumers(ctx, b.Kube, key)
		if err != nil {
			log.FromContext(ctx).Error(err, "booked pods left out this round", "provisioningRequest", key.String())
			continue
		}
		bk := bookings[key]
		owner := "ProvisioningRequest " + key.String()
		name := fmt.Sprintf("provreq-%s-%s", key.Namespace, key.Name)
		// A pod of the request that arrived takes the room of a
		// placeholder on its node; one not bound yet, or bound where none
		// was booked, that of the first placeholder left.
		bound := maps.Clone(arrived.byNode)
		nodes := make([]string, len(bk.pods))
		for i, pod := range bk.pods {
			nodes[i] = pod.node
			if pod.claim != "" {
				nodes[i] = pod.claim
				if registered := nodeOfClaim[pod.claim]; registered != "" {
					nodes[i] = registered
				}
			}
		}
		taken := make([]bool, len(bk.pods))
		for i, node := range nodes {
			if bound[node] > 0 {
				bound[node]--
				taken[i] = true
			}
		}
		elsewhere := arrived.unbound
		for _, n := range bound {
			elsewhere += n
		}
		for i, pod := range bk.pods {
			if taken[i] {
				continue
			}
			if elsewhere > 0 {
				elsewhere--
				continue
			}
			pods = append(pods, warmcapacity.Reserved(owner, name, i, pod.template, warmcapacity.BookedPriority, nodes[i]))
		}
	}
	return pods
}

// claimNodes maps each registered claim to its node's name.
func (b *Bookings) claimNodes(ctx context.Context) (map[string]string, error) {
	var claims v1alpha1.NodeClaimList
	if err := b.Kube.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing claims for the booked pods: %w", err)
	}
	nodes := make(map[string]string, len(claims.Items))
	for i := range claims.Items {
		if name := claims.Items[i].Status.NodeName; name != "" {
			nodes[claims.Items[i].Name] = name
		}
	}
	return nodes, nil
}

// arrival is where a request's pods that are there (not finished, not
// leaving) are: the number bound to each node, and how many are not bound
// yet.
type arrival struct {
	byNode  map[string]int
	unbound int
}

// bound is how many of the request's pods are bound.
func (a arrival) bound() int {
	n := 0
	for _, count := range a.byNode {
		n += count
	}
	return n
}

// consumers finds the request's pods that are there: pods that name the
// request in their consume-provisioning-request annotation (Kueue sets it
// on the pods of a workload it admitted through the request).
func consumers(ctx context.Context, kube client.Reader, key types.NamespacedName) (arrival, error) {
	var pods corev1.PodList
	if err := kube.List(ctx, &pods, client.InNamespace(key.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return arrival{}, fmt.Errorf("listing the pods of namespace %s: %w", key.Namespace, err)
	}
	found := arrival{byNode: map[string]int{}}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if consumed(pod) != key.Name || !pod.DeletionTimestamp.IsZero() || scheduling.Terminated(pod) {
			continue
		}
		if pod.Spec.NodeName != "" {
			found.byNode[pod.Spec.NodeName]++
		} else {
			found.unbound++
		}
	}
	return found, nil
}

// consumed is the name of the request a pod says it uses, "" for none.
func consumed(pod *corev1.Pod) string {
	if name := pod.Annotations[autoscalingv1.AnnotationConsumeProvisioningRequest]; name != "" {
		return name
	}
	return pod.Annotations[autoscalingv1.AnnotationConsumeProvisioningRequestLegacy]
}
