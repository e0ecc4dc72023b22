package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/internal/testenv"
)

var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

func TestSamplesAreAccepted(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	ctx := context.Background()
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		objects, err := testenv.DecodeManifests(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, object := range objects {
			t.Run(filepath.Base(file)+"/"+object.GetKind()+"/"+object.GetName(), func(t *testing.T) {
				if err := env.Client.Create(ctx, object); err != nil {
					t.Fatalf("sample rejected: %v", err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(ctx, object) })
			})
		}
	}
}

func TestDefaultsAreApplied(t *testing.T) {
	ctx := context.Background()
	pool := mustDecode(t, `
apiVersion: claimscale.io/v1alpha1
kind: NodePool
metadata: {name: defaults}
spec:
  providerRef: {name: simulated}
  shapes:
    fixed: [{name: small, cpu: "2", memory: 4Gi}]
`)
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, pool) })
	spec := pool.Object["spec"].(map[string]any)
	checks := map[string]any{
		"template.kubelet.maxPods":       int64(110),
		"disruption.consolidationPolicy": "WhenEmpty",
		"disruption.consolidateAfter":    "30s",
		"registrationTimeout":            "15m",
		"disruption.budgets.0.nodes":     "10%",
		"minNodes":                       int64(0),
		"weight":                         int64(0),
	}
	for path, want := range checks {
		if got := lookup(spec, path); got != want {
			t.Errorf("spec.%s defaulted to %v (%T), want %v", path, got, got, want)
		}
	}
}

func lookup(object any, path string) any {
	for _, part := range strings.Split(path, ".") {
		switch v := object.(type) {
		case map[string]any:
			object = v[part]
		case []any:
			var index int
			if _, err := fmt.Sscan(part, &index); err != nil || index >= len(v) {
				return nil
			}
			object = v[index]
		default:
			return nil
		}
	}
	return object
}

func mustDecode(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	object := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &object.Object); err != nil {
		t.Fatalf("bad test manifest: %v", err)
	}
	return object
}

