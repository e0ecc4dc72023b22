package operator

import (
	"fmt"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// requiredResources are the CRDs claimscale cannot run without.
var requiredResources = []string{"nodeproviders", "nodepools", "nodeclaims"}

// CheckCRDs says, before any informer starts and times out on them, which
// of claimscale's CRDs the API server does not serve.
func CheckCRDs(config *rest.Config) error {
	client, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return fmt.Errorf("reaching the API server: %w", err)
	}
	groupVersion := v1alpha1.GroupVersion.String()
	resources, err := client.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the API server does not serve %s: install claimscale's CRDs (charts/claimscale/crds or config/crd) first", groupVersion)
	}
	if err != nil {
		return fmt.Errorf("asking the API server for %s: %w", groupVersion, err)
	}
	served := map[string]bool{}
	for _, resource := range resources.APIResources {
		served[resource.Name] = true
	}
	for _, name := range requiredResources {
		if !served[name] {
			return fmt.Errorf("the API server does not serve %s.%s: install claimscale's CRDs (charts/claimscale/crds or config/crd) first", name, v1alpha1.GroupVersion.Group)
		}
	}
	return nil
}

// CheckListen says whether address can be listened on, for a flag named
// flag, so a port in use is reported before anything starts. "0" and ""
// (disabled) always can.
func CheckListen(flag, address string) error {
	if address == "" || address == "0" {
		return nil
	}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("--%s=%s: %w", flag, address, err)
	}
	return listener.Close()
}
