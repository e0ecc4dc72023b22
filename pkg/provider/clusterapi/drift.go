package clusterapi

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// DriftMachineDeployment is the Drifted reason of a claim whose shape's
// MachineDeployment now makes Machines from other templates.
const DriftMachineDeployment = "MachineDeploymentDrifted"

var _ provider.DriftChecker = (*Provider)(nil)

// Drifted says whether the claim's Machine was made from templates other
// than those its shape's MachineDeployment names now. Templates named in
// the NodeProvider need no check here: changing them changes the
// NodeProvider, which drifts its claims by itself.
func (p *Provider) Drifted(ctx context.Context, claim *v1alpha1.NodeClaim) (reason, message string, err error) {
	shape, ok := p.shapeSettings(claim.Spec.Shape.Name)
	if !ok || shape.MachineDeployment == "" {
		return "", "", nil
	}
	machine, err := p.getMachine(ctx, claim.Name)
	if apierrors.IsNotFound(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading Machine %s/%s: %w", p.namespace, claim.Name, err)
	}
	recorded := machine.GetAnnotations()[AnnotationTemplates]
	if recorded == "" || machine.GetLabels()[v1alpha1.TagNodeClaim] != claim.Name {
		return "", "", nil
	}
	r, err := p.recipeOf(ctx, shape)
	if err != nil {
		return "", "", err
	}
	if current := r.templatesKey(); current != recorded {
		return DriftMachineDeployment, fmt.Sprintf("MachineDeployment %s/%s now makes Machines from %s; Machine %s was made from %s",
			p.namespace, shape.MachineDeployment, current, machine.GetName(), recorded), nil
	}
	return "", "", nil
}
