package kubectlplugin

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	api "k8s.io/kubernetes/pkg/apis/core"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/plugin/pkg/admission/limitranger"
)

// admit makes a pod of a workload file what the API server would store,
// with the API server's own code, so that simulate decides on the pods the
// controller will see: defaulting first (a container with limits and no
// requests requests its limits, extended resources such as nvidia.com/gpu
// included), then the LimitRanger admission plugin with the namespace's
// LimitRanges (their defaults filled in, their minimums and maximums
// enforced). An error is the API server's refusal of the pod.
func admit(pod *corev1.Pod, limitRanges []corev1.LimitRange) error {
	apiv1.SetObjectDefaults_Pod(pod)
	if len(limitRanges) == 0 {
		return nil
	}
	var internal api.Pod
	if err := apiv1.Convert_v1_Pod_To_core_Pod(pod, &internal, nil); err != nil {
		return fmt.Errorf("converting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// The admission plugin mutates and validates with each LimitRange in
	// turn.
	for i := range limitRanges {
		if err := limitranger.PodMutateLimitFunc(&limitRanges[i], &internal); err != nil {
			return fmt.Errorf("LimitRange %s: %w", limitRanges[i].Name, err)
		}
		if err := limitranger.PodValidateLimitFunc(&limitRanges[i], &internal); err != nil {
			return fmt.Errorf("LimitRange %s: %w", limitRanges[i].Name, err)
		}
	}
	var admitted corev1.Pod
	if err := apiv1.Convert_core_Pod_To_v1_Pod(&internal, &admitted, nil); err != nil {
		return fmt.Errorf("converting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	*pod = admitted
	return nil
}
