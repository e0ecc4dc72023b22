package warmcapacity

import (
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func ptr[T any](v T) *T { return &v }

func sum(pods []*corev1.Pod, name corev1.ResourceName) *resource.Quantity {
	total := resource.Quantity{}
	for _, pod := range pods {
		total.Add(pod.Spec.Containers[0].Resources.Requests[name])
	}
	return &total
}

func TestPods(t *testing.T) {
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "ci"},
		Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeTemplate{
			Taints:        []corev1.Taint{{Key: "dedicated", Value: "ci", Effect: corev1.TaintEffectNoSchedule}},
			StartupTaints: []corev1.Taint{{Key: "cni", Effect: corev1.TaintEffectNoExecute}},
		}},
	}
	tests := []struct {
		name               string
		headroom           *v1alpha1.Headroom
		pods               int
		cpu, memory        string
		largestCPU         string
		noMemoryOnAnyPiece bool
	}{
		{name: "no headroom makes no pods", headroom: nil, pods: 0, cpu: "0", memory: "0"},
		{name: "cpu is kept in pieces of one core", headroom: &v1alpha1.Headroom{CPU: qty("8")}, pods: 8, cpu: "8", memory: "0", largestCPU: "1", noMemoryOnAnyPiece: true},
		{name: "cpu and memory split into pieces that add up exactly", headroom: &v1alpha1.Headroom{CPU: qty("2500m"), Memory: qty("10Gi")}, pods: 3, cpu: "2500m", memory: "10Gi", largestCPU: "834m"},
		{name: "memory alone is kept in pieces of 4Gi", headroom: &v1alpha1.Headroom{Memory: qty("32Gi")}, pods: 8, cpu: "0", memory: "32Gi", largestCPU: "0"},
		{name: "pods of a size are kept whole", headroom: &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: 4, CPU: *qty("3"), Memory: qty("2Gi")}}, pods: 4, cpu: "12", memory: "8Gi", largestCPU: "3"},
		{name: "a huge headroom is capped", headroom: &v1alpha1.Headroom{CPU: qty("10000")}, pods: MaxPods, cpu: "10000", memory: "0", largestCPU: "10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := Pods(pool, tt.headroom)
			if len(pods) != tt.pods {
				t.Fatalf("%d pods, want %d", len(pods), tt.pods)
			}
			if got := sum(pods, corev1.ResourceCPU); got.Cmp(resource.MustParse(tt.cpu)) != 0 {
				t.Errorf("cpu %s in total, want %s", got, tt.cpu)
			}
			if got := sum(pods, corev1.ResourceMemory); got.Cmp(resource.MustParse(tt.memory)) != 0 {
				t.Errorf("memory %s in total, want %s", got, tt.memory)
			}
			names := map[string]bool{}
			for _, pod := range pods {
				if !IsPlaceholder(pod) || names[pod.Name] {
					t.Errorf("pod %s/%s is not a distinct placeholder", pod.Namespace, pod.Name)
				}
				names[pod.Name] = true
				if pod.Spec.Priority == nil || *pod.Spec.Priority != math.MinInt32 {
					t.Errorf("pod %s has priority %v, want the lowest", pod.Name, pod.Spec.Priority)
				}
				if pod.Spec.NodeSelector[v1alpha1.LabelNodePool] != "ci" || pod.Spec.NodeName != "" {
					t.Errorf("pod %s is not pinned to pool ci and unbound: %v %q", pod.Name, pod.Spec.NodeSelector, pod.Spec.NodeName)
				}
				if len(pod.Spec.Tolerations) != 2 || !pod.Spec.Tolerations[0].ToleratesTaint(klog.Background(), &pool.Spec.Template.Taints[0], false) ||
					!pod.Spec.Tolerations[1].ToleratesTaint(klog.Background(), &pool.Spec.Template.StartupTaints[0], false) {
					t.Errorf("pod %s tolerates %v, want exactly the pool's taints and startup taints", pod.Name, pod.Spec.Tolerations)
				}
				requests := pod.Spec.Containers[0].Resources.Requests
				if cpu := requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse(tt.largestCPU)) > 0 {
					t.Errorf("pod %s requests %s cpu, more than %s", pod.Name, cpu.String(), tt.largestCPU)
				}
				if _, ok := requests[corev1.ResourceMemory]; ok && tt.noMemoryOnAnyPiece {
					t.Errorf("pod %s requests memory %v", pod.Name, requests)
				}
			}
		})
	}
}

func TestAt(t *testing.T) {
	small := &v1alpha1.Headroom{CPU: qty("2")}
	large := &v1alpha1.Headroom{Pods: &v1alpha1.HeadroomPods{Count: 2, CPU: *qty("4")}}
	base := &v1alpha1.Headroom{CPU: qty("1")}
	workdays := v1alpha1.CapacitySchedule{Schedule: "0 7 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour}, MinNodes: ptr(int32(5)), Headroom: small}
	mornings := v1alpha1.CapacitySchedule{Schedule: "0 8 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}, MinNodes: ptr(int32(3)), Headroom: large}
	monday := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		schedules []v1alpha1.CapacitySchedule
		now       time.Time
		minNodes  int32
		headroom  *v1alpha1.Headroom
		wantErr   bool
	}{
		{name: "no schedule keeps the pool's values", now: monday.Add(9 * time.Hour), minNodes: 1, headroom: base},
		{name: "before the window the pool's values hold", schedules: []v1alpha1.CapacitySchedule{workdays}, now: monday.Add(6*time.Hour + 59*time.Minute), minNodes: 1, headroom: base},
		{name: "inside the window its values replace the pool's", schedules: []v1alpha1.CapacitySchedule{workdays}, now: monday.Add(7 * time.Hour), minNodes: 5, headroom: small},
		{name: "after the window the pool's values are back", schedules: []v1alpha1.CapacitySchedule{workdays}, now: monday.Add(19*time.Hour + time.Second), minNodes: 1, headroom: base},
		{name: "not on a weekend", schedules: []v1alpha1.CapacitySchedule{workdays}, now: monday.Add(-24*time.Hour + 9*time.Hour), minNodes: 1, headroom: base},
		{name: "several active: the largest of each wins", schedules: []v1alpha1.CapacitySchedule{workdays, mornings}, now: monday.Add(9 * time.Hour), minNodes: 5, headroom: large},
		{name: "an entry without headroom keeps the pool's", schedules: []v1alpha1.CapacitySchedule{{Schedule: "@daily", Duration: metav1.Duration{Duration: time.Hour}, MinNodes: ptr(int32(0))}}, now: monday.Add(time.Minute), minNodes: 0, headroom: base},
		{name: "a schedule that does not parse is an error and keeps the pool's values", schedules: []v1alpha1.CapacitySchedule{{Schedule: "CRON_TZ=Europe/Zurich 0 7 * * *", Duration: metav1.Duration{Duration: time.Hour}, MinNodes: ptr(int32(9))}}, now: monday.Add(7 * time.Hour), minNodes: 1, headroom: base, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "ci"}, Spec: v1alpha1.NodePoolSpec{MinNodes: 1, Headroom: base, CapacitySchedules: tt.schedules}}
			target, err := At(pool, tt.now)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if target.MinNodes != tt.minNodes || target.Headroom != tt.headroom {
				t.Errorf("minNodes %d headroom %+v, want %d %+v", target.MinNodes, target.Headroom, tt.minNodes, tt.headroom)
			}
		})
	}
}
