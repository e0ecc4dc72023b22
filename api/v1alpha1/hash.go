package v1alpha1

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
)

// TemplateHash identifies what a node of this pool and shape is made from:
// the pool's template and the shape's size. A claim records it at creation
// (AnnotationTemplateHash), so a later change to either shows as drift.
func (p *NodePool) TemplateHash(shape ClaimShape) string {
	hasher := fnv.New64a()
	// How a node joined does not change the node it is: a new bootstrap
	// section applies to the next machines and replaces none.
	template := p.Spec.Template
	template.Bootstrap = nil
	// json.Marshal of these types cannot fail; maps are written sorted.
	encoded, _ := json.Marshal(struct {
		Template NodeTemplate `json:"template"`
		Shape    string       `json:"shape"`
		CPU      string       `json:"cpu"`
		Memory   string       `json:"memory"`
	}{template, shape.Name, shape.CPU.String(), shape.Memory.String()})
	_, _ = hasher.Write(encoded)
	return fmt.Sprintf("%016x", hasher.Sum64())
}
