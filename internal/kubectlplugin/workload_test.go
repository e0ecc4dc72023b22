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
	dir := t.TempDir()
	manifest := `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: app, image: x, resources: {requests: {cpu: 500m}}}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: jobs}
spec:
  parallelism: 2
  template: {spec: {restartPolicy: Never, containers: [{name: app, image: x}]}}
`
	list := `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}},
  {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
   "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {"metadata": {"labels": {"app": "agent"}},
   "spec": {"containers": [{"name": "agent", "image": "x"}]}}}},
  {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
]}`
	stdin := "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n  schedule: '@daily'\n  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: app, image: x}]}}}}\n"
	if err := os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "more.json"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a manifest"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := readWorkloads([]string{dir, "-"}, strings.NewReader(stdin), "shop")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range w.pods {
		names = append(names, pod.Namespace+"/"+pod.Name)
		if len(pod.Status.Conditions) != 1 || pod.Status.Conditions[0].Reason != corev1.PodReasonUnschedulable {
			t.Errorf("pod %s is not pending as the scheduler leaves it: %+v", pod.Name, pod.Status.Conditions)
		}
	}
	if got := strings.Join(names, " "); got != "shop/web-0 shop/web-1 shop/web-2 jobs/batch-0 jobs/batch-1 shop/nightly-0" {
		t.Fatalf("pods %s", got)
	}
	if cpu := w.pods[0].Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("500m")) != 0 {
		t.Fatalf("requests %v", cpu)
	}
	if len(w.daemonSets) != 1 || w.daemonSets[0].Name != "agent" || w.daemonSets[0].Namespace != "shop" {
		t.Fatalf("DaemonSets %+v", w.daemonSets)
	}
	if got := w.skippedNote(); got != "skipped 4 objects that make no pods: ConfigMap settings, Namespace shop, Service web, Widget w" {
		t.Fatalf("note %q", got)
	}

	if _, err := readWorkloads([]string{filepath.Join(dir, "missing.yaml")}, nil, "shop"); err == nil {
		t.Fatal("a missing file read without error")
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("kind: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readWorkloads([]string{filepath.Join(dir, "bad.yaml")}, nil, "shop"); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("a broken file: %v", err)
	}
}

func TestAdmitSeesPodsAsTheAPIServerStoresThem(t *testing.T) {
	limitRange := corev1.LimitRange{}
	limitRange.Name = "defaults"
	limitRange.Spec.Limits = []corev1.LimitRangeItem{{
		Type:           corev1.LimitTypeContainer,
		DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("700m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Default:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
		Max:            corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
	}}
	container := func(requests, limits corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}}}}
	}
	for _, tt := range []struct {
		name    string
		pod     *corev1.Pod
		ranges  []corev1.LimitRange
		want    corev1.ResourceList
		refused string
	}{{
		name: "limits only: requests are the limits, an extended resource's too",
		pod:  container(nil, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("1")}),
		want: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("1")},
	}, {
		name:   "no requests: the LimitRange's default requests",
		pod:    container(nil, nil),
		ranges: []corev1.LimitRange{limitRange},
		want:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("700m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}, {
		name:   "a cpu limit only: requested as limited, memory from the LimitRange",
		pod:    container(nil, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}),
		ranges: []corev1.LimitRange{limitRange},
		want:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}, {
		name:    "over the LimitRange's maximum: refused",
		pod:     container(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")}, nil),
		ranges:  []corev1.LimitRange{limitRange},
		refused: "maximum cpu usage per Container is 4",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			err := admit(tt.pod, tt.ranges)
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("admitted with %v, want refused with %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := tt.pod.Spec.Containers[0].Resources.Requests
			if len(got) != len(tt.want) {
				t.Fatalf("requests %v, want %v", got, tt.want)
			}
			for name, want := range tt.want {
				if q := got[name]; q.Cmp(want) != 0 {
					t.Errorf("%s requested %s, want %s", name, q.String(), want.String())
				}
			}
		})
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
