package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

// RequestAnswer is why provisioningrequest's answer, as -o json|yaml print
// it: the request's state in a word, its conditions, and the claims bought
// for it.
type RequestAnswer struct {
	Namespace  string             `json:"namespace"`
	Name       string             `json:"name"`
	Class      string             `json:"class"`
	State      string             `json:"state"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Claims     []RequestClaim     `json:"claims,omitempty"`
}

// RequestClaim is a claim bought for a request and how far it got.
type RequestClaim struct {
	Name   string `json:"name"`
	Node   string `json:"node,omitempty"`
	Ready  bool   `json:"ready"`
	Status string `json:"status"`
}

func (o *options) whyProvisioningRequest(ctx context.Context, name, output string) error {
	namespace, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return fmt.Errorf("reading the namespace: %w", err)
	}
	kube, err := o.kubeClient()
	if err != nil {
		return err
	}
	var request autoscalingv1.ProvisioningRequest
	if err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &request); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("ProvisioningRequest %s/%s not found", namespace, name)
		}
		return fmt.Errorf("reading ProvisioningRequest %s/%s: %w", namespace, name, err)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	answer := requestAnswer(&request, claims.Items)
	if output != "" {
		return printStructured(o.streams.Out, output, answer)
	}
	writeRequestAnswer(o.streams.Out, answer)
	return nil
}

// requestAnswer says where a request stands, from its conditions and the
// claims bought for it (by the request's UID).
func requestAnswer(request *autoscalingv1.ProvisioningRequest, claims []v1alpha1.NodeClaim) RequestAnswer {
	answer := RequestAnswer{Namespace: request.Namespace, Name: request.Name, Class: request.Spec.ProvisioningClassName, Conditions: request.Status.Conditions}
	conditions := request.Status.Conditions
	switch {
	case len(conditions) == 0:
		answer.State = "not looked at (claimscale serves " + autoscalingv1.ClassCheckCapacity + " and " + autoscalingv1.ClassBestEffortAtomicScaleUp + ")"
	case meta.IsStatusConditionTrue(conditions, autoscalingv1.ConditionFailed):
		answer.State = "failed"
	case meta.IsStatusConditionTrue(conditions, autoscalingv1.ConditionCapacityRevoked):
		answer.State = "capacity revoked"
	case meta.IsStatusConditionTrue(conditions, autoscalingv1.ConditionBookingExpired):
		answer.State = "provisioned, booking ended"
	case meta.IsStatusConditionTrue(conditions, autoscalingv1.ConditionProvisioned):
		answer.State = "provisioned, capacity booked"
	default:
		answer.State = "not provisioned"
	}
	for _, claim := range claims {
		if claim.Annotations[v1alpha1.AnnotationProvisioningRequestUID] != string(request.UID) {
			continue
		}
		entry := RequestClaim{Name: claim.Name, Node: claim.Status.NodeName, Ready: meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady)}
		entry.Status = "Ready"
		if !entry.Ready {
			entry.Status = "not Ready"
			for _, conditionType := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady} {
				if c := meta.FindStatusCondition(claim.Status.Conditions, conditionType); c == nil || c.Status != metav1.ConditionTrue {
					entry.Status = conditionType + " not yet"
					if c != nil {
						entry.Status = fmt.Sprintf("%s=%s %s: %s", conditionType, c.Status, c.Reason, c.Message)
					}
					break
				}
			}
		}
		answer.Claims = append(answer.Claims, entry)
	}
	sort.Slice(answer.Claims, func(i, j int) bool { return answer.Claims[i].Name < answer.Claims[j].Name })
	return answer
}

func writeRequestAnswer(w io.Writer, a RequestAnswer) {
	fmt.Fprintf(w, "ProvisioningRequest %s/%s (%s): %s\n", a.Namespace, a.Name, a.Class, a.State)
	order := []string{autoscalingv1.ConditionAccepted, autoscalingv1.ConditionProvisioned, autoscalingv1.ConditionFailed, autoscalingv1.ConditionBookingExpired, autoscalingv1.ConditionCapacityRevoked}
	for _, conditionType := range order {
		if c := meta.FindStatusCondition(a.Conditions, conditionType); c != nil {
			fmt.Fprintf(w, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if len(a.Claims) > 0 {
		fmt.Fprintf(w, "  claims bought for it:\n")
		for _, claim := range a.Claims {
			node := claim.Node
			if node == "" {
				node = "-"
			}
			fmt.Fprintf(w, "    %s (node %s): %s\n", claim.Name, node, claim.Status)
		}
	}
}

// requestOfClaim names the ProvisioningRequest a claim (by its name or
// its node's) was bought for, "" for none or when it cannot be read.
func (o *options) requestOfClaim(ctx context.Context, name string) string {
	kube, err := o.kubeClient()
	if err != nil {
		return ""
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		return ""
	}
	for _, claim := range claims.Items {
		if claim.Name == name || (claim.Status.NodeName != "" && claim.Status.NodeName == name) {
			return claim.Annotations[v1alpha1.AnnotationProvisioningRequest]
		}
	}
	return ""
}
