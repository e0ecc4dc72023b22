package poolusability

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// The checks that need no API server: the template node can be computed,
// and the taints are ones a Node accepts. A nil TemplateCheck makes only
// these.
func TestTemplateCheckNamesTheFieldThatCanNeverMakeANode(t *testing.T) {
	shapes := scheduling.Shapes{Fixed: []scheduling.Shape{{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")}}}
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.NodePool)
		want   string
	}{
		{"a healthy template", func(*v1alpha1.NodePool) {}, ""},
		{"evictionHard above 100 %", func(p *v1alpha1.NodePool) {
			p.Spec.Template.Kubelet.EvictionHard = map[string]v1alpha1.EvictionThreshold{"memory.available": "150%"}
		}, "evictionHard memory.available"},
		{"a taint key a Node refuses", func(p *v1alpha1.NodePool) {
			p.Spec.Template.Taints = []corev1.Taint{{Key: "not a key!", Effect: corev1.TaintEffectNoSchedule}}
		}, "spec.template.taints[0].key"},
		{"a taint value a Node refuses", func(p *v1alpha1.NodePool) {
			p.Spec.Template.Taints = []corev1.Taint{{Key: "team", Value: "a b", Effect: corev1.TaintEffectNoSchedule}}
		}, "spec.template.taints[0].value"},
		{"a startup taint without effect", func(p *v1alpha1.NodePool) {
			p.Spec.Template.StartupTaints = []corev1.Taint{{Key: "cni"}}
		}, "spec.template.startupTaints[0].effect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &v1alpha1.NodePool{}
			pool.Name = "pool"
			tc.mutate(pool)
			var check *TemplateCheck
			err := check.Check(t.Context(), pool, shapes)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a healthy template refused: %v", err)
			case tc.want != "" && (!IsTemplateInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v, want a TemplateInvalidError naming %q", err, tc.want)
			}
		})
	}
}
