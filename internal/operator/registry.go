package operator

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/plugin"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// DefaultRegistry returns a registry with every provider claimscale ships.
// The simulated provider keeps its machines in the cluster through kube
// (the manager's client); its registrar runs as a manager runnable (see
// Setup), not per provider built.
func DefaultRegistry(kube client.Client) *provider.Registry {
	registry := ProductionRegistry()
	registry.Register(v1alpha1.ProviderTypeSimulated, simulated.NewFactory(simulated.Config{Kube: kube, ExternalRegistrar: true}))
	return registry
}

// ProductionRegistry returns a registry with the providers of real
// machines only, provider plugins (type grpc) included: without the
// simulated provider the controller needs no right to create Nodes or
// write ConfigMaps.
func ProductionRegistry() *provider.Registry {
	registry := provider.NewRegistry()
	registry.Register(v1alpha1.ProviderTypeProxmox, proxmox.New)
	registry.Register(v1alpha1.ProviderTypeCloudscale, cloudscale.New)
	registry.Register(v1alpha1.ProviderTypeGRPC, plugin.New)
	return registry
}
