// Package warmcapacity says what capacity a pool keeps ready before it is
// needed: its minNodes and headroom now, after its capacity schedules, and
// its headroom as placeholder pods that provisioning and disruption
// simulate like any other pod.
package warmcapacity

import (
	"context"
	"fmt"
	"math"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/cronwindow"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// Target is the warm capacity a pool asks for at one moment.
type Target struct {
	MinNodes int32
	// Headroom kept free; nil for none. Never external: Source resolves
	// an external headroom into pods, or into Nodes.
	Headroom *v1alpha1.Headroom
	// Nodes of headroom, each the room of an empty node of the pool's
	// cheapest shape (an external headroom with targetPerNode).
	Nodes int32
	// Unknown: the pool's external scaler has not been asked yet (a
	// controller just started), so the headroom is its floor for now and
	// nothing may be removed for want of it.
	Unknown bool
}

// Source says what warm capacity each pool asks for now. Provisioning and
// disruption share one, so scale-up and scale-down agree on it.
type Source struct {
	// Clock decides which capacity schedules are active; nil is the real
	// clock.
	Clock clock.PassiveClock
	// External holds the latest count of external headrooms; nil counts
	// every external headroom as its min.
	External ExternalCounts
	// Reservations keep room for other objects (CapacityBuffers, booked
	// ProvisioningRequests); see Reserved.
	Reservations []Reservations
}

// ExternalCounts says how many nodes or pods of headroom a pool's external
// scaler asks for now, already clamped to its min and max, and whether it
// has been asked at all.
type ExternalCounts interface {
	Count(pool *v1alpha1.NodePool) (count int32, known bool)
}

// Target is the pool's warm capacity now (see At), with an external
// headroom resolved into nodes or pods. A nil Source reads the real clock.
func (s *Source) Target(pool *v1alpha1.NodePool) (Target, error) {
	now := time.Now()
	if s != nil && s.Clock != nil {
		now = s.Clock.Now()
	}
	target, err := At(pool, now)
	if target.Headroom == nil || target.Headroom.External == nil {
		return target, err
	}
	external := target.Headroom.External
	count, known := external.Min, false
	if s != nil && s.External != nil {
		count, known = s.External.Count(pool)
	}
	target.Unknown = !known
	target.Headroom = nil
	switch {
	case external.TargetPerPod != nil && external.Pod != nil && count > 0:
		target.Headroom = &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: count, CPU: external.Pod.CPU, Memory: external.Pod.Memory}}
	case external.TargetPerNode != nil:
		target.Nodes = count
	}
	return target, err
}

// At works out the pool's target at now: its own minNodes and headroom,
// replaced by those of its active capacity schedules (the largest when
// several are active). A schedule that cannot be read is an error and
// leaves the pool's own values.
func At(pool *v1alpha1.NodePool, now time.Time) (Target, error) {
	target := Target{MinNodes: pool.Spec.MinNodes, Headroom: pool.Spec.Headroom}
	var (
		minNodes *int32
		headroom *v1alpha1.Headroom
	)
	for i, entry := range pool.Spec.CapacitySchedules {
		active, err := cronwindow.ActiveAt(entry.Schedule, entry.Duration.Duration, now)
		if err != nil {
			return target, fmt.Errorf("capacity schedule %d of pool %s: %w", i, pool.Name, err)
		}
		if !active {
			continue
		}
		if entry.MinNodes != nil && (minNodes == nil || *entry.MinNodes > *minNodes) {
			minNodes = entry.MinNodes
		}
		if entry.Headroom != nil && (headroom == nil || larger(entry.Headroom, headroom)) {
			headroom = entry.Headroom
		}
	}
	if minNodes != nil {
		target.MinNodes = *minNodes
	}
	if headroom != nil {
		target.Headroom = headroom
	}
	return target, nil
}

// larger compares two headrooms by the cpu, then the memory, they hold in
// total.
func larger(a, b *v1alpha1.Headroom) bool {
	ac, am := total(a)
	bc, bm := total(b)
	if ac != bc {
		return ac > bc
	}
	return am > bm
}

func total(h *v1alpha1.Headroom) (cpuMilli, memory int64) {
	for _, pod := range split(h) {
		cpuMilli += pod.cpu.MilliValue()
		memory += pod.memory.Value()
	}
	return cpuMilli, memory
}

// Resource headroom is kept in pieces of at most this size, so it may be
// spread over several nodes; headroom that must be in one piece is given
// as pods.
var (
	pieceCPU    = resource.MustParse("1")
	pieceMemory = resource.MustParse("4Gi")
)

// MaxPods caps the placeholder pods of one pool, so a huge headroom cannot
// make a simulation of millions of pods.
const MaxPods = 1000

type podSize struct{ cpu, memory resource.Quantity }

