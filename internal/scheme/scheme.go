// Package scheme builds the runtime scheme claimscale's clients use: the
// built-in kinds and claimscale.io/v1alpha1.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// New returns a scheme with the built-in kinds and claimscale's.
func New() *runtime.Scheme {
	scheme := runtime.NewScheme()
	// Both only add static type registrations; they cannot fail.
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	return scheme
}
