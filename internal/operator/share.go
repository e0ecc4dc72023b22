package operator

import (
	"encoding/json"
	"slices"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxShared bounds each of sharedParts' tables. Parts that repeat (a
// Deployment's containers, labels, tolerations) are found again long before
// a table fills; parts that never repeat (a StatefulSet pod's labels) only
// fill it, and it is emptied when full.
const maxShared = 4096

// sharedParts lets cached pods that carry equal parts share one copy of
// each. The pods of one ReplicaSet differ in their names, UIDs, nodes and
// timestamps and in little else, yet every decoded pod holds its own maps
// of requests and labels, its own containers, tolerations and owner
// references: at ten thousand pods those copies were most of what the
// cache held. Sharing is safe because nothing writes to a cached pod (one
// that must look different is copied first, and a deep copy copies the
// shared parts too), and every shared slice is clipped, so an append to a
// shallow copy's slice allocates anew.
//
// Two parts are equal when their JSON is: JSON sorts map keys, and two
// values with the same encoding are the same to every reader.
type sharedParts struct {
	mu            sync.Mutex
	containers    sharedTable[[]corev1.Container]
	statuses      sharedTable[[]corev1.ContainerStatus]
	conditions    sharedTable[[]corev1.PodCondition]
	tolerations   sharedTable[[]corev1.Toleration]
	owners        sharedTable[[]metav1.OwnerReference]
	stringMaps    sharedTable[map[string]string]
	resourceLists sharedTable[corev1.ResourceList]
	affinities    sharedTable[*corev1.Affinity]
	spreads       sharedTable[[]corev1.TopologySpreadConstraint]
}

// sharedTable holds one copy of each distinct value, by its JSON.
type sharedTable[T any] struct {
	byJSON map[string]T
}

// share returns the table's copy of value, adding value if it has none.
func share[T any](table *sharedTable[T], value T) T {
	key, err := json.Marshal(value)
	if err != nil {
		return value
	}
	if shared, ok := table.byJSON[string(key)]; ok {
		return shared
	}
	if table.byJSON == nil || len(table.byJSON) >= maxShared {
		table.byJSON = map[string]T{}
	}
	table.byJSON[string(key)] = value
	return value
}

// shareSlice is share for a slice: nil for an empty one, and clipped.
func shareSlice[T any](table *sharedTable[[]T], value []T) []T {
	if len(value) == 0 {
		return nil
	}
	return share(table, slices.Clip(value))
}

// shareMap is share for a map: nil for an empty one.
func shareMap[M ~map[K]V, K comparable, V any](table *sharedTable[M], value M) M {
	if len(value) == 0 {
		return nil
	}
	return share(table, value)
}

// intern returns the one copy of a string many pods repeat (a namespace, a
// node's name, a phase).
func intern[S ~string](s S) S {
	if s == "" {
		return s
	}
	return S(unique.Make(string(s)).Value())
}

// pod replaces the parts of a stripped pod that others share with the
// shared copies.
func (p *sharedParts) pod(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()

	pod.Namespace = intern(pod.Namespace)
	pod.GenerateName = intern(pod.GenerateName)
	pod.Labels = shareMap(&p.stringMaps, pod.Labels)
	pod.Annotations = shareMap(&p.stringMaps, pod.Annotations)
	pod.OwnerReferences = shareSlice(&p.owners, pod.OwnerReferences)

	spec := &pod.Spec
	for _, containers := range []*[]corev1.Container{&spec.InitContainers, &spec.Containers} {
		for i := range *containers {
			p.requirements(&(*containers)[i].Resources)
		}
		*containers = shareSlice(&p.containers, *containers)
	}
	spec.NodeName = intern(spec.NodeName)
	spec.NodeSelector = shareMap(&p.stringMaps, spec.NodeSelector)
	if spec.Affinity != nil {
		spec.Affinity = share(&p.affinities, spec.Affinity)
	}
	spec.Tolerations = shareSlice(&p.tolerations, spec.Tolerations)
	spec.TopologySpreadConstraints = shareSlice(&p.spreads, spec.TopologySpreadConstraints)
	spec.Overhead = shareMap(&p.resourceLists, spec.Overhead)
	spec.SchedulerName = intern(spec.SchedulerName)
	spec.ServiceAccountName = intern(spec.ServiceAccountName)
	spec.DeprecatedServiceAccount = intern(spec.DeprecatedServiceAccount)
	spec.PriorityClassName = intern(spec.PriorityClassName)
	spec.RestartPolicy = intern(spec.RestartPolicy)
	spec.DNSPolicy = intern(spec.DNSPolicy)

	status := &pod.Status
	status.Phase = intern(status.Phase)
	status.QOSClass = intern(status.QOSClass)
	status.Conditions = shareSlice(&p.conditions, status.Conditions)
	for _, statuses := range []*[]corev1.ContainerStatus{&status.InitContainerStatuses, &status.ContainerStatuses, &status.EphemeralContainerStatuses} {
		for i := range *statuses {
			s := &(*statuses)[i]
			s.AllocatedResources = shareMap(&p.resourceLists, s.AllocatedResources)
			if s.Resources != nil {
				p.requirements(s.Resources)
			}
		}
		*statuses = shareSlice(&p.statuses, *statuses)
	}
}

func (p *sharedParts) requirements(resources *corev1.ResourceRequirements) {
	resources.Requests = shareMap(&p.resourceLists, resources.Requests)
	resources.Limits = shareMap(&p.resourceLists, resources.Limits)
}