// split turns a headroom into the sizes of its placeholder pods.
func split(h *v1alpha1.Headroom) []podSize {
	if h == nil {
		return nil
	}
	if h.Pods != nil {
		size := podSize{cpu: h.Pods.CPU}
		if h.Pods.Memory != nil {
			size.memory = *h.Pods.Memory
		}
		sizes := make([]podSize, min(int(h.Pods.Count), MaxPods))
		for i := range sizes {
			sizes[i] = size
		}
		return sizes
	}
	var cpuMilli, memory int64
	if h.CPU != nil {
		cpuMilli = h.CPU.MilliValue()
	}
	if h.Memory != nil {
		memory = h.Memory.Value()
	}
	if cpuMilli <= 0 && memory <= 0 {
		return nil
	}
	n := max(ceilDiv(cpuMilli, pieceCPU.MilliValue()), ceilDiv(memory, pieceMemory.Value()), 1)
	n = min(n, MaxPods)
	// Pieces as equal as whole millicores and bytes allow, the remainder
	// on the first ones, so the pieces add up to the headroom exactly.
	sizes := make([]podSize, n)
	for i := range sizes {
		c := cpuMilli / n
		if int64(i) < cpuMilli%n {
			c++
		}
		m := memory / n
		if int64(i) < memory%n {
			m++
		}
		sizes[i] = podSize{cpu: *resource.NewMilliQuantity(c, resource.DecimalSI), memory: *resource.NewQuantity(m, resource.BinarySI)}
	}
	return sizes
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Namespace of the placeholder pods. They are never written to the API
// server; the name only keeps them apart from real pods in a simulation.
const Namespace = "claimscale-headroom"

// LowestPriority is the placeholder pods' priority: below every real pod,
// so real pods are placed first and take the room.
const LowestPriority = math.MinInt32

// Pods builds the placeholder pods of a pool's headroom: requests as
// given, the lowest priority, pinned to the pool's nodes (existing and
// new) by its nodepool label and tolerating the pool's taints and startup
// taints, so the headroom counts only where the pool's own pods could use
// it.
func Pods(pool *v1alpha1.NodePool, headroom *v1alpha1.Headroom) []*corev1.Pod {
	return placeholders(pool, split(headroom), "pod")
}

func placeholders(pool *v1alpha1.NodePool, sizes []podSize, kind string) []*corev1.Pod {
	if len(sizes) == 0 {
		return nil
	}
	var tolerations []corev1.Toleration
	for _, taint := range append(append([]corev1.Taint(nil), pool.Spec.Template.Taints...), pool.Spec.Template.StartupTaints...) {
		tolerations = append(tolerations, corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect})
	}
	priority := int32(LowestPriority)
	pods := make([]*corev1.Pod, 0, len(sizes))
	for i, size := range sizes {
		requests := corev1.ResourceList{corev1.ResourceCPU: size.cpu}
		if !size.memory.IsZero() {
			requests[corev1.ResourceMemory] = size.memory
		}
		name := fmt.Sprintf("%s-%s-%d", pool.Name, kind, i)
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: Namespace,
				UID:    types.UID(Namespace + "/" + name),
				Labels: map[string]string{v1alpha1.LabelNodePool: pool.Name},
			},
			Spec: corev1.PodSpec{
				Priority:     &priority,
				NodeSelector: map[string]string{v1alpha1.LabelNodePool: pool.Name},
				Tolerations:  tolerations,
				Containers: []corev1.Container{{
					Name:      "headroom",
					Resources: corev1.ResourceRequirements{Requests: requests},
				}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		})
	}
	return pods
}

// NodePods builds the placeholder pods of nodes of headroom: one per node,
// each requesting nine tenths of what an empty node of the pool's cheapest
// shape has free once its DaemonSet pods run, so each needs a node of its
// own, nearly empty. No shape (none offered now): none.
func NodePods(ctx context.Context, pool *v1alpha1.NodePool, nodes int32, shapes scheduling.Shapes, daemonSets []*appsv1.DaemonSet) ([]*corev1.Pod, error) {
	if nodes <= 0 {
		return nil, nil
	}
	candidates := shapes.Fixed
	if shapes.Flexible != nil {
		smallest, ok := shapes.Flexible.Smallest(shapes.Flexible.MinCPU, shapes.Flexible.MinMemory)
		if !ok {
			return nil, nil
		}
		candidates = []scheduling.Shape{smallest}
	}
	shape, ok := scheduling.Cheapest(candidates)
	if !ok {
		return nil, nil
	}
	node, err := scheduling.TemplateNode(pool, shape, "", pool.Name+"-headroom")
	if err != nil {
		return nil, fmt.Errorf("sizing a node of headroom of pool %s: %w", pool.Name, err)
	}
	daemons, err := scheduling.DaemonSetPods(ctx, node, daemonSets)
	if err != nil {
		return nil, fmt.Errorf("sizing a node of headroom of pool %s: %w", pool.Name, err)
	}
	free := podSize{cpu: node.Status.Allocatable.Cpu().DeepCopy(), memory: node.Status.Allocatable.Memory().DeepCopy()}
	for _, daemon := range daemons {
		for _, container := range daemon.Spec.Containers {
			free.cpu.Sub(*container.Resources.Requests.Cpu())
			free.memory.Sub(*container.Resources.Requests.Memory())
		}
	}
	if free.cpu.Sign() <= 0 {
		return nil, fmt.Errorf("a node of pool %s's cheapest shape %s has no cpu free for headroom", pool.Name, shape.Name)
	}
	if free.memory.Sign() < 0 {
		free.memory = resource.Quantity{}
	}
	// Nine tenths: still one placeholder per node, and a real node whose
	// kubelet reserves a little more than the template says still counts,
	// instead of a new node being bought for it every round.
	free.cpu = *resource.NewMilliQuantity(free.cpu.MilliValue()*9/10, resource.DecimalSI)
	free.memory = *resource.NewQuantity(free.memory.Value()/10*9, resource.BinarySI)
	sizes := make([]podSize, min(int(nodes), MaxPods))
	for i := range sizes {
		sizes[i] = free
	}
	return placeholders(pool, sizes, "node"), nil
}

// IsPlaceholder says whether a pod is a placeholder of Pods, NodePods or
// Reserved.
func IsPlaceholder(pod *corev1.Pod) bool {
	return pod.Namespace == Namespace
}
