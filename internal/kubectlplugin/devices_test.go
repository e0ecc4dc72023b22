package kubectlplugin

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// simulate -f decides pods that ask for devices as the controller would:
// an extended resource a shape has, and ResourceClaims made from the
// files' templates against the files' DeviceClasses.
func TestSimulateDecidesOnDevices(t *testing.T) {
	const claimingDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: train}
spec:
  replicas: 2
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: a100}]
      containers: [{name: app, image: x, resources: {requests: {cpu: "1"}, claims: [{name: gpu}]}}]
`
	const classAndTemplate = `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: a100}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu
          selectors: [{cel: {expression: 'device.attributes["gpu.example.com"].model == "a100"'}}]
---
`
	for _, tt := range []struct {
		name, manifest string
		want           []string
	}{{
		name: "an extended resource a shape has buys that shape",
		manifest: `apiVersion: apps/v1
kind: Deployment
metadata: {name: cuda}
spec:
  replicas: 2
  selector: {matchLabels: {app: cuda}}
  template:
    metadata: {labels: {app: cuda}}
    spec: {containers: [{name: app, image: x, resources: {limits: {nvidia.com/gpu: '1'}}}]}
`,
		want: []string{"general  g2     -     1      1.5"},
	}, {
		name:     "claims made from the files' template buy the shape whose slices satisfy them",
		manifest: classAndTemplate + claimingDeployment,
		want:     []string{"general  a100x2  -     1      3"},
	}, {
		name:     "a pod whose template is nowhere is refused, as no claim would be made for it",
		manifest: claimingDeployment,
		want:     []string{"no ResourceClaim would be made for it: its claim gpu names ResourceClaimTemplate shop/a100, which is neither in the files nor in the cluster"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := readWorkloads([]string{"-"}, strings.NewReader(tt.manifest), "shop")
			if err != nil {
				t.Fatal(err)
			}
			cluster := offlineCluster()
			pool := &cluster.NodePools[0]
			pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed,
				v1alpha1.Shape{Name: "g2", CPU: ptr.To(resource.MustParse("8")), Memory: ptr.To(resource.MustParse("32Gi")), Price: "1.5",
					ExtendedResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}},
				v1alpha1.Shape{Name: "a100x2", CPU: ptr.To(resource.MustParse("8")), Memory: ptr.To(resource.MustParse("32Gi")), Price: "3",
					ResourceSlices: []v1alpha1.TemplateResourceSlice{{Driver: "gpu.example.com", Devices: []v1alpha1.TemplateDevice{
						{Name: "gpu-0", Attributes: map[string]v1alpha1.TemplateDeviceAttribute{"model": {String: ptr.To("a100")}}},
						{Name: "gpu-1", Attributes: map[string]v1alpha1.TemplateDeviceAttribute{"model": {String: ptr.To("a100")}}},
					}}}},
			)
			cluster.Offers[0].Shapes = append(cluster.Offers[0].Shapes,
				decisions.OfferShape{Name: "g2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")}, Price: 1.5},
				decisions.OfferShape{Name: "a100x2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")}, Price: 3},
			)
			report, err := simulate(context.Background(), snapshotReader{cluster}, cluster.Offers, w)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := writeSimulation(&out, report); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("simulate said\n%s\nwant it to contain %q", out.String(), want)
				}
			}
		})
	}
}
