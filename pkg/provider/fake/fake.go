// Package fake is a provider.Provider held in memory, for the tests of what
// drives a provider (provisioning, the claim lifecycle, disruption): it
// records every call, answers the shapes it is given, and fails, or takes
// its time, exactly when a test says so, so that a test reads like the
// scenario it tests ("the next Create has no capacity").
//
// It follows the provider contract (the conformance kit runs against it):
// Create is idempotent by claim and tags the machine in the same call, List
// answers only this cluster's machines, Delete refuses a machine without
// this cluster's tag and takes one already gone as done, Get of an unknown
// machine is not-found.
//
// Machines carry a state (Creating while a create is in progress, Running
// after, Suspended while asleep). The fake manages power
// (provider.PowerManager, power.go) as the contract says: Suspend and
// Resume are idempotent, refuse a machine without this cluster's tag and
// answer NotFound for one that is gone; their errors are injected like any
// other call's (FailNext(fake.Resume, provider.NewInsufficientCapacity(…)),
// provider.NewNotSupported), and DisablePower makes a provider that cannot
// manage power at all. SetState changes a machine's state directly.
package fake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Method names a provider call.
type Method string

const (
	Create Method = "Create"
	Delete Method = "Delete"
	Get    Method = "Get"
	List   Method = "List"
	Shapes Method = "Shapes"
	// Suspend and Resume are the power calls (provider.PowerManager).
	Suspend Method = "Suspend"
	Resume  Method = "Resume"
)

// ProviderIDPrefix begins every providerID the fake makes.
const ProviderIDPrefix = "fake://"

// Call is one call a provider received.
type Call struct {
	Method Method
	// Cluster is the cluster of the provider that was called.
	Cluster string
	// Claim is the claim of a Create; Pool the pool of a Create or Shapes;
	// ProviderID the machine of a Delete, Get, Suspend or Resume.
	Claim, Pool, ProviderID string
	// UserData is what a Create was given to deliver.
	UserData []byte
	// Err is what the call answered.
	Err error
}

// Infrastructure is the machines every provider built on it sees: two
// providers of one Infrastructure for different clusters see each other's
// machines the way two clusters sharing a cloud account do.
type Infrastructure struct {
	mu       sync.Mutex
	machines map[string]*provider.Instance // by providerID
	calls    []Call
	shapes   []provider.Shape
	// failures are queued errors by method, answered one per call before
	// the call does anything; sticky ones answer every call until cleared.
	failures map[Method][]error
	sticky   map[Method]error
	// inProgress is how many Creates of a new claim answer InProgress
	// before its machine is reported, and the wait they ask for.
	inProgress      int
	inProgressAfter time.Duration
	// creating counts the InProgress answers given per claim.
	creating map[string]int
	now      func() time.Time
	// powerless: the providers cannot manage power (DisablePower).
	powerless bool
}

// NewInfrastructure makes an empty infrastructure offering shapes to every
// pool.
func NewInfrastructure(shapes ...provider.Shape) *Infrastructure {
	return &Infrastructure{
		machines: map[string]*provider.Instance{},
		shapes:   shapes,
		failures: map[Method][]error{},
		sticky:   map[Method]error{},
		creating: map[string]int{},
		now:      time.Now,
	}
}

// New makes a provider for clusterName on an infrastructure of its own.
func New(clusterName string, shapes ...provider.Shape) *Provider {
	return NewInfrastructure(shapes...).Provider(clusterName)
}

// Provider is a provider for clusterName on this infrastructure.
func (in *Infrastructure) Provider(clusterName string) *Provider {
	return &Provider{Infrastructure: in, ClusterName: clusterName}
}

// SetShapes replaces the shapes offered to every pool.
func (in *Infrastructure) SetShapes(shapes ...provider.Shape) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.shapes = slices.Clone(shapes)
}

// FailNext makes the next calls of method answer errs, one per call, in
// order; any error kind (provider.NewInsufficientCapacity, NewTerminal,
// NewRetryable, NewNotFound, or a plain error) is answered as given.
func (in *Infrastructure) FailNext(method Method, errs ...error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.failures[method] = append(in.failures[method], errs...)
}

// Fail makes every call of method answer err until Recover.
func (in *Infrastructure) Fail(method Method, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.sticky[method] = err
}

// Recover ends Fail and drops the errors FailNext queued for method.
func (in *Infrastructure) Recover(method Method) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.sticky, method)
	delete(in.failures, method)
}

// CreateInProgress makes the first n Creates of every new claim answer
// InProgress, asking to be called again after after, the way a provider
// whose machines take a while (a clone task, a Machine without a
// providerID) answers; the machine exists meanwhile, in state Creating.
func (in *Infrastructure) CreateInProgress(n int, after time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.inProgress, in.inProgressAfter = n, after
}

// SetState puts a machine into state, as a power operation would. It
// reports whether the machine exists.
func (in *Infrastructure) SetState(providerID string, state provider.InstanceState) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	machine, ok := in.machines[providerID]
	if ok {
		machine.State = state
	}
	return ok
}

// Calls returns the calls received so far, of the methods given (all when
// none are).
func (in *Infrastructure) Calls(methods ...Method) []Call {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []Call
	for _, call := range in.calls {
		if len(methods) == 0 || slices.Contains(methods, call.Method) {
			out = append(out, call)
		}
	}
	return out
}

