package redfish

// The permissions the redfish provider needs: its leases are ConfigMaps
// and its seeds (each claim's user data, for servers that boot with
// userData VirtualMedia) Secrets in the controller's namespace. `make
// manifests` generates config/rbac/redfish/role.yaml from these markers;
// the Helm chart grants it only with redfishProvider.enabled.
//
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=secrets,verbs=get;create;update;delete
