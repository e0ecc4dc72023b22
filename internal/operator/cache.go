package operator

import (
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// CacheOptions limit the informer of ConfigMaps (the simulated provider's
// machine records) to the controller's namespace, and that of Secrets to
// the simulated machines' user data there: the controller has no
// permission, and no business, watching them cluster-wide. Other Secrets
// (credentials, bootstrap tokens) are read uncached.
//
// Every cached object loses its managed fields and kubectl's
// last-applied-configuration annotation, which nothing here reads and
// which are often half of what a pod weighs: at ten thousand pods that is
// most of the controller's memory. Pods and nodes lose more (stripPod,
// stripNode).
func CacheOptions(namespace string) cache.Options {
	pods := &sharedParts{}
	return cache.Options{DefaultTransform: stripUnread, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:  {Transform: pods.transform},
		&corev1.Node{}: {Transform: stripNode},
		// Node repair reads the kubelets' heartbeat Leases, and only those.
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{corev1.NamespaceNodeLease: {}}},
		&corev1.ConfigMap{}:     {Namespaces: map[string]cache.Config{namespace: {}}},
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{namespace: {
			LabelSelector: labels.SelectorFromSet(labels.Set{simulated.LabelMachine: "true"}),
		}}},
	}}
}

// stripUnread drops what no controller reads from an object about to be
// cached. It is safe for writes: an update without managed fields keeps the
// stored ones, and the annotation is only ever written by kubectl.
func stripUnread(in any) (any, error) {
	object, err := meta.Accessor(in)
	if err != nil {
		// Not an object (a tombstone, say): nothing to strip.
		return in, nil
	}
	if object.GetManagedFields() != nil {
		object.SetManagedFields(nil)
	}
	if annotations := object.GetAnnotations(); annotations[corev1.LastAppliedConfigAnnotation] != "" {
		delete(annotations, corev1.LastAppliedConfigAnnotation)
		object.SetAnnotations(annotations)
	}
	return in, nil
}

// stripPod keeps of a pod what scheduling, disruption and the claim
// lifecycle read. Of its containers: names, resources, ports and restart
// policies (sidecars), as the kubectl plugin's snapshots keep them;
// commands, environment, probes, mounts and the rest no Filter plugin
// reads, and in a real workload they are most of what a pod weighs. Of its
// volumes: those the volume plugins read (claims, ephemeral, CSI and the
// in-tree disks), not the ConfigMaps, Secrets, projected service account
// tokens, downward API and emptyDirs nearly every pod carries. Of its
// containers' statuses: names, resources (requests resized in place count
// from there) and terminations (when a finished pod left its node). Of its
// conditions: all but the four readiness ones the kubelet writes (Ready,
// ContainersReady, Initialized, PodReadyToStartContainers), which nothing
// here reads; PodScheduled (pending, bound when) and the resize conditions
// the scheduler's resource accounting reads stay. Its IPs, start time and
// security context go too.
// Nothing here writes a pod back: evictions and deletions name it only.
func stripPod(in any) (any, error) {
	in, _ = stripUnread(in)
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			c := &containers[i]
			*c = corev1.Container{Name: c.Name, Resources: c.Resources, Ports: c.Ports, RestartPolicy: c.RestartPolicy}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i].EphemeralContainerCommon
		*c = corev1.EphemeralContainerCommon{Name: c.Name, Resources: c.Resources, Ports: c.Ports, RestartPolicy: c.RestartPolicy}
	}
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(volume corev1.Volume) bool {
		source := volume.VolumeSource
		return source.ConfigMap != nil || source.Secret != nil || source.Projected != nil || source.DownwardAPI != nil || source.EmptyDir != nil
	})
	if len(pod.Spec.Volumes) == 0 {
		pod.Spec.Volumes = nil
	}
	pod.Spec.SecurityContext = nil
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range statuses {
			status := &statuses[i]
			*status = corev1.ContainerStatus{
				Name: status.Name, Resources: status.Resources, AllocatedResources: status.AllocatedResources,
				State: corev1.ContainerState{Terminated: status.State.Terminated},
			}
		}
	}
	// Copied out, so the decoded array of all five conditions goes.
	pod.Status.Conditions = slices.Clone(slices.DeleteFunc(pod.Status.Conditions, func(condition corev1.PodCondition) bool {
		switch condition.Type {
		case corev1.PodReady, corev1.ContainersReady, corev1.PodInitialized, corev1.PodReadyToStartContainers:
			return true
		}
		return false
	}))
	pod.Status.HostIP, pod.Status.HostIPs, pod.Status.PodIP, pod.Status.PodIPs = "", nil, "", nil
	pod.Status.StartTime = nil
	return pod, nil
}

// transform strips a pod about to be cached and shares its common parts
// with the pods cached before it.
func (p *sharedParts) transform(in any) (any, error) {
	in, _ = stripPod(in)
	if pod, ok := in.(*corev1.Pod); ok {
		p.pod(pod)
	}
	return in, nil
}

// stripNode drops the images a kubelet reports its node has pulled (up to
// 50 names each): only the ImageLocality score reads them, and no score
// plugin runs here.
func stripNode(in any) (any, error) {
	in, _ = stripUnread(in)
	if node, ok := in.(*corev1.Node); ok {
		node.Status.Images = nil
	}
	return in, nil
}
