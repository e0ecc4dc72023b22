package v1alpha1

import "strings"

// ProviderIDPrefixRedfish starts the providerID of a bare-metal server of
// a redfish NodeProvider; the rest is its ComputerSystem UUID, lower case.
// No cloud controller sets it on the server's Node: a Node without a
// providerID whose kubelet reports that UUID (status.nodeInfo.systemUUID,
// read from SMBIOS) is the server's, and registration writes the
// providerID onto it.
const ProviderIDPrefixRedfish = "redfish://"

// SystemUUIDOf returns the system UUID a machine's Node is matched by when
// it registers without a providerID, for providerIDs that carry one.
func SystemUUIDOf(providerID string) (string, bool) {
	uuid, ok := strings.CutPrefix(providerID, ProviderIDPrefixRedfish)
	if !ok || uuid == "" {
		return "", false
	}
	return strings.ToLower(uuid), true
}
