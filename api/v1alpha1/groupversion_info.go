// Package v1alpha1 holds the claimscale.io/v1alpha1 API: NodeProvider (where
// machines come from), NodePool (what nodes may exist) and NodeClaim (one node
// wanted).
//
// +kubebuilder:object:generate=true
// +groupName=claimscale.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "claimscale.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
