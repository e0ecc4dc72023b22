package poolclaims

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// A sleeping machine holds no capacity, so a pool's limits and its node
// count leave it out; one being put to sleep or woken still runs and
// counts.
func TestASleepingClaimCountsAgainstNoLimit(t *testing.T) {
	claim := func(name string, annotated bool, suspended metav1.ConditionStatus, reason string) v1alpha1.NodeClaim {
		c := v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.NodeClaimSpec{Shape: v1alpha1.ClaimShape{
				Name: "large", CPU: resource.MustParse("4"), Memory: resource.MustParse("8Gi"),
			}},
		}
		if annotated {
			c.Annotations = map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)}
		}
		if suspended != "" {
			c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSuspended, Status: suspended, Reason: reason}}
		}
		return c
	}
	claims := []v1alpha1.NodeClaim{
		claim("running", false, "", ""),
		claim("suspending", true, metav1.ConditionFalse, v1alpha1.ReasonSuspending),
		claim("asleep", true, metav1.ConditionTrue, v1alpha1.ReasonSuspended),
		claim("waking", false, metav1.ConditionFalse, v1alpha1.ReasonWaking),
	}
	nodes, resources := InUse(claims)
	if nodes != 3 {
		t.Errorf("nodes = %d, want 3 (all but the asleep claim)", nodes)
	}
	if cpu := resources[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("12")) != 0 {
		t.Errorf("cpu = %s, want 12", cpu.String())
	}
}
