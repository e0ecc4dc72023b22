package clusterstate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestStartingNodeIsSimulatedWithoutItsStartupTaints(t *testing.T) {
	startup := corev1.Taint{Key: "example.com/cni-not-ready", Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	claim := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	claim.Spec.StartupTaints = []corev1.Taint{startup}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup, dedicated, notReady}}}

	got := withoutStartupTaints(node, claim)
	if len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "dedicated" {
		t.Errorf("starting node simulated with taints %v, want only the pool's own", got.Spec.Taints)
	}
	if len(node.Spec.Taints) != 3 {
		t.Errorf("the cached node was changed: %v", node.Spec.Taints)
	}

	claim.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionInitialized, Status: metav1.ConditionTrue}}
	// Once initialized, a startup taint put back means something.
	if got := withoutStartupTaints(node, claim); len(got.Spec.Taints) != 3 {
		t.Errorf("initialized node simulated with taints %v, want all", got.Spec.Taints)
	}
}
