package provisioningrequest

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// The claims of a failed request are removed after the reason is written;
// a look that sees them going still names the claim that failed, not one
// removed because of it.
func TestFailureNamesTheClaimThatFailedBeforeOneBeingRemoved(t *testing.T) {
	claim := func(name string) *v1alpha1.NodeClaim {
		return &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{v1alpha1.AnnotationProvisioningRequestClaims: "2"}}}
	}
	removed := claim("a-removed")
	now := metav1.Now()
	removed.DeletionTimestamp = &now
	failed := claim("b-failed")
	meta.SetStatusCondition(&failed.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonLaunchFailed, Message: "the rack is full"})

	why := failure([]*v1alpha1.NodeClaim{removed, failed})
	if !strings.Contains(why, "b-failed") || !strings.Contains(why, "the rack is full") {
		t.Fatalf("failure = %q, want the launch failure of b-failed", why)
	}
	if why := failure([]*v1alpha1.NodeClaim{removed, claim("c-waiting")}); !strings.Contains(why, "a-removed was deleted") {
		t.Fatalf("failure = %q, want the deleted claim named when nothing else failed", why)
	}
}
