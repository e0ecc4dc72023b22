package kubectlplugin

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestChooseControllerTakesTheReadyLeader(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, ready corev1.ConditionStatus) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status:     corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
		}
	}
	lease := func(holder string) coordinationv1.Lease {
		return coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	}
	a := pod("claimscale-a", corev1.PodRunning, corev1.ConditionTrue)
	b := pod("claimscale-b", corev1.PodRunning, corev1.ConditionTrue)
	starting := pod("claimscale-0", corev1.PodRunning, corev1.ConditionFalse)
	pending := pod("claimscale-1", corev1.PodPending, corev1.ConditionFalse)
	for _, tt := range []struct {
		name   string
		pods   []corev1.Pod
		leases []coordinationv1.Lease
		want   string
	}{
		{"the leader, though not first by name", []corev1.Pod{a, b}, []coordinationv1.Lease{lease("other_x"), lease("claimscale-b_0d1f")}, "claimscale-b"},
		{"the first ready pod by name without a lease", []corev1.Pod{b, a}, nil, "claimscale-a"},
		{"a ready pod before a leader that is not ready", []corev1.Pod{starting, b}, []coordinationv1.Lease{lease("claimscale-0_x")}, "claimscale-b"},
		{"a lease of another pod with the same prefix is not ours", []corev1.Pod{a, b}, []coordinationv1.Lease{lease("claimscale-bb_x")}, "claimscale-a"},
		{"none when none is ready", []corev1.Pod{starting, pending}, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if pod := chooseController(tt.pods, tt.leases); pod != nil {
				got = pod.Name
			}
			if got != tt.want {
				t.Errorf("chose %q, want %q", got, tt.want)
			}
		})
	}
}