func TestInvalidObjectsAreRejected(t *testing.T) {
	provider := func(spec string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeProvider\nmetadata: {name: invalid}\nspec:\n" + spec
	}
	pool := func(spec string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodePool\nmetadata: {name: invalid}\nspec:\n  providerRef: {name: simulated}\n" + spec
	}
	const fixedShapes = "  shapes:\n    fixed: [{name: small, cpu: \"2\", memory: 4Gi}]\n"
	const proxmoxBase = `    endpoint: https://pve:8006/api2/json
    vmIDRange: {lower: 5000, upper: 5999}
`
	claim := func(shape string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n  shape: " + shape + "\n"
	}

	tests := []struct {
		name     string
		manifest string
		message  string
	}{
		{"unknown provider type", provider("  type: openstack\n"), `Unsupported value: "openstack"`},
		{"proxmox type without its settings block", provider("  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n"), "spec.proxmox must be set when type is proxmox"},
		{"settings block of another type", provider("  type: simulated\n  cloudscale: {zone: lpg1, image: debian-12}\n"), "spec.cloudscale must be set when type is cloudscale, and only then"},
		{"two settings blocks", provider("  type: cloudscale\n  credentialsSecretRef: {name: c, namespace: d}\n  cloudscale: {zone: lpg1, image: debian-12}\n  proxmox:\n" + proxmoxBase + "    clone: {templateID: 9000}\n"), "spec.proxmox must be set when type is proxmox, and only then"},
		{"proxmox without credentials", provider("  type: proxmox\n  proxmox:\n" + proxmoxBase + "    clone: {templateID: 9000}\n"), "credentialsSecretRef is required"},
		{"VM ID range with lower equal to upper", provider("  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n    endpoint: https://pve:8006\n    vmIDRange: {lower: 5000, upper: 5000}\n    clone: {templateID: 9000}\n"), "vmIDRange.lower must be less than vmIDRange.upper"},
		{"proxmox with both clone and netboot", provider("  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n" + proxmoxBase + "    clone: {templateID: 9000}\n    netboot: {}\n"), "exactly one of clone or netboot must be set"},
		{"proxmox endpoint that is no URL", provider("  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n    endpoint: pve:8006\n    vmIDRange: {lower: 5000, upper: 5999}\n    clone: {templateID: 9000}\n"), "spec.proxmox.endpoint"},
		{"VLAN tag out of range", provider("  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n" + proxmoxBase + "    clone: {templateID: 9000}\n    networkInterfaces: [{bridge: vmbr0, vlanTag: 5000}]\n"), "should be less than or equal to 4094"},
		{"grpc type without its settings block", provider("  type: grpc\n"), "spec.grpc must be set when type is grpc"},
		{"grpc over TCP without a client certificate", provider("  type: grpc\n  grpc: {endpoint: \"plugin.example:9443\"}\n"), "is required for a grpc endpoint over TCP"},
		{"grpc over a unix socket with a client certificate", provider("  type: grpc\n  credentialsSecretRef: {name: c, namespace: d}\n  grpc: {endpoint: \"unix:///run/plugin.sock\"}\n"), "must not be set for a unix:// grpc endpoint"},
		{"grpc endpoint that is a URL", provider("  type: grpc\n  credentialsSecretRef: {name: c, namespace: d}\n  grpc: {endpoint: \"https://plugin.example:9443\"}\n"), "spec.grpc.endpoint"},
		{"grpc retries above 4", provider("  type: grpc\n  grpc: {endpoint: \"unix:///run/plugin.sock\", retries: 9}\n"), "should be less than or equal to 4"},
		{"grpc call timeout of zero", provider("  type: grpc\n  grpc: {endpoint: \"unix:///run/plugin.sock\", callTimeout: 0s}\n"), "grpc.callTimeout must be more than 0s"},
		{"failure rate above 100 percent", provider("  type: simulated\n  simulated: {createFailurePercent: 150}\n"), "should be less than or equal to 100"},
		{"malformed boot delay", provider("  type: simulated\n  simulated: {bootDelay: 2 seconds}\n"), "spec.simulated.bootDelay"},
		{"weight above 100", pool(fixedShapes + "  weight: 101\n"), "should be less than or equal to 100"},
		{"negative weight", pool(fixedShapes + "  weight: -1\n"), "should be greater than or equal to 0"},
		{"zero shape cpu", pool("  shapes:\n    fixed: [{name: small, cpu: \"0\", memory: 4Gi}]\n"), "shape cpu must be greater than zero"},
		{"negative shape memory", pool("  shapes:\n    fixed: [{name: small, cpu: \"2\", memory: -4Gi}]\n"), "shape memory must be greater than zero"},
		{"duplicate shape names", pool("  shapes:\n    fixed: [{name: small, cpu: \"2\", memory: 4Gi}, {name: small, cpu: \"4\", memory: 8Gi}]\n"), "Duplicate value"},
		{"fixed and flexible shapes together", pool("  shapes:\n    fixed: [{name: small, cpu: \"2\", memory: 4Gi}]\n    flexible: {minCPU: \"1\", maxCPU: \"8\", minMemory: 1Gi, maxMemory: 8Gi}\n"), "exactly one of shapes.fixed or shapes.flexible must be set"},
		{"no shapes at all", pool("  shapes: {}\n"), "exactly one of shapes.fixed or shapes.flexible must be set"},
		{"flexible min cpu above max", pool("  shapes:\n    flexible: {minCPU: \"16\", maxCPU: \"8\", minMemory: 1Gi, maxMemory: 8Gi}\n"), "flexible minCPU must not exceed maxCPU"},
		{"flexible min memory above max", pool("  shapes:\n    flexible: {minCPU: \"1\", maxCPU: \"8\", minMemory: 16Gi, maxMemory: 8Gi}\n"), "flexible minMemory must not exceed maxMemory"},
		{"flexible zero step", pool("  shapes:\n    flexible: {minCPU: \"1\", maxCPU: \"8\", cpuStep: \"0\", minMemory: 1Gi, maxMemory: 8Gi}\n"), "flexible cpuStep must be at least 1m"},
		{"negative cpu limit", pool(fixedShapes + "  limits: {cpu: \"-4\"}\n"), "limits.cpu must not be negative"},
		{"negative memory limit", pool(fixedShapes + "  limits: {memory: -1Gi}\n"), "limits.memory must not be negative"},
		{"negative node limit", pool(fixedShapes + "  limits: {nodes: -1}\n"), "should be greater than or equal to 0"},
		{"minNodes above the node limit", pool(fixedShapes + "  minNodes: 5\n  limits: {nodes: 3}\n"), "minNodes must not exceed limits.nodes"},
		{"budget nodes neither count nor percent", pool(fixedShapes + "  disruption:\n    budgets: [{nodes: ten}]\n"), "spec.disruption.budgets[0].nodes: Invalid value: \"ten\": budget nodes must be a count of at most 9 digits"},
		{"budget percent above 100", pool(fixedShapes + "  disruption:\n    budgets: [{nodes: \"150%\"}]\n"), "budget nodes must be a count of at most 9 digits, such as 3, or a percentage of at most 100%"},
		{"budget schedule without duration", pool(fixedShapes + "  disruption:\n    budgets: [{nodes: \"1\", schedule: \"@daily\"}]\n"), "a budget's schedule and duration must be set together"},
		{"unknown budget reason", pool(fixedShapes + "  disruption:\n    budgets: [{nodes: \"1\", reasons: [Bored]}]\n"), `Unsupported value: "Bored"`},
		{"unknown consolidation policy", pool(fixedShapes + "  disruption: {consolidationPolicy: Always}\n"), `Unsupported value: "Always"`},
		{"malformed consolidateAfter", pool(fixedShapes + "  disruption: {consolidateAfter: 5 minutes}\n"), "spec.disruption.consolidateAfter"},
		{"malformed registration timeout", pool(fixedShapes + "  registrationTimeout: forever\n"), "spec.registrationTimeout"},
		{"reserved template label", pool(fixedShapes + "  template:\n    labels: {claimscale.io/nodepool: other}\n"), "labels in the claimscale.io/ domain are reserved"},
		{"unknown eviction signal", pool(fixedShapes + "  template:\n    kubelet:\n      evictionHard: {memory.free: 100Mi}\n"), "evictionHard takes memory.available"},
		{"malformed eviction threshold", pool(fixedShapes + "  template:\n    kubelet:\n      evictionHard: {memory.available: lots}\n"), "spec.template.kubelet.evictionHard.memory.available"},
		{"zero max pods", pool(fixedShapes + "  template:\n    kubelet: {maxPods: 0}\n"), "should be greater than or equal to 1"},
		{"sleep reason drift", pool(fixedShapes + "  disruption:\n    sleep: {machines: \"2\", reasons: [Drifted]}\n"), "sleep.reasons may name only Empty and Underutilized"},
		{"sleep machines neither count nor percent", pool(fixedShapes + "  disruption:\n    sleep: {machines: many}\n"), "sleep.machines must be a count of at most 9 digits"},
		{"sleep machines percent above 100", pool(fixedShapes + "  disruption:\n    sleep: {machines: \"150%\"}\n"), "sleep.machines must be a count of at most 9 digits"},
		{"sleep without machines", pool(fixedShapes + "  disruption:\n    sleep: {deleteAfter: 1h}\n"), "spec.disruption.sleep.machines: Required value"},
		{"sleep deleteAfter under a minute", pool(fixedShapes + "  disruption:\n    sleep: {machines: \"2\", deleteAfter: 30s}\n"), "sleep.deleteAfter must be at least 1m"},
		{"sleep price that is no number", pool(fixedShapes + "  disruption:\n    sleep: {machines: \"2\", price: cheap}\n"), "spec.disruption.sleep.price"},
		{"malformed start delay", provider("  type: simulated\n  simulated: {startDelay: soon}\n"), "spec.simulated.startDelay"},
		{"proxmox shutdown timeout over an hour", provider("  type: proxmox\n  credentialsSecretRef: {name: c, namespace: d}\n  proxmox:\n" + proxmoxBase + "    clone: {templateID: 9000}\n    shutdownTimeout: 2h\n"), "proxmox.shutdownTimeout must be between 1s and 1h"},
		{"pool without provider", "apiVersion: claimscale.io/v1alpha1\nkind: NodePool\nmetadata: {name: invalid}\nspec:\n" + fixedShapes, "spec.providerRef: Required value"},
		{"claim with zero cpu", claim("{name: small, cpu: \"0\", memory: 4Gi}"), "shape cpu and memory must be greater than zero"},
		{"claim without shape name", claim("{cpu: \"2\", memory: 4Gi}"), "spec.shape.name: Required value"},
	}
	tests = append(tests, badInputCases()...)
	tests = append(tests, warmCapacityCases()...)
	tests = append(tests, deviceCases()...)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			object := mustDecode(t, tt.manifest)
			err := env.Client.Create(ctx, object)
			if err == nil {
				_ = env.Client.Delete(ctx, object)
				t.Fatalf("accepted, want rejection with %q", tt.message)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("rejected with\n  %v\nwant a message containing %q", err, tt.message)
			}
		})
	}
	t.Logf("%d invalid objects rejected", len(tests))
}

func TestNodeClaimSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	claim := mustDecode(t, `
apiVersion: claimscale.io/v1alpha1
kind: NodeClaim
metadata: {name: immutable}
spec:
  nodePoolRef: {name: general}
  shape: {name: small, cpu: "2", memory: 4Gi}
`)
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, claim) })
	if err := unstructured.SetNestedField(claim.Object, "large", "spec", "shape", "name"); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Update(ctx, claim)
	if err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("update of spec.shape.name: got %v, want rejection with %q", err, "spec is immutable")
	}
	// Metadata stays writable: labels and finalizers are how the controller
	// works with claims.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	claim.SetLabels(map[string]string{"team": "a"})
	if err := env.Client.Update(ctx, claim); err != nil {
		t.Fatalf("updating labels: %v", err)
	}
}
