package poolclaims

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// TemplateProblem says what in a pool's template can never make a node
// of shapes, of what can be told without an API server: the template node
// cannot be computed (an eviction threshold above 100 %), or a taint a
// Node would refuse. Nil when nothing is wrong, or the pool has no shape.
func TemplateProblem(pool *v1alpha1.NodePool, shapes scheduling.Shapes) error {
	shape, ok := AnyShape(shapes)
	if !ok {
		return nil
	}
	if _, err := scheduling.TemplateNode(pool, shape, "", "template"); err != nil {
		return err
	}
	return validateTaints(pool)
}

// AnyShape is one shape the pool can make: the template's validity does
// not depend on which.
func AnyShape(shapes scheduling.Shapes) (scheduling.Shape, bool) {
	if len(shapes.Fixed) > 0 {
		return shapes.Fixed[0], true
	}
	if f := shapes.Flexible; f != nil {
		return scheduling.Shape{Name: "flexible", CPU: f.MinCPU, Memory: f.MinMemory}, true
	}
	return scheduling.Shape{}, false
}

// validateTaints applies the API server's rules for Node taints, which a
// NodeClaim's schema does not: a taint it refuses would fail only when the
// node registers, after a machine was paid for.
func validateTaints(pool *v1alpha1.NodePool) error {
	var problems []string
	for _, list := range []struct {
		field  string
		taints []corev1.Taint
	}{
		{"spec.template.taints", pool.Spec.Template.Taints}, {"spec.template.startupTaints", pool.Spec.Template.StartupTaints},
	} {
		for i, taint := range list.taints {
			path := fmt.Sprintf("%s[%d]", list.field, i)
			for _, msg := range validation.IsQualifiedName(taint.Key) {
				problems = append(problems, fmt.Sprintf("%s.key %q: %s", path, taint.Key, msg))
			}
			if taint.Value != "" {
				for _, msg := range validation.IsValidLabelValue(taint.Value) {
					problems = append(problems, fmt.Sprintf("%s.value %q: %s", path, taint.Value, msg))
				}
			}
			switch taint.Effect {
			case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			default:
				problems = append(problems, fmt.Sprintf("%s.effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", path, taint.Effect))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}
