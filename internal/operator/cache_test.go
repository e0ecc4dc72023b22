package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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
