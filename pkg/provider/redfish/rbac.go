package redfish

// The permissions the redfish provider needs: its leases are ConfigMaps in
// the controller's namespace. `make manifests` generates
// config/rbac/redfish/role.yaml from these markers; the Helm chart grants
// it only with redfishProvider.enabled.
//
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=configmaps,verbs=get;list;watch;create;update;delete
