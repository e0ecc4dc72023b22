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
	// json.Marshal of these types cannot fail; maps are written sorted.
	encoded, _ := json.Marshal(struct {
		Template NodeTemplate `json:"template"`
		Shape    string       `json:"shape"`
		CPU      string       `json:"cpu"`
		Memory   string       `json:"memory"`
	}{p.Spec.Template, shape.Name, shape.CPU.String(), shape.Memory.String()})
	_, _ = hasher.Write(encoded)
	return fmt.Sprintf("%016x", hasher.Sum64())
}
