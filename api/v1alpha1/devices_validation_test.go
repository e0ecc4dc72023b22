package v1alpha1_test

import (
	"context"
	"testing"
)

// deviceCases are devices on shapes the API refuses: extended resources
// on a pool's fixed shape and on a claim's shape alike, and template
// ResourceSlices.
func deviceCases() []rejection {
	shapeWith := func(devices string) string {
		return poolNamed("invalid", "  shapes:\n    fixed: [{name: gpu, cpu: \"8\", memory: 32Gi, extendedResources: {"+devices+"}}]\n")
	}
	claimWith := func(devices string) string {
		return "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: invalid}\nspec:\n  nodePoolRef: {name: general}\n" +
			"  shape: {name: gpu, cpu: \"8\", memory: 32Gi, extendedResources: {" + devices + "}}\n"
	}
	const notExtended = "extendedResources: every name must be an extended resource"
	const notWhole = "extendedResources: every count must be a whole number from 1 to 9999"
	var out []rejection
	for _, form := range []struct {
		kind string
		with func(string) string
	}{{"pool", shapeWith}, {"claim", claimWith}} {
		out = append(out,
			rejection{form.kind + " device without a domain", form.with("gpu: \"1\""), notExtended},
			rejection{form.kind + " device in the kubernetes.io domain", form.with("example.kubernetes.io/gpu: \"1\""), notExtended},
			rejection{form.kind + " cpu named as a device", form.with("cpu: \"1\""), notExtended},
			rejection{form.kind + " quota-style device name", form.with("requests.nvidia.com/gpu: \"1\""), notExtended},
			rejection{form.kind + " device name that is no qualified name", form.with("nvidia.com/g pu: \"1\""), notExtended},
			rejection{form.kind + " zero devices", form.with("nvidia.com/gpu: \"0\""), notWhole},
			rejection{form.kind + " half a device", form.with("nvidia.com/gpu: 500m"), notWhole},
			rejection{form.kind + " a device count in a unit", form.with("nvidia.com/gpu: 1k"), notWhole},
			rejection{form.kind + " ten thousand devices", form.with("nvidia.com/gpu: \"10000\""), notWhole},
			rejection{form.kind + " nine kinds of device", form.with("a.com/d1: \"1\", a.com/d2: \"1\", a.com/d3: \"1\", a.com/d4: \"1\", a.com/d5: \"1\", a.com/d6: \"1\", a.com/d7: \"1\", a.com/d8: \"1\", a.com/d9: \"1\""), "extendedResources: at most 8 kinds of device"},
		)
	}
	slices := func(yaml string) string {
		return poolNamed("invalid", "  shapes:\n    fixed:\n    - name: gpu\n      cpu: \"8\"\n      memory: 32Gi\n      resourceSlices:\n"+yaml)
	}
	device := func(fields string) string {
		return slices("      - driver: gpu.example.com\n        devices: [{name: gpu-0, " + fields + "}]\n")
	}
	out = append(out,
		rejection{"template slice driver that is no DNS subdomain", slices("      - driver: GPU_Driver\n        devices: [{name: gpu-0}]\n"), "spec.shapes.fixed[0].resourceSlices[0].driver"},
		rejection{"template slice without devices", slices("      - driver: gpu.example.com\n        devices: []\n"), "should have at least 1 items"},
		rejection{"template slice pool with upper case", slices("      - driver: gpu.example.com\n        pool: Rack-1\n        devices: [{name: gpu-0}]\n"), "spec.shapes.fixed[0].resourceSlices[0].pool"},
		rejection{"one driver's slice twice", slices("      - driver: gpu.example.com\n        devices: [{name: gpu-0}]\n      - driver: gpu.example.com\n        devices: [{name: gpu-1}]\n"), "Duplicate value"},
		rejection{"device name that is no DNS label", slices("      - driver: gpu.example.com\n        devices: [{name: GPU.0}]\n"), "spec.shapes.fixed[0].resourceSlices[0].devices[0].name"},
		rejection{"device listed twice", slices("      - driver: gpu.example.com\n        devices: [{name: gpu-0}, {name: gpu-0}]\n"), "Duplicate value"},
		rejection{"attribute with two values", device("attributes: {model: {string: a100, int: 1}}"), "spec.shapes.fixed[0].resourceSlices[0].devices[0].attributes.model: Too many"},
		rejection{"attribute without a value", device("attributes: {model: {}}"), "spec.shapes.fixed[0].resourceSlices[0].devices[0].attributes.model: Invalid value"},
		rejection{"attribute version that is no semantic version", device("attributes: {driverVersion: {version: \"1.2\"}}"), "spec.shapes.fixed[0].resourceSlices[0].devices[0].attributes.driverVersion.version"},
	)
	return out
}

// Shapes with devices within the rules are accepted: several kinds, up
// to 9999 of one, on a pool's shape and on a claim's, and template
// ResourceSlices with every kind of attribute.
func TestDevicesOnShapesAreAccepted(t *testing.T) {
	ctx := context.Background()
	for name, manifest := range map[string]string{
		"pool": poolNamed("gpus", "  shapes:\n    fixed: [{name: gpu, cpu: \"8\", memory: 32Gi, extendedResources: {nvidia.com/gpu: \"1\", example.com/rdma: \"9999\", gpu.intel.com/i915: \"8\"}}]\n"),
		"pool with template slices": poolNamed("dra", `  shapes:
    fixed:
    - name: gpu
      cpu: "8"
      memory: 32Gi
      resourceSlices:
      - driver: gpu.example.com
        devices:
        - name: gpu-0
          attributes:
            model: {string: a100}
            gpu.example.com/index: {int: 0}
            mig: {bool: false}
            driverVersion: {version: 550.54.15}
          capacity: {memory: 80Gi}
        - name: gpu-1
          attributes: {model: {string: a100}}
      - driver: nic.example.com
        pool: fabric/rack-1
        devices: [{name: nic-0}]
`),
		"claim": "apiVersion: claimscale.io/v1alpha1\nkind: NodeClaim\nmetadata: {name: gpus}\nspec:\n  nodePoolRef: {name: general}\n" +
			"  shape: {name: gpu, cpu: \"8\", memory: 32Gi, extendedResources: {nvidia.com/gpu: \"4\"}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			object := mustDecode(t, manifest)
			if err := env.Client.Create(ctx, object); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, object) })
		})
	}
}
