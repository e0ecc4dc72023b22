package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
)

// TestProxmoxCloneNamesATemplate checks the rules on spec.proxmox.clone: a
// template by ID, by name or per node, and never both an ID and a name.
func TestProxmoxCloneNamesATemplate(t *testing.T) {
	manifest := func(clone string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: clone-rules}\nspec:\n" +
			"  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n" +
			"    endpoint: https://pve:8006/api2/json\n    vmIDRange: {lower: 5000, upper: 5999}\n    clone: " + clone + "\n"
	}
	tests := []struct {
		name    string
		clone   string
		message string // empty when the object is accepted
	}{
		{name: "a template ID", clone: "{templateID: 9000}"},
		{name: "a template name", clone: "{templateName: ubuntu-2404-k8s}"},
		{name: "a template per node", clone: "{nodeTemplates: [{node: pve1, templateID: 9001}, {node: pve2, templateID: 9002}]}"},
		{name: "per-node templates with a default", clone: "{templateID: 9000, nodeTemplates: [{node: pve1, templateID: 9001}]}"},
		{name: "no template", clone: "{full: true}", message: "one of templateID, templateName or nodeTemplates must be set"},
		{name: "an ID and a name", clone: "{templateID: 9000, templateName: x}", message: "templateID and templateName are exclusive"},
		{name: "a node named twice", clone: "{nodeTemplates: [{node: pve1, templateID: 9001}, {node: pve1, templateID: 9002}]}", message: "Duplicate value"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			object := mustDecode(t, manifest(tt.clone))
			err := env.Client.Create(ctx, object)
			if err == nil {
				_ = env.Client.Delete(ctx, object)
			}
			switch {
			case tt.message == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.message != "" && (err == nil || !strings.Contains(err.Error(), tt.message)):
				t.Fatalf("got %v, want a rejection with %q", err, tt.message)
			}
		})
	}
}

// TestProxmoxPCIDevicesMapResourcesToMappings checks the rules on
// spec.proxmox.pciDevices: each entry names an extended resource and a
// Proxmox configuration ID, no resource or mapping twice, options only of
// the values qemu-server's hostpci format takes. (A hostpciN in
// extraOptions beside them is refused by the provider: a rule over
// extraOptions, whose length is not bounded, costs the API server more
// than its CEL budget allows.)
func TestProxmoxPCIDevicesMapResourcesToMappings(t *testing.T) {
	manifest := func(extra string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: pci-rules}\nspec:\n" +
			"  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n" +
			"    endpoint: https://pve:8006/api2/json\n    vmIDRange: {lower: 5000, upper: 5999}\n    clone: {templateID: 9000}\n" + extra
	}
	tests := []struct {
		name    string
		extra   string
		message string // empty when the object is accepted
	}{
		{name: "a GPU mapping", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: rtx4090}]\n"},
		{name: "a mapping with every option", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: a100_pcie-1, pcie: true, rombar: false, xVGA: true, driver: keep, vendorID: '0x10de', deviceID: '0x2204', subVendorID: '0x1458', subDeviceID: '0x403b'}]\n"},
		{name: "two resources on two mappings", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: gpu}, {resource: example.com/nic, mapping: nic}]\n"},
		{name: "hostpci in extraOptions without pciDevices", extra: "    extraOptions: [{name: hostpci0, value: 'mapping=nic'}]\n"},
		{name: "other extraOptions beside pciDevices", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: gpu}]\n    extraOptions: [{name: machine, value: q35}]\n"},
		{name: "a resource without a domain", extra: "    pciDevices: [{resource: gpu, mapping: gpu}]\n", message: "pciDevices.resource must be an extended resource"},
		{name: "a kubernetes.io resource", extra: "    pciDevices: [{resource: kubernetes.io/gpu, mapping: gpu}]\n", message: "pciDevices.resource must be an extended resource"},
		{name: "a resource named twice", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: a}, {resource: nvidia.com/gpu, mapping: b}]\n", message: "Duplicate value"},
		{name: "a mapping serving two resources", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: gpu}, {resource: example.com/gpu, mapping: gpu}]\n", message: "a mapping may serve one resource only"},
		{name: "a mapping ID Proxmox refuses", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: 1gpu}]\n", message: "spec.proxmox.pciDevices[0].mapping"},
		{name: "a mapping ID of one letter", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: g}]\n", message: "spec.proxmox.pciDevices[0].mapping"},
		{name: "a mapping ID with a comma", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: 'gpu,x-vga=1'}]\n", message: "spec.proxmox.pciDevices[0].mapping"},
		{name: "a driver Proxmox does not know", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: gpu, driver: nouveau}]\n", message: "spec.proxmox.pciDevices[0].driver"},
		{name: "a vendor ID without 0x", extra: "    pciDevices: [{resource: nvidia.com/gpu, mapping: gpu, vendorID: 10de}]\n", message: "spec.proxmox.pciDevices[0].vendorID"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			object := mustDecode(t, manifest(tt.extra))
			err := env.Client.Create(ctx, object)
			if err == nil {
				_ = env.Client.Delete(ctx, object)
			}
			switch {
			case tt.message == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.message != "" && (err == nil || !strings.Contains(err.Error(), tt.message)):
				t.Fatalf("got %v, want a rejection with %q", err, tt.message)
			}
		})
	}
}
