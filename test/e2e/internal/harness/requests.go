package harness

import (
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
)

// PodSpec is the spec of the scenario's workload pods: on its pool (by
// the template label), tolerating kwok's taint, requesting cpu and 256Mi.
func (s *Scenario) PodSpec(cpu string) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector: map[string]string{"scenario": s.Name},
		Tolerations:  []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi"),
			}},
		}},
	}
}

// CreatePodTemplate makes a PodTemplate of the scenario's pods requesting
// cpu, labelled app=name.
func (s *Scenario) CreatePodTemplate(name, cpu string) {
	s.G.Expect(env.Client.Create(s.Ctx, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       s.PodSpec(cpu),
		},
	})).To(Succeed())
}

// CreateProvisioningRequest asks, in class, for count pods of template.
func (s *Scenario) CreateProvisioningRequest(name, class, template string, count int32) {
	s.G.Expect(env.Client.Create(s.Ctx, &autoscalingv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec: autoscalingv1.ProvisioningRequestSpec{
			ProvisioningClassName: class,
			PodSets:               []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: template}, Count: count}},
		},
	})).To(Succeed())
}

// RequestCondition is a ProvisioningRequest's condition of type; empty
// when it has none (or the request cannot be read: then its message says
// why).
func (s *Scenario) RequestCondition(name, conditionType string) metav1.Condition {
	var request autoscalingv1.ProvisioningRequest
	if err := env.Client.Get(s.Ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, &request); err != nil {
		return metav1.Condition{Message: err.Error()}
	}
	if c := meta.FindStatusCondition(request.Status.Conditions, conditionType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// CreateConsumers makes count pods of the scenario that use the request
// (as Kueue's admitted pods do: the consume-provisioning-request
// annotation), labelled app=name.
func (s *Scenario) CreateConsumers(name, request, cpu string, count int) {
	for i := range count {
		s.G.Expect(env.Client.Create(s.Ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name + "-" + string(rune('a'+i)), Namespace: s.Namespace, Labels: map[string]string{"app": name},
				Annotations: map[string]string{autoscalingv1.AnnotationConsumeProvisioningRequest: request},
			},
			Spec: s.PodSpec(cpu),
		})).To(Succeed())
	}
}
