package provisioningrequest

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
)

// requestPods are a request's pods as the simulation places them, each
// with the template it was made from.
type requestPods struct {
	pods      []*corev1.Pod
	templates []*corev1.PodTemplateSpec
}

// missingTemplateError: a pod set's PodTemplate does not exist.
type missingTemplateError struct{ namespace, name string }

func (e *missingTemplateError) Error() string {
	return fmt.Sprintf("PodTemplate %s/%s does not exist", e.namespace, e.name)
}

// podsOf builds the request's pods from its pod sets' PodTemplates, in the
// request's namespace, pending, each with a UID of its own.
func podsOf(ctx context.Context, kube client.Reader, request *autoscalingv1.ProvisioningRequest) (requestPods, error) {
	var out requestPods
	for set, podSet := range request.Spec.PodSets {
		var template corev1.PodTemplate
		key := client.ObjectKey{Namespace: request.Namespace, Name: podSet.PodTemplateRef.Name}
		if err := kube.Get(ctx, key, &template); err != nil {
			if apierrors.IsNotFound(err) {
				return requestPods{}, &missingTemplateError{namespace: key.Namespace, name: key.Name}
			}
			return requestPods{}, fmt.Errorf("reading PodTemplate %s: %w", key, err)
		}
		for i := range podSet.Count {
			name := fmt.Sprintf("%s-%d-%d", request.Name, set, i)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: name, Namespace: request.Namespace,
					UID:    types.UID(fmt.Sprintf("provisioningrequest/%s/%d/%d", request.UID, set, i)),
					Labels: template.Template.Labels,
				},
				Spec:   *template.Template.Spec.DeepCopy(),
				Status: corev1.PodStatus{Phase: corev1.PodPending},
			}
			pod.Spec.NodeName = ""
			out.pods = append(out.pods, pod)
			out.templates = append(out.templates, &template.Template)
		}
	}
	return out, nil
}

// isRequestPod says whether a pod of a simulation is one of the request's.
func isRequestPod(request *autoscalingv1.ProvisioningRequest, pod *corev1.Pod) bool {
	return strings.HasPrefix(string(pod.UID), "provisioningrequest/"+string(request.UID)+"/")
}

// quotaRoom says, when a ResourceQuota of the namespace has no room for
// the request's pods (so they could not be made), which and why; "" when
// every quota has room.
func quotaRoom(ctx context.Context, kube client.Reader, namespace string, pods []*corev1.Pod) (string, error) {
	var quotas corev1.ResourceQuotaList
	if err := kube.List(ctx, &quotas, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", namespace, err)
	}
	if len(quotas.Items) == 0 {
		return "", nil
	}
	asked := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(len(pods)), resource.DecimalSI)}
	for _, pod := range pods {
		for name, quantity := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			sum := asked[name]
			sum.Add(quantity)
			asked[name] = sum
		}
	}
	// A quota's cpu and memory are requests, as requests.cpu and
	// requests.memory are.
	askedFor := func(quotaName corev1.ResourceName) (resource.Quantity, bool) {
		switch quotaName {
		case corev1.ResourcePods:
			q, ok := asked[corev1.ResourcePods]
			return q, ok
		case corev1.ResourceCPU, corev1.ResourceRequestsCPU:
			q, ok := asked[corev1.ResourceCPU]
			return q, ok
		case corev1.ResourceMemory, corev1.ResourceRequestsMemory:
			q, ok := asked[corev1.ResourceMemory]
			return q, ok
		}
		return resource.Quantity{}, false
	}
	for _, quota := range quotas.Items {
		// The quota as asked (spec), less what it counts used (status,
		// written by kube-controller-manager's quota controller).
		for name, hard := range quota.Spec.Hard {
			need, ok := askedFor(name)
			if !ok {
				continue
			}
			free := hard.DeepCopy()
			if used, ok := quota.Status.Used[name]; ok {
				free.Sub(used)
			}
			if need.Cmp(free) > 0 {
				return fmt.Sprintf("ResourceQuota %s/%s has %s %s free, and the request's %d pods ask %s", namespace, quota.Name, free.String(), name, len(pods), need.String()), nil
			}
		}
	}
	return "", nil
}
