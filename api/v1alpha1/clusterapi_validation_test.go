package v1alpha1_test

import (
	"strings"
	"testing"
)

// The clusterapi settings are checked where they are written: one source of
// templates per shape, template kinds that are templates, names CAPI takes.
func TestClusterAPISettingsValidation(t *testing.T) {
	provider := func(spec string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: capi-invalid}\nspec:\n  type: clusterapi\n" + spec
	}
	const cluster = "  clusterAPI:\n    cluster: {namespace: capi, name: workload}\n"
	const infra = "{apiGroup: infrastructure.cluster.x-k8s.io, kind: ProxmoxMachineTemplate, name: small}"
	const bootstrap = "{apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfigTemplate, name: workers}"
	tests := []struct {
		name, manifest, message string
	}{
		{"type clusterapi without its settings block", provider(""), "spec.clusterAPI must be set when type is clusterapi"},
		{"settings block of another type", "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: capi-invalid}\nspec:\n  type: simulated\n" + cluster + "    shapes: [{name: small, machineDeployment: md}]\n", "spec.clusterAPI must be set when type is clusterapi, and only then"},
		{"no shapes", provider(cluster + "    shapes: []\n"), "spec.clusterAPI.shapes"},
		{"shape with neither source", provider(cluster + "    shapes: [{name: small}]\n"), "set exactly one of machineDeployment or infrastructureTemplate"},
		{"shape with both sources", provider(cluster + "    shapes: [{name: small, machineDeployment: md, infrastructureTemplate: " + infra + "}]\n"), "set exactly one of machineDeployment or infrastructureTemplate"},
		{"bootstrap template beside a MachineDeployment", provider(cluster + "    shapes: [{name: small, machineDeployment: md, bootstrapConfigTemplate: " + bootstrap + "}]\n"), "bootstrapConfigTemplate goes with infrastructureTemplate"},
		{"version beside a MachineDeployment", provider(cluster + "    shapes: [{name: small, machineDeployment: md, version: v1.37.0}]\n"), "version goes with infrastructureTemplate"},
		{"template kind that is no template", provider(cluster + "    shapes: [{name: small, infrastructureTemplate: {apiGroup: infrastructure.cluster.x-k8s.io, kind: ProxmoxMachine, name: small}}]\n"), "a template kind ends in Template"},
		{"cluster name that is no DNS label", provider("  clusterAPI:\n    cluster: {namespace: capi, name: Workload_1}\n    shapes: [{name: small, machineDeployment: md}]\n"), "clusterAPI.cluster.name must be a DNS label"},
		{"version that is no version", provider(cluster + "    shapes: [{name: small, infrastructureTemplate: " + infra + ", version: latest}]\n"), "spec.clusterAPI.shapes[0].version"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := env.Client.Create(t.Context(), mustDecode(t, test.manifest))
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", test.message)
			}
			if !strings.Contains(err.Error(), test.message) {
				t.Fatalf("rejected with %v, want an error containing %q", err, test.message)
			}
		})
	}

	valid := provider(cluster + "    shapes:\n    - {name: small, infrastructureTemplate: " + infra + ", bootstrapConfigTemplate: " + bootstrap + ", version: v1.37.0}\n    - {name: large, machineDeployment: workers-large}\n")
	object := mustDecode(t, valid)
	if err := env.Client.Create(t.Context(), object); err != nil {
		t.Fatalf("a valid clusterapi NodeProvider was rejected: %v", err)
	}
	_ = env.Client.Delete(t.Context(), object)
}
