package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestWhyProvisioningRequestSaysWhyItIsNotProvisionedAndWhatWasBought(t *testing.T) {
	request := &autoscalingv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", UID: "u1"},
		Spec:       autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: autoscalingv1.ClassBestEffortAtomicScaleUp},
		Status: autoscalingv1.ProvisioningRequestStatus{Conditions: []metav1.Condition{
			{Type: autoscalingv1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", Message: "claimscale serves the request"},
			{Type: autoscalingv1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: "CapacityIsBeingProvisioned", Message: "1 of the 2 nodes bought for the request are Ready"},
		}},
	}
	claim := func(name string, ready bool, uid string) v1alpha1.NodeClaim {
		c := v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{v1alpha1.AnnotationProvisioningRequestUID: uid}}}
		status := metav1.ConditionFalse
		if ready {
			status = metav1.ConditionTrue
			c.Status.NodeName = name
		}
		for _, conditionType := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady} {
			c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: conditionType, Status: status, Reason: "Waiting", Message: "booting", LastTransitionTime: metav1.NewTime(time.Now())})
			status = metav1.ConditionTrue
			if !ready {
				status = metav1.ConditionFalse
			}
		}
		return c
	}
	answer := requestAnswer(request, []v1alpha1.NodeClaim{claim("general-b", false, "u1"), claim("general-a", true, "u1"), claim("other", true, "u2")})
	var out bytes.Buffer
	writeRequestAnswer(&out, answer)
	for _, want := range []string{
		"ProvisioningRequest ml/train (best-effort-atomic-scale-up.autoscaling.x-k8s.io): not provisioned",
		"Provisioned=False CapacityIsBeingProvisioned: 1 of the 2 nodes",
		"general-a (node general-a): Ready",
		"general-b (node -): Launched=False Waiting: booting",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("why said\n%s\nwant it to contain %q", out.String(), want)
		}
	}
	if strings.Contains(out.String(), "other") {
		t.Errorf("a claim of another request is listed:\n%s", out.String())
	}
}

func TestWhyPodNamesTheProvisioningRequestItConsumes(t *testing.T) {
	var out bytes.Buffer
	if err := writePodAnswer(&out, PodAnswer{Namespace: "ml", Name: "train-0", Exists: true, NodeName: "general-a", ProvisioningRequest: "ml/train"}, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "for ProvisioningRequest ml/train") {
		t.Errorf("why said %q", out.String())
	}
}
