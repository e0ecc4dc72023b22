package operator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
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
	if len(stripped.Spec.NodeSelector) != 1 || len(stripped.Spec.Tolerations) != 1 || len(stripped.Status.Conditions) != 1 {
		t.Errorf("the pod lost what scheduling reads: %+v", stripped.Spec)
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
