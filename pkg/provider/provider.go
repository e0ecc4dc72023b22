// Package provider defines what claimscale asks of an infrastructure: turn a
// NodeClaim into a machine and back. A provider knows nothing of pods; a new
// one is a single package that implements Provider and registers a Factory.
package provider

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Provider makes and removes machines for NodeClaims.
type Provider interface {
	// Create makes the machine for a claim, with our ownership tags set in
	// the call that creates it. It is idempotent by claim name: when a
	// machine for the claim already exists (a retry, a controller restart),
	// it returns that machine instead of making another. opts carries what
	// the core prepared for this one machine (its rendered user data).
	Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts CreateOptions) (*Instance, error)
	// Delete removes a machine. A machine that is already gone is success;
	// a machine without our cluster tag is refused.
	Delete(ctx context.Context, providerID string) error
	// Get returns one machine, or a NotFound error.
	Get(ctx context.Context, providerID string) (*Instance, error)
	// List returns the machines tagged for this cluster, and no others.
	List(ctx context.Context) ([]*Instance, error)
	// Shapes returns the machine shapes the pool may use, with capacity and
	// an hourly price, resolving names against the provider's catalog.
	Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]Shape, error)
}

// CreateOptions are what the core prepares for one claim's machine; a
// provider only delivers them.
type CreateOptions struct {
	// UserData is the rendered bootstrap (cloud-init, a Talos or Ignition
	// config) the machine boots with: cloudscale's user_data, a Proxmox
	// cloud-init drive. It carries the claim's join token, so it never
	// appears in logs, events, conditions, errors or metric labels. Empty
	// when the pool renders none; the provider then falls back to its own
	// settings (a shared user-data Secret, a cicustom snippet).
	UserData []byte
}

// InstanceState is where a machine stands.
type InstanceState string

const (
	InstanceCreating InstanceState = "Creating"
	InstanceRunning  InstanceState = "Running"
	InstanceStopping InstanceState = "Stopping"
	InstanceDeleting InstanceState = "Deleting"
)

// Instance is a machine as the provider sees it.
type Instance struct {
	// ProviderID is what the machine's Node carries in spec.providerID.
	ProviderID string
	// Name is the machine's name, which is also the node name it is expected
	// to register with when nothing sets a providerID.
	Name string
	// Capacity of the machine (cpu, memory).
	Capacity corev1.ResourceList
	// Labels the provider knows for the node (zone, region).
	Labels map[string]string
	// Tags are the ownership tags: TagCluster, TagNodePool, TagNodeClaim.
	Tags map[string]string
	// State of the machine.
	State InstanceState
	// CreatedAt is when the machine was made.
	CreatedAt time.Time
}

// ClaimName returns the claim the machine was made for, from its tags.
func (i *Instance) ClaimName() string { return i.Tags[v1alpha1.TagNodeClaim] }

// Shape is a machine size a provider can make. It lives in api/catalog so
// that the scheduling core reads it without depending on this package.
type Shape = shapecatalog.Shape

// Tags returns the ownership tags for a claim's machine.
func Tags(clusterName string, claim *v1alpha1.NodeClaim) map[string]string {
	return map[string]string{
		v1alpha1.TagCluster:   clusterName,
		v1alpha1.TagNodePool:  claim.Spec.NodePoolRef.Name,
		v1alpha1.TagNodeClaim: claim.Name,
	}
}

// Options are what every factory is given besides the NodeProvider.
type Options struct {
	// ClusterName goes into every machine's cluster tag; List and Delete
	// only ever see machines carrying it.
	ClusterName string
	// Credentials are the data of the NodeProvider's credentials Secret.
	// Their values never appear in logs, events, conditions or errors.
	Credentials map[string][]byte
	// Secrets reads other Secret keys the settings reference (user data).
	// Providers get no Kubernetes client: one that keeps state in the
	// cluster (the simulated provider) is given its client by its own
	// factory, so a provider package depends on nothing but the API types
	// and its SDK.
	Secrets SecretReader
	// Namespace the controller runs in.
	Namespace string
}

// SecretReader reads one key of a Secret.
type SecretReader interface {
	ReadSecretKey(ctx context.Context, ref v1alpha1.SecretKeyReference) ([]byte, error)
}

// OwnJoiner is implemented by a provider whose machines join the cluster
// by means of their own, so that a pool's template.bootstrap would never
// reach them: a Cluster API bootstrap provider renders the join. OwnJoin
// says what does it; empty means the provider delivers claimscale's user
// data after all.
type OwnJoiner interface {
	OwnJoin() string
}

// DriftChecker is implemented by a provider whose machines can drift from
// what the NodeProvider only names: a Cluster API MachineDeployment moved
// to new templates changes no NodeProvider field. Disruption asks it about
// each initialized claim that has not drifted on any other count; a
// non-empty reason marks the claim Drifted, to be replaced under the
// pool's budgets.
type DriftChecker interface {
	Drifted(ctx context.Context, claim *v1alpha1.NodeClaim) (reason, message string, err error)
}

// Problem is something wrong on a provider's side that an operator must fix
// and that no single claim's error shows whole: a leftover machine that
// holds an ID, a policy that refuses our tags, a create the API refuses.
type Problem struct {
	// Reason is a CamelCase word for the kind of problem.
	Reason string
	// Message says what is wrong and what to do, without secrets.
	Message string
}

// ProblemReporter is implemented by a provider that notices problems of
// its infrastructure as it works; the NodeProvider's Degraded condition and
// an event show them. Problems returns those standing now.
type ProblemReporter interface {
	Problems() []Problem
}

// Zoner is implemented by a provider whose zones are known only at run
// time (the hosts of a Proxmox cluster, a plugin's zones): provisioning
// puts each new node of its pools in one of them, as the node's
// topology.kubernetes.io/zone, and the claim's requirements name it, so a
// pod with a zone spread can land on the pool. A provider with zones in
// its settings (cloudscale, simulated) need not implement it.
type Zoner interface {
	Zones(ctx context.Context) ([]string, error)
}
