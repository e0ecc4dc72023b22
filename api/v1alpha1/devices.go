package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ForNode is the ResourceSlice a node named node publishes for the
// template, as its driver would: named after the node and the driver,
// local to the node, in the node's own pool unless the template names
// one. Provisioning simulates new nodes with it and the simulated
// provider publishes it for its nodes: one truth, two readers.
func (t TemplateResourceSlice) ForNode(node string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + t.Driver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   t.Driver,
			Pool:     resourcev1.ResourcePool{Name: t.PoolFor(node), Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  t.devices(),
		},
	}
}

// PoolFor is the name of the template's pool on a node.
func (t TemplateResourceSlice) PoolFor(node string) string {
	if t.Pool != "" {
		return t.Pool
	}
	return node
}

// devices converts the template's devices to the API's.
func (t TemplateResourceSlice) devices() []resourcev1.Device {
	out := make([]resourcev1.Device, 0, len(t.Devices))
	for _, d := range t.Devices {
		dev := resourcev1.Device{Name: d.Name}
		if len(d.Attributes) > 0 {
			dev.Attributes = make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(d.Attributes))
			for k, a := range d.Attributes {
				dev.Attributes[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute{
					IntValue: a.Int, BoolValue: a.Bool, StringValue: a.String, VersionValue: a.Version,
				}
			}
		}
		if len(d.Capacity) > 0 {
			dev.Capacity = make(map[resourcev1.QualifiedName]resourcev1.DeviceCapacity, len(d.Capacity))
			for k, q := range d.Capacity {
				dev.Capacity[resourcev1.QualifiedName(k)] = resourcev1.DeviceCapacity{Value: q.DeepCopy()}
			}
		}
		out = append(out, dev)
	}
	return out
}

// LabelGPU marks the nodes of a shape with GPUs, with the shape's name as
// the GPU type. It is what the externalgrpc shim answers to
// cluster-autoscaler's GPULabel by default, and GetAvailableGPUTypes lists
// its values.
const LabelGPU = "claimscale.io/gpu"

// GPUType is the value of LabelGPU on the nodes of a shape: "" when the
// shape has no GPU, an extended resource whose name says gpu
// (nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915).
func GPUType(shape string, devices corev1.ResourceList) string {
	for name, count := range devices {
		if strings.Contains(strings.ToLower(string(name)), "gpu") && count.Sign() > 0 {
			return shape
		}
	}
	return ""
}
