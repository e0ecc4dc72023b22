package warmcapacity

import (
	"context"
	"fmt"
	"maps"
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Reservations are room that objects other than a pool ask to keep, as
// placeholder pods: a CapacityBuffer's (headroom of the pools its pods can
// use, at the lowest priority, as a pool's own headroom) and a booked
// ProvisioningRequest's (pinned to the nodes bought or found for it, at
// the highest priority: other pods get the rest). Provisioning and
// disruption read them through the Source they share, so scale-up and
// scale-down keep the same room.
type Reservations interface {
	// Placeholders are the pods now; each is a Reserved pod.
	Placeholders(ctx context.Context) []*corev1.Pod
}

// Reserved is every reservation's placeholder pods now; none for a nil
// Source.
func (s *Source) Reserved(ctx context.Context) []*corev1.Pod {
	if s == nil {
		return nil
	}
	var pods []*corev1.Pod
	for _, reservations := range s.Reservations {
		pods = append(pods, reservations.Placeholders(ctx)...)
	}
	return pods
}

// AnnotationReservedFor on a placeholder pod names what keeps its room:
// "CapacityBuffer ns/name" or "ProvisioningRequest ns/name".
const AnnotationReservedFor = "claimscale.io/reserved-for"

// Priorities of reserved placeholders: a booking's pods are placed before
// every real pod, a buffer's after them all, as a pool's headroom.
const (
	BookedPriority = math.MaxInt32
	BufferPriority = LowestPriority
)

// Reserved builds a placeholder pod for owner ("CapacityBuffer ns/name")
// from a pod template: its spec as given (selectors, affinity,
// tolerations, requests) in the placeholder namespace, at priority, named
// by index. It is never written to the API server. A pod pinned to a node
// (node not empty) requires that node by name: it takes room there or
// nowhere, and never opens a node of its own.
func Reserved(owner, name string, index int, template *corev1.PodTemplateSpec, priority int32, node string) *corev1.Pod {
	podName := fmt.Sprintf("%s-%d", name, index)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName, Namespace: Namespace,
			UID:         types.UID(Namespace + "/" + podName),
			Labels:      maps.Clone(template.Labels),
			Annotations: map[string]string{AnnotationReservedFor: owner},
		},
		Spec:   *template.Spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	pod.Spec.NodeName = ""
	pod.Spec.Priority = &priority
	pod.Spec.PriorityClassName = ""
	if node != "" {
		pinTo(pod, node)
	}
	return pod
}

// pinTo adds a required node affinity to the node named node to every
// term the pod has (or makes the one term), as the DaemonSet controller
// pins its pods.
func pinTo(pod *corev1.Pod, node string) {
	byName := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil || len(required.NodeSelectorTerms) == 0 {
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{byName}}},
		}
		return
	}
	for i := range required.NodeSelectorTerms {
		required.NodeSelectorTerms[i].MatchFields = append(required.NodeSelectorTerms[i].MatchFields, byName)
	}
}

// Owner names what keeps a placeholder's room: "pool NAME" for a pool's
// headroom, else the reservation's owner.
func Owner(pod *corev1.Pod) string {
	if owner := pod.Annotations[AnnotationReservedFor]; owner != "" {
		return owner
	}
	return "pool " + pod.Labels[v1alpha1.LabelNodePool]
}

// IsBooked says whether a placeholder keeps a booking's room (placed
// before every real pod), not headroom.
func IsBooked(pod *corev1.Pod) bool {
	return IsPlaceholder(pod) && pod.Spec.Priority != nil && *pod.Spec.Priority == BookedPriority
}
