package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
)

// TestRedfishInventoryRules checks the rules on spec.redfish: credentials
// for every server, no machine listed twice, an image exactly for boot
// from virtual media.
func TestRedfishInventoryRules(t *testing.T) {
	manifest := func(credentials, servers, extra string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: redfish-rules}\nspec:\n" +
			"  type: redfish\n" + credentials + "  redfish:\n" + extra + "    servers:\n" + servers
	}
	const shared = "  credentialsSecretRef: {name: bmc, namespace: claimscale-system}\n"
	server := func(name, endpoint, rest string) string {
		return "    - {name: " + name + ", endpoint: '" + endpoint + "', shape: r640" + rest + "}\n"
	}
	tests := []struct {
		name    string
		object  string
		message string // empty when the object is accepted
	}{
		{name: "two servers with shared credentials", object: manifest(shared, server("r1", "https://10.0.0.21", "")+server("r2", "https://10.0.0.22", ""), "")},
		{name: "a server with its own credentials", object: manifest("", server("r1", "https://10.0.0.21", ", credentialsSecretRef: {name: r1, namespace: claimscale-system}"), "")},
		{name: "two systems of one BMC", object: manifest(shared, server("b1", "https://10.0.0.30", ", system: Blade1")+server("b2", "https://10.0.0.30", ", system: Blade2"), "")},
		{name: "a cap and a stagger", object: manifest(shared, server("r1", "https://10.0.0.21", ""), "    maxPoweredOn: 4\n    powerOnsPerMinute: 2\n")},
		{name: "boot from virtual media", object: manifest(shared, server("r1", "https://10.0.0.21", ", boot: {source: Cd, image: 'http://images/join.iso'}"), "")},
		{name: "each claim's seed on virtual media", object: manifest(shared, server("r1", "https://10.0.0.21", ", boot: {source: Pxe, userData: VirtualMedia}"), "    mediaURL: 'http://10.0.0.5:8089'\n")},
		{name: "a seed without a media URL", object: manifest(shared, server("r1", "https://10.0.0.21", ", boot: {source: Pxe, userData: VirtualMedia}"), ""), message: "redfish.mediaURL is needed where a boot has userData VirtualMedia"},
		{name: "the provider's boot asks for seeds without a media URL", object: manifest(shared, server("r1", "https://10.0.0.21", ""), "    boot: {source: Hdd, userData: VirtualMedia}\n"), message: "redfish.mediaURL is needed"},
		{name: "no credentials", object: manifest("", server("r1", "https://10.0.0.21", ""), ""), message: "every redfish server needs credentials"},
		{name: "one machine listed twice", object: manifest(shared, server("r1", "https://10.0.0.21", "")+server("r2", "https://10.0.0.21", ""), ""), message: "may be listed only once"},
		{name: "one system listed twice", object: manifest(shared, server("b1", "https://10.0.0.30", ", system: Blade1")+server("b2", "https://10.0.0.30", ", system: Blade1"), ""), message: "may be listed only once"},
		{name: "a server name twice", object: manifest(shared, server("r1", "https://10.0.0.21", "")+server("r1", "https://10.0.0.22", ""), ""), message: "Duplicate value"},
		{name: "Cd without an image", object: manifest(shared, server("r1", "https://10.0.0.21", ", boot: {source: Cd}"), ""), message: "boot.image is needed for source Cd"},
		{name: "an image for Pxe", object: manifest(shared, server("r1", "https://10.0.0.21", ", boot: {source: Pxe, image: 'http://x/y.iso'}"), ""), message: "boot.image is needed for source Cd, and only then"},
		{name: "an endpoint without a scheme", object: manifest(shared, server("r1", "10.0.0.21", ""), ""), message: "spec.redfish.servers[0].endpoint"},
		{name: "a cap of zero", object: manifest(shared, server("r1", "https://10.0.0.21", ""), "    maxPoweredOn: 0\n"), message: "maxPoweredOn"},
		{name: "redfish settings on another type", object: "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: redfish-rules}\nspec:\n  type: simulated\n  redfish:\n    servers:\n" + server("r1", "https://10.0.0.21", ""), message: "spec.redfish must be set when type is redfish, and only then"},
		{name: "type redfish without settings", object: "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: redfish-rules}\nspec:\n  type: redfish\n", message: "spec.redfish must be set when type is redfish, and only then"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			object := mustDecode(t, tt.object)
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
