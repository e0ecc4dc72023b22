package operator

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCachedObjectsLoseWhatNothingReads(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name:          "p",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations: map[string]string{
			corev1.LastAppliedConfigAnnotation: `{"kind":"Pod"}`,
			"claimscale.io/do-not-disrupt":     "true",
		},
	}}
	out, err := stripUnread(pod)
	if err != nil {
		t.Fatal(err)
	}
	stripped := out.(*corev1.Pod)
	if stripped.ManagedFields != nil {
		t.Errorf("managed fields kept: %v", stripped.ManagedFields)
	}
	if _, ok := stripped.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("last-applied-configuration kept")
	}
	if stripped.Annotations["claimscale.io/do-not-disrupt"] != "true" {
		t.Errorf("an annotation the controllers read was dropped: %v", stripped.Annotations)
	}
	if _, err := stripUnread("not an object"); err != nil {
		t.Errorf("a value that is no object: %v", err)
	}
}

func TestCachedPodsAndNodesKeepWhatSchedulingReads(t *testing.T) {
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	finished := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	container := corev1.Container{
		Name: "app", Image: "app:1", Command: []string{"/app"}, Args: []string{"--serve"},
		Env:           []corev1.EnvVar{{Name: "SECRET_SOUNDING", Value: "x"}},
		Resources:     corev1.ResourceRequirements{Requests: requests},
		Ports:         []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}},
		LivenessProbe: probe, ReadinessProbe: probe,
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{container},
			Containers:     []corev1.Container{container},
			NodeSelector:   map[string]string{"zone": "a"},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
		},
		Status: corev1.PodStatus{
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible},
			},
			PodIP: "10.244.0.3", PodIPs: []corev1.PodIP{{IP: "10.244.0.3"}}, StartTime: &finished,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", Image: "app:1", ImageID: "sha256:abc", ContainerID: "containerd://abc", RestartCount: 3,
				AllocatedResources: requests,
				Resources:          &corev1.ResourceRequirements{Requests: requests},
				State:              corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: finished}},
			}},
		},
	}
	out, err := stripPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	stripped := out.(*corev1.Pod)
	if stripped.ManagedFields != nil {
		t.Error("managed fields kept")
	}
	for _, c := range append(stripped.Spec.InitContainers, stripped.Spec.Containers...) {
		if c.Image != "" || c.Command != nil || c.Args != nil || c.Env != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil {
			t.Errorf("container %s keeps what no filter reads: %+v", c.Name, c)
		}
		if !c.Resources.Requests.Cpu().Equal(resource.MustParse("500m")) || len(c.Ports) != 1 || c.Ports[0].HostPort != 8080 {
			t.Errorf("container %s lost its requests or host port: %+v", c.Name, c)
		}
	}
	if len(stripped.Spec.Volumes) != 1 || stripped.Spec.Volumes[0].PersistentVolumeClaim == nil {
		t.Errorf("volumes kept: %+v, want only the claim the volume plugins read", stripped.Spec.Volumes)
	}
	if len(stripped.Spec.NodeSelector) != 1 || len(stripped.Spec.Tolerations) != 1 {
		t.Errorf("the pod lost what scheduling reads: %+v", stripped.Spec)
	}
	var conditions []corev1.PodConditionType
	for _, condition := range stripped.Status.Conditions {
		conditions = append(conditions, condition.Type)
	}
	if !slices.Equal(conditions, []corev1.PodConditionType{corev1.PodScheduled, corev1.PodResizePending}) {
		t.Errorf("conditions kept: %v, want PodScheduled (pending, bound when) and the resize the scheduler's accounting reads", conditions)
	}
	if stripped.Status.PodIP != "" || stripped.Status.PodIPs != nil || stripped.Status.StartTime != nil {
		t.Errorf("the status keeps what nothing reads: %+v", stripped.Status)
	}
	status := stripped.Status.ContainerStatuses[0]
	if status.Image != "" || status.ImageID != "" || status.ContainerID != "" || status.RestartCount != 0 {
		t.Errorf("the container status keeps what nothing reads: %+v", status)
	}
	if status.Name != "app" || status.Resources == nil || status.AllocatedResources.Cpu().IsZero() ||
		status.State.Terminated == nil || !status.State.Terminated.FinishedAt.Equal(&finished) {
		t.Errorf("the container status lost its resources or its termination: %+v", status)
	}

	node := &corev1.Node{Status: corev1.NodeStatus{
		Images:      []corev1.ContainerImage{{Names: []string{"app:1"}, SizeBytes: 1 << 20}},
		Allocatable: requests,
	}}
	out, err = stripNode(node)
	if err != nil {
		t.Fatal(err)
	}
	if stripped := out.(*corev1.Node); stripped.Status.Images != nil || stripped.Status.Allocatable.Cpu().IsZero() {
		t.Errorf("the node keeps its images or lost its allocatable: %+v", stripped.Status)
	}
}

func TestCachedPodsShareWhatTheyHaveInCommon(t *testing.T) {
	replicaSetPod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: "shop", Labels: map[string]string{"app": "web", "pod-template-hash": "5d9c"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d9c", UID: "rs-1"}},
			},
			Spec: corev1.PodSpec{
				NodeName: node,
				Containers: []corev1.Container{{Name: "app", Image: "web:1", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("800m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				}}},
				// Room to spare, as a decoded slice may have.
				Tolerations: append(make([]corev1.Toleration, 0, 4),
					corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}),
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
				}}},
			},
		}
	}
	parts := &sharedParts{}
	cache := func(pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		want, _ := stripPod(pod.DeepCopy())
		out, err := parts.transform(pod)
		if err != nil {
			t.Fatal(err)
		}
		cached := out.(*corev1.Pod)
		if !equality.Semantic.DeepEqual(cached, want) {
			t.Fatalf("sharing changed the pod %s:\n got %+v\nwant %+v", pod.Name, cached, want)
		}
		return cached
	}
	first := cache(replicaSetPod("web-1", "node-1"))
	second := cache(replicaSetPod("web-2", "node-2"))
	if &first.Spec.Containers[0] != &second.Spec.Containers[0] || &first.Spec.Tolerations[0] != &second.Spec.Tolerations[0] ||
		&first.OwnerReferences[0] != &second.OwnerReferences[0] || first.Spec.Affinity != second.Spec.Affinity ||
		reflect.ValueOf(first.Labels).UnsafePointer() != reflect.ValueOf(second.Labels).UnsafePointer() {
		t.Error("two pods of one ReplicaSet hold copies of their containers, tolerations, owner, affinity or labels")
	}

	// A pod that differs in one part shares the others, never that one.
	other := replicaSetPod("web-3", "node-3")
	other.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("900m")
	other.Labels["pod-template-hash"] = "7f00"
	third := cache(other)
	if &third.Spec.Containers[0] == &first.Spec.Containers[0] || third.Labels["pod-template-hash"] != "7f00" {
		t.Errorf("a pod with other requests or labels was given the first pod's: %+v", third)
	}
	if &third.Spec.Tolerations[0] != &first.Spec.Tolerations[0] {
		t.Error("a pod that differs only in its requests and labels does not share its tolerations")
	}

	// An append to a shallow copy's shared slice leaves the cached pods
	// alone.
	moved := *first
	moved.Spec.Tolerations = append(moved.Spec.Tolerations, corev1.Toleration{Key: "extra", Operator: corev1.TolerationOpExists})
	if len(second.Spec.Tolerations) != 1 || &moved.Spec.Tolerations[0] == &second.Spec.Tolerations[0] {
		t.Errorf("an append to a copy wrote into the shared tolerations: %+v", second.Spec.Tolerations)
	}
}
