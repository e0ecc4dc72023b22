package clusterapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// DriftMachineDeployment is the Drifted reason of a claim whose shape's
// MachineDeployment now makes Machines from other templates.
const DriftMachineDeployment = "MachineDeploymentDrifted"

var (
	_ provider.DriftChecker = (*Provider)(nil)
	_ provider.OwnJoiner    = (*Provider)(nil)
)

// OwnJoin: a Machine joins with what its bootstrap provider renders from
// the bootstrap config template; claimscale's user data has nowhere to go.
func (p *Provider) OwnJoin() string {
	return "the Cluster API bootstrap provider of the shape's bootstrap config template"
}

// driftRecheck is how long Drifted trusts what it read of a
// MachineDeployment. Disruption asks about every claim every round; a
// rollout noticed half a minute late costs nothing, two reads of the
// management cluster per claim per round cost a great deal at scale.
const driftRecheck = 30 * time.Second

// driftMemory keeps what Drifted read: the templates a Machine was made
// from never change after its create (AnnotationTemplates is written with
// it), and a MachineDeployment's are re-read after driftRecheck.
type driftMemory struct {
	mu sync.Mutex
	// machines maps a claim's name to the templates its Machine was made
	// from; the providerID tells a Machine made again for the claim.
	machines map[string]machineTemplates
	// deployments maps a MachineDeployment's name to its templates now.
	deployments map[string]deploymentTemplates
}

type machineTemplates struct {
	providerID, machine, key string
	// version is the Machine's spec.version, the Kubernetes version its
	// node was made to run.
	version string
}

type deploymentTemplates struct {
	key, version string
	readAt       time.Time
}

// Drifted says whether the claim's Machine was made from templates, or for
// a Kubernetes version, other than those its shape's MachineDeployment
// names now: either starts a CAPI rollout. Templates and versions named in
// the NodeProvider need no check here: changing them changes the
// NodeProvider, which drifts its claims by itself.
func (p *Provider) Drifted(ctx context.Context, claim *v1alpha1.NodeClaim) (reason, message string, err error) {
	shape, ok := p.shapeSettings(claim.Spec.Shape.Name)
	if !ok || shape.MachineDeployment == "" {
		return "", "", nil
	}
	made, err := p.machineTemplates(ctx, claim)
	if err != nil || made.key == "" {
		return "", "", err
	}
	current, err := p.deploymentTemplates(ctx, shape)
	if err != nil {
		return "", "", err
	}
	if current.key != made.key {
		return DriftMachineDeployment, fmt.Sprintf("MachineDeployment %s/%s now makes Machines from %s; Machine %s was made from %s",
			p.namespace, shape.MachineDeployment, current.key, made.machine, made.key), nil
	}
	// A Machine made before the MachineDeployment named a version runs
	// whatever its image has; only a change of a named version drifts.
	if current.version != "" && made.version != "" && current.version != made.version {
		return DriftMachineDeployment, fmt.Sprintf("MachineDeployment %s/%s now makes Machines of Kubernetes %s; Machine %s runs %s",
			p.namespace, shape.MachineDeployment, current.version, made.machine, made.version), nil
	}
	return "", "", nil
}

// machineTemplates answers the templates the claim's Machine was made
// from, empty for a Machine that is gone or not the claim's.
func (p *Provider) machineTemplates(ctx context.Context, claim *v1alpha1.NodeClaim) (machineTemplates, error) {
	p.drift.mu.Lock()
	known, ok := p.drift.machines[claim.Name]
	p.drift.mu.Unlock()
	// A claim without a providerID yet may still get a Machine made
	// differently; only a registered one is remembered.
	if ok && known.providerID == claim.Status.ProviderID {
		return known, nil
	}
	machine, err := p.getMachine(ctx, claim.Name)
	if apierrors.IsNotFound(err) {
		return machineTemplates{}, nil
	}
	if err != nil {
		return machineTemplates{}, fmt.Errorf("reading Machine %s/%s: %w", p.namespace, claim.Name, err)
	}
	if machine.GetLabels()[v1alpha1.TagNodeClaim] != claim.Name {
		return machineTemplates{}, nil
	}
	version, _, _ := unstructured.NestedString(machine.Object, "spec", "version")
	made := machineTemplates{providerID: claim.Status.ProviderID, machine: machine.GetName(), key: machine.GetAnnotations()[AnnotationTemplates], version: version}
	if made.providerID != "" {
		p.drift.mu.Lock()
		p.drift.machines[claim.Name] = made
		p.drift.mu.Unlock()
	}
	return made, nil
}

// deploymentTemplates answers the templates and version the shape's
// MachineDeployment names, read at most once per driftRecheck.
func (p *Provider) deploymentTemplates(ctx context.Context, shape *v1alpha1.ClusterAPIShape) (deploymentTemplates, error) {
	now := p.clock.Now()
	p.drift.mu.Lock()
	known, ok := p.drift.deployments[shape.MachineDeployment]
	p.drift.mu.Unlock()
	if ok && now.Sub(known.readAt) < driftRecheck {
		return known, nil
	}
	r, err := p.recipeOf(ctx, shape)
	if err != nil {
		return deploymentTemplates{}, err
	}
	current := deploymentTemplates{key: r.templatesKey(), version: r.version, readAt: now}
	p.drift.mu.Lock()
	p.drift.deployments[shape.MachineDeployment] = current
	p.drift.mu.Unlock()
	return current, nil
}

// forgetMachine drops what Drifted remembers of a claim's Machine.
func (p *Provider) forgetMachine(claimName string) {
	p.drift.mu.Lock()
	delete(p.drift.machines, claimName)
	p.drift.mu.Unlock()
}
