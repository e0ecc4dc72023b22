package clusterstate

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestUpdatesThatChangeNoDecisionAreNotCounted(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "1", Generation: 1},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool", ResourceVersion: "1", Generation: 1}}
	provider := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "provider", ResourceVersion: "1", Generation: 1},
		Status:     v1alpha1.NodeProviderStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}}},
	}
	tests := []struct {
		name     string
		relevant func(old, updated any) bool
		old      any
		update   func() any
		want     bool
	}{
		{"a node's heartbeat", NodeChanged, node, func() any {
			n := node.DeepCopy()
			n.ResourceVersion = "2"
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
			return n
		}, false},
		{"a node's taint", NodeChanged, node, func() any {
			n := node.DeepCopy()
			n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
			return n
		}, true},
		{"a node turning NotReady", NodeChanged, node, func() any {
			n := node.DeepCopy()
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			return n
		}, true},
		{"a node's label", NodeChanged, node, func() any {
			n := node.DeepCopy()
			n.Labels["zone"] = "b"
			return n
		}, true},
		{"a pod's readiness", podChanged, pod, func() any {
			p := pod.DeepCopy()
			p.ResourceVersion = "2"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			return p
		}, false},
		{"a pod bound", podChanged, pod, func() any {
			p := pod.DeepCopy()
			p.Spec.NodeName = "n"
			return p
		}, true},
		{"a pod nominated to a node", podChanged, pod, func() any {
			p := pod.DeepCopy()
			p.Status.NominatedNodeName = "n"
			return p
		}, true},
		{"a pod annotated do-not-disrupt", podChanged, pod, func() any {
			p := pod.DeepCopy()
			p.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
			return p
		}, true},
		{"a pod the scheduler gave up on", podChanged, pod, func() any {
			p := pod.DeepCopy()
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
			return p
		}, true},
		{"a pool's status", specChanged, pool, func() any {
			p := pool.DeepCopy()
			p.ResourceVersion = "2"
			p.Status.Nodes = 3
			return p
		}, false},
		{"a pool's spec", specChanged, pool, func() any {
			p := pool.DeepCopy()
			p.Generation = 2
			return p
		}, true},
		{"a provider checked again", providerChanged, provider, func() any {
			p := provider.DeepCopy()
			p.ResourceVersion = "2"
			p.Status.Conditions[0].LastTransitionTime = metav1.Now()
			p.Status.Conditions[0].Message = "checked again"
			return p
		}, false},
		{"a provider no longer ready", providerChanged, provider, func() any {
			p := provider.DeepCopy()
			p.Status.Conditions[0].Status = metav1.ConditionFalse
			return p
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.relevant(tt.old, tt.update()); got != tt.want {
				t.Fatalf("counted %v, want %v", got, tt.want)
			}
		})
	}
}

func TestChangesCoalesceIntoOneSignal(t *testing.T) {
	changes := New()
	select {
	case <-changes.C():
		t.Fatal("signalled before any change")
	default:
	}
	for range 3 {
		changes.Changed()
	}
	if got := changes.Generation(); got != 3 {
		t.Fatalf("generation %d, want 3", got)
	}
	<-changes.C()
	select {
	case <-changes.C():
		t.Fatal("three changes signalled more than once")
	default:
	}
}
