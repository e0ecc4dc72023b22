package v1alpha1

import (
	"encoding/json"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
)

// TemplateHash identifies what a node of this pool and shape is made from:
// the pool's template and the shape's size and devices. A claim records it
// at creation (AnnotationTemplateHash), so a later change to either shows
// as drift. A shape without devices hashes as before they existed, so no
// claim of such a shape drifts by the upgrade that brought them.
func (p *NodePool) TemplateHash(shape ClaimShape) string {
	hasher := fnv.New64a()
	// How a node joined does not change the node it is: a new bootstrap
	// section applies to the next machines and replaces none.
	template := p.Spec.Template
	template.Bootstrap = nil
	// json.Marshal of these types cannot fail; maps are written sorted.
	encoded, _ := json.Marshal(struct {
		Template NodeTemplate        `json:"template"`
		Shape    string              `json:"shape"`
		CPU      string              `json:"cpu"`
		Memory   string              `json:"memory"`
		Devices  corev1.ResourceList `json:"devices,omitempty"`
	}{template, shape.Name, shape.CPU.String(), shape.Memory.String(), shape.ExtendedResources})
	_, _ = hasher.Write(encoded)
	return fmt.Sprintf("%016x", hasher.Sum64())
}
