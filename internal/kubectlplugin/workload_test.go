package kubectlplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestReadWorkloadMakesThePendingPodsOfEachKind(t *testing.T) {
	file := filepath.Join(t.TempDir(), "workload.yaml")
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: x, resources: {requests: {cpu: 500m}}}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: jobs}
spec:
  parallelism: 2
  template: {spec: {restartPolicy: Never, containers: [{name: app, image: x}]}}
`
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	pods, err := readWorkload(file, "shop")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range pods {
		names = append(names, pod.Namespace+"/"+pod.Name)
		if len(pod.Status.Conditions) != 1 || pod.Status.Conditions[0].Reason != corev1.PodReasonUnschedulable {
			t.Errorf("pod %s is not pending as the scheduler leaves it: %+v", pod.Name, pod.Status.Conditions)
		}
	}
	if got := strings.Join(names, " "); got != "shop/web-0 shop/web-1 shop/web-2 jobs/batch-0 jobs/batch-1" {
		t.Fatalf("pods %s", got)
	}
	if cpu := pods[0].Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("500m")) != 0 {
		t.Fatalf("requests %v", cpu)
	}

	if err := os.WriteFile(file, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readWorkload(file, "shop"); err == nil || !strings.Contains(err.Error(), "Secret is not a Deployment, StatefulSet, Job or Pod") {
		t.Fatalf("a Secret in the workload: %v", err)
	}
}

func TestStripPodKeepsWhatSchedulingReadsOnly(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"disk": "ssd"},
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1", Command: []string{"serve"},
			Env:       []corev1.EnvVar{{Name: "PASSWORD", Value: "hunter2"}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}},
		Volumes: []corev1.Volume{
			{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		},
	}}
	pod.Annotations = map[string]string{"secret-ish": "x"}
	stripped := stripPod(pod)
	c := stripped.Spec.Containers[0]
	if c.Env != nil || c.Image != "" || c.Command != nil || stripped.Annotations != nil {
		t.Fatalf("kept more than scheduling reads: %+v %v", c, stripped.Annotations)
	}
	if len(stripped.Spec.Volumes) != 1 || stripped.Spec.Volumes[0].Name != "data" || stripped.Spec.NodeSelector["disk"] != "ssd" || c.Resources.Requests.Cpu().String() != "1" {
		t.Fatalf("lost what scheduling reads: %+v", stripped.Spec)
	}
}
