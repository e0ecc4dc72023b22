// Package scheme builds the runtime scheme claimscale's clients use: the
// built-in kinds, claimscale.io/v1alpha1 and the autoscaling SIG's kinds
// claimscale serves (ProvisioningRequest, CapacityBuffer).
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	autoscalingv1beta1 "github.com/claimscale/claimscale/api/autoscaling/v1beta1"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

// New returns a scheme with the built-in kinds and claimscale's.
func New() *runtime.Scheme {
	scheme := runtime.NewScheme()
	// Both only add static type registrations; they cannot fail.
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = autoscalingv1.AddToScheme(scheme)
	_ = autoscalingv1beta1.AddToScheme(scheme)
	return scheme
}
