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
