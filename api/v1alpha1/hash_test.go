package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Adding or changing a pool's bootstrap section drifts no node: it decides
// how the next machines join, not what a node is. A label still does.
func TestTemplateHashIgnoresBootstrap(t *testing.T) {
	shape := ClaimShape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")}
	pool := &NodePool{Spec: NodePoolSpec{Template: NodeTemplate{Labels: map[string]string{"team": "a"}}}}
	before := pool.TemplateHash(shape)

	pool.Spec.Template.Bootstrap = &Bootstrap{Method: JoinKubeadm}
	if got := pool.TemplateHash(shape); got != before {
		t.Errorf("a bootstrap section changed the template hash: %s, was %s", got, before)
	}
	pool.Spec.Template.Labels["team"] = "b"
	if got := pool.TemplateHash(shape); got == before {
		t.Errorf("a label change left the template hash at %s", got)
	}
}