// ResetCalls forgets the calls received so far.
func (in *Infrastructure) ResetCalls() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.calls = nil
}

// Machines returns a copy of every machine, of every cluster.
func (in *Infrastructure) Machines() []*provider.Instance {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]*provider.Instance, 0, len(in.machines))
	for _, machine := range in.machines {
		out = append(out, copyOf(machine))
	}
	slices.SortFunc(out, func(a, b *provider.Instance) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	return out
}

// injected answers the error a test queued for method, if any. Called with
// mu held.
func (in *Infrastructure) injected(method Method) error {
	if queue := in.failures[method]; len(queue) > 0 {
		in.failures[method] = queue[1:]
		return queue[0]
	}
	return in.sticky[method]
}

// record notes a call and returns err. Called with mu held.
func (in *Infrastructure) record(call Call, err error) error {
	call.Err = err
	in.calls = append(in.calls, call)
	return err
}

// Provider is one cluster's provider on an Infrastructure.
type Provider struct {
	*Infrastructure
	ClusterName string
}

var _ provider.Provider = (*Provider)(nil)

// Create makes the claim's machine, or answers the one it already made.
func (p *Provider) Create(_ context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	call := Call{Method: Create, Cluster: p.ClusterName, Claim: claim.Name, Pool: claim.Spec.NodePoolRef.Name, UserData: slices.Clone(opts.UserData)}
	if err := in.injected(Create); err != nil {
		return nil, in.record(call, err)
	}
	id := ProviderIDPrefix + p.ClusterName + "/" + claim.Name
	machine, exists := in.machines[id]
	if !exists {
		machine = &provider.Instance{
			ProviderID: id,
			Name:       claim.Name,
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    claim.Spec.Shape.CPU.DeepCopy(),
				corev1.ResourceMemory: claim.Spec.Shape.Memory.DeepCopy(),
			},
			Tags:      provider.Tags(p.ClusterName, claim),
			State:     provider.InstanceCreating,
			CreatedAt: in.now(),
		}
		in.machines[id] = machine
	}
	if machine.State == provider.InstanceCreating {
		if in.creating[id] < in.inProgress {
			in.creating[id]++
			return nil, in.record(call, provider.NewInProgress(fmt.Errorf("machine %s is being made", claim.Name), in.inProgressAfter))
		}
		machine.State = provider.InstanceRunning
	}
	call.ProviderID = id
	return copyOf(machine), in.record(call, nil)
}

// Delete removes a machine of this cluster; one already gone is success.
func (p *Provider) Delete(_ context.Context, providerID string) error {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	call := Call{Method: Delete, Cluster: p.ClusterName, ProviderID: providerID}
	if err := in.injected(Delete); err != nil {
		return in.record(call, err)
	}
	machine, ok := in.machines[providerID]
	if !ok {
		return in.record(call, nil)
	}
	if machine.Tags[v1alpha1.TagCluster] != p.ClusterName {
		return in.record(call, provider.NewTerminal(fmt.Errorf("machine %s is not tagged %s=%s: refusing to delete it", providerID, v1alpha1.TagCluster, p.ClusterName)))
	}
	delete(in.machines, providerID)
	delete(in.creating, providerID)
	return in.record(call, nil)
}

// Get answers one machine of any cluster, or NotFound.
func (p *Provider) Get(_ context.Context, providerID string) (*provider.Instance, error) {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	call := Call{Method: Get, Cluster: p.ClusterName, ProviderID: providerID}
	if err := in.injected(Get); err != nil {
		return nil, in.record(call, err)
	}
	machine, ok := in.machines[providerID]
	if !ok {
		return nil, in.record(call, provider.NewNotFound("machine %s", providerID))
	}
	return copyOf(machine), in.record(call, nil)
}

// List answers this cluster's machines.
func (p *Provider) List(_ context.Context) ([]*provider.Instance, error) {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	call := Call{Method: List, Cluster: p.ClusterName}
	if err := in.injected(List); err != nil {
		return nil, in.record(call, err)
	}
	var out []*provider.Instance
	for _, machine := range in.machines {
		if machine.Tags[v1alpha1.TagCluster] == p.ClusterName {
			out = append(out, copyOf(machine))
		}
	}
	slices.SortFunc(out, func(a, b *provider.Instance) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	return out, in.record(call, nil)
}

// Shapes answers the infrastructure's shapes, whatever the pool.
func (p *Provider) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	call := Call{Method: Shapes, Cluster: p.ClusterName, Pool: pool.Name}
	if err := in.injected(Shapes); err != nil {
		return nil, in.record(call, err)
	}
	out := make([]provider.Shape, len(in.shapes))
	for i, shape := range in.shapes {
		out[i] = shape
		out[i].Capacity = shape.Capacity.DeepCopy()
	}
	return out, in.record(call, nil)
}

func copyOf(machine *provider.Instance) *provider.Instance {
	out := *machine
	out.Capacity = machine.Capacity.DeepCopy()
	out.Labels = maps.Clone(machine.Labels)
	out.Tags = maps.Clone(machine.Tags)
	return &out
}

// Resolver hands out one provider for every NodeProvider: the provider
// resolver of a test cluster with one infrastructure.
type Resolver struct{ Provider provider.Provider }

// ForProviderName returns the one provider, whatever the name.
func (r Resolver) ForProviderName(context.Context, string) (provider.Provider, error) {
	return r.Provider, nil
}
