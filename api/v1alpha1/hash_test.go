package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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

// Devices are part of what a node is: a shape that gains or loses one
// drifts. A shape without devices hashes as it did before shapes had
// them (the value below is the hash of that older code), so an upgrade
// drifts none of the nodes already running.
func TestTemplateHashDevices(t *testing.T) {
	shape := ClaimShape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")}
	pool := &NodePool{Spec: NodePoolSpec{Template: NodeTemplate{Labels: map[string]string{"team": "a"}}}}
	plain := pool.TemplateHash(shape)
	if plain != "5a76b98fb830520a" {
		t.Errorf("a shape without devices hashes to %s, not to what it did before devices (5a76b98fb830520a)", plain)
	}
	shape.ExtendedResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	one := pool.TemplateHash(shape)
	if one == plain {
		t.Errorf("adding a GPU left the template hash at %s", one)
	}
	shape.ExtendedResources["nvidia.com/gpu"] = resource.MustParse("2")
	if two := pool.TemplateHash(shape); two == one {
		t.Errorf("a second GPU left the template hash at %s", two)
	}
}
