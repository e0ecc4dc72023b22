// Package v1 holds autoscaling.x-k8s.io/v1 ProvisioningRequest, the
// Kubernetes autoscaling SIG's way to ask for capacity for a group of pods
// at once (Kueue's ProvisioningRequest admission check writes them). These
// are claimscale's own types, field for field those of the published CRD
// (kubernetes/autoscaler, cluster-autoscaler/apis/config/crd): the Go
// module that holds upstream's types imports Ginkgo for its code
// generation, and Ginkgo adds its flags to every binary that links it.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of ProvisioningRequest.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
