// Package v1beta1 holds autoscaling.x-k8s.io/v1beta1 CapacityBuffer, the
// Kubernetes autoscaling SIG's way to keep spare capacity for pods that
// are not there yet. claimscale's own types, field for field those of the
// published CRD (kubernetes/autoscaler, cluster-autoscaler/apis/capacitybuffer):
// no Go module the proxy serves holds them.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of CapacityBuffer.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
