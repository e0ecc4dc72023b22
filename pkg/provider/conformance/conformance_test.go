package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
	"github.com/claimscale/claimscale/pkg/provider/plugin"
)

// flaws are the ways a deliberately broken plugin breaks the contract.
type flaws struct {
	nonIdempotent  bool // every Create makes a new machine
	untagged       bool // machines are made without ownership tags
	deletesForeign bool // Delete removes machines of any cluster
	flattensErrors bool // every error goes out without its kind
	tagsLater      bool // machines are made untagged, then tagged by a second call
	noErrorCases   bool // the harness sets up no failing call
	// Not a flaw: a new machine answers InProgress on the Create that
	// makes it, as a Proxmox clone or a Cluster API Machine does.
	slowCreates bool
	power       powerFlaws
}

// infrastructure is an in-memory machine service shared by the clusters
// of one test.
type infrastructure struct {
	mu       sync.Mutex
	machines map[string]*provider.Instance
	next     int
	// madeWith are the tags each machine was made with, as an API's
	// request log would show them.
	madeWith map[string]map[string]string
}

func (i *infrastructure) tagsAtCreate(_ context.Context, providerID string) (map[string]string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	tags, ok := i.madeWith[providerID]
	if !ok {
		return nil, fmt.Errorf("no machine %s was made", providerID)
	}
	return tags, nil
}

// memory is a provider of infrastructure for one cluster, with flaws.
type memory struct {
	infra   *infrastructure
	cluster string
	flaws   flaws
	// making holds the machines a slow provider has not yet reported.
	making map[string]bool
}

const capacityLimit = 64 // cpus: a larger machine is out of capacity

func (m *memory) err(err error) error {
	if err != nil && m.flaws.flattensErrors {
		return errors.New(err.Error())
	}
	return err
}

func (m *memory) Create(_ context.Context, claim *v1alpha1.NodeClaim, _ provider.CreateOptions) (*provider.Instance, error) {
	m.infra.mu.Lock()
	defer m.infra.mu.Unlock()
	switch {
	case claim.Spec.Shape.CPU.Sign() <= 0 || claim.Spec.Shape.Memory.Sign() <= 0:
		return nil, m.err(provider.NewTerminal(fmt.Errorf("claim %s has no size", claim.Name)))
	case claim.Spec.Shape.CPU.Value() > capacityLimit:
		return nil, m.err(provider.NewInsufficientCapacity(fmt.Errorf("no host has %s cpus free", claim.Spec.Shape.CPU.String())))
	}
	if !m.flaws.nonIdempotent {
		for _, machine := range m.infra.machines {
			if machine.Tags[v1alpha1.TagCluster] == m.cluster && machine.ClaimName() == claim.Name {
				if m.making[machine.ProviderID] {
					delete(m.making, machine.ProviderID)
					return nil, m.err(provider.NewInProgress(fmt.Errorf("machine %s is being made", machine.ProviderID), 10*time.Millisecond))
				}
				return copyOf(machine), nil
			}
		}
	}
	m.infra.next++
	machine := &provider.Instance{
		ProviderID: fmt.Sprintf("memory://%d", m.infra.next),
		Name:       claim.Name,
		Capacity:   corev1.ResourceList{corev1.ResourceCPU: claim.Spec.Shape.CPU, corev1.ResourceMemory: claim.Spec.Shape.Memory},
		Tags:       provider.Tags(m.cluster, claim),
		State:      provider.InstanceRunning,
		CreatedAt:  time.Now().Truncate(time.Second),
	}
	if m.flaws.untagged {
		machine.Tags = map[string]string{}
	}
	m.infra.madeWith[machine.ProviderID] = copyOf(machine).Tags
	if m.flaws.tagsLater {
		m.infra.madeWith[machine.ProviderID] = map[string]string{}
	}
	m.infra.machines[machine.ProviderID] = machine
	if m.flaws.slowCreates {
		m.making[machine.ProviderID] = true
		return nil, m.err(provider.NewInProgress(fmt.Errorf("machine %s is being made", machine.ProviderID), 10*time.Millisecond))
	}
	return copyOf(machine), nil
}

func (m *memory) Delete(_ context.Context, providerID string) error {
	m.infra.mu.Lock()
	defer m.infra.mu.Unlock()
	machine, ok := m.infra.machines[providerID]
	if !ok {
		return nil
	}
	if machine.Tags[v1alpha1.TagCluster] != m.cluster && !m.flaws.deletesForeign {
		return m.err(provider.NewTerminal(fmt.Errorf("refusing to delete %s: not tagged for cluster %s", providerID, m.cluster)))
	}
	if machine.State == provider.InstanceSuspended && m.flaws.power.keepsSuspended {
		return m.err(provider.NewTerminal(fmt.Errorf("machine %s is stopped: start it before deleting it", providerID)))
	}
	delete(m.infra.machines, providerID)
	return nil
}

func (m *memory) Get(_ context.Context, providerID string) (*provider.Instance, error) {
	m.infra.mu.Lock()
	defer m.infra.mu.Unlock()
	machine, ok := m.infra.machines[providerID]
	if !ok || (machine.Tags[v1alpha1.TagCluster] != m.cluster && !m.flaws.untagged) {
		return nil, m.err(provider.NewNotFound("machine %s", providerID))
	}
	return copyOf(machine), nil
}

func (m *memory) List(context.Context) ([]*provider.Instance, error) {
	m.infra.mu.Lock()
	defer m.infra.mu.Unlock()
	var out []*provider.Instance
	for _, machine := range m.infra.machines {
		if machine.Tags[v1alpha1.TagCluster] == m.cluster && !(machine.State == provider.InstanceSuspended && m.flaws.power.hidesSuspended) {
			out = append(out, copyOf(machine))
		}
	}
	return out, nil
}

func (m *memory) Shapes(_ context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	var out []provider.Shape
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.CPU == nil || s.Memory == nil {
			return nil, m.err(provider.NewTerminal(fmt.Errorf("shape %s needs cpu and memory", s.Name)))
		}
		out = append(out, provider.Shape{Name: s.Name, Capacity: corev1.ResourceList{corev1.ResourceCPU: *s.CPU, corev1.ResourceMemory: *s.Memory}})
	}
	return out, nil
}

func copyOf(i *provider.Instance) *provider.Instance {
	out := *i
	out.Tags = map[string]string{}
	for k, v := range i.Tags {
		out.Tags[k] = v
	}
	return &out
}

// servePlugin serves p over the protocol on a Unix socket and returns a
// grpc NodeProvider's client of it.
func servePlugin(t *testing.T, p provider.Provider, cluster string) *plugin.Client {
	t.Helper()
	// Socket paths are limited to about 100 bytes: t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "conf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "p.sock")
	listener, err := plugin.Listen("unix://" + socket)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	plugin.NewServer(p, cluster, nil).Register(server)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	np := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "memory-plugin"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeGRPC, GRPC: &v1alpha1.GRPCSettings{Endpoint: "unix://" + socket}},
	}
	client, err := plugin.NewClient(np, provider.Options{ClusterName: cluster})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func pool() *v1alpha1.NodePool {
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec:       v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "small", CPU: &cpu, Memory: &memory}}}},
	}
}

func claimOf(name, cpu string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
			Shape:       v1alpha1.ClaimShape{Name: "custom", CPU: resource.MustParse(cpu), Memory: resource.MustParse("4Gi")},
		},
	}
}

// harness is a plugin with flaws over an in-memory infrastructure, and a
// well-behaved provider of another cluster on the same infrastructure.
func harness(t *testing.T, f flaws) conformance.Harness {
	return harnessOver(t, f, func(t *testing.T, p provider.Provider, cluster string) provider.Provider {
		return servePlugin(t, p, cluster)
	})
}

// harnessOver is harness with the provider under test reached through
// connect (served as a plugin, or called directly).
func harnessOver(t *testing.T, f flaws, connect func(t *testing.T, p provider.Provider, cluster string) provider.Provider) conformance.Harness {
	infra := &infrastructure{machines: map[string]*provider.Instance{}, madeWith: map[string]map[string]string{}}
	var ours provider.Provider = &memory{infra: infra, cluster: "ours", flaws: f, making: map[string]bool{}}
	if f.power.none {
		ours = powerless{ours}
	}
	p := connect(t, ours, "ours")
	h := conformance.Harness{
		Provider: p, ClusterName: "ours",
		Foreign:           &memory{infra: infra, cluster: "theirs"},
		Pool:              pool(),
		UnknownProviderID: "memory://999999",
		Timeout:           10 * time.Second,
		ErrorCases: []conformance.ErrorCase{
			{Name: "Create of a claim with zero cpu", Want: conformance.Terminal, Call: func(ctx context.Context) error {
				_, err := p.Create(ctx, claimOf("zero", "0"), provider.CreateOptions{})
				return err
			}},
			{Name: "Create of a machine larger than any host", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
				_, err := p.Create(ctx, claimOf("huge", "128"), provider.CreateOptions{})
				return err
			}},
		},
		TagsAtCreate: infra.tagsAtCreate,
	}
	if f.noErrorCases {
		h.ErrorCases = nil
	}
	return h
}

// TestAWellBehavedPluginPasses: the baseline the broken plugins below
// differ from by one flaw each.
func TestAWellBehavedPluginPasses(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness { return harness(t, flaws{}) })
}

// A plugin whose machines take a while answers IN_PROGRESS across the
// wire, and the kit asks again as claimscale would.
func TestAPluginWhoseMachinesTakeTimePasses(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness { return harness(t, flaws{slowCreates: true}) })
}

// TestTheKitCatchesBrokenPlugins: each flaw fails the check of the clause
// it breaks, with a message that names the fault.
func TestTheKitCatchesBrokenPlugins(t *testing.T) {
	checks := map[string]conformance.Check{}
	for _, c := range conformance.Checks() {
		checks[c.Name] = c
	}
	for _, tc := range []struct {
		name    string
		flaws   flaws
		check   string
		message string
	}{
		{"a create that is not idempotent", flaws{nonIdempotent: true}, "Create is idempotent by claim", "Create is not idempotent: a repeated Create of claim"},
		{"a create that is not idempotent under concurrency", flaws{nonIdempotent: true}, "concurrent Creates of one claim make one machine", "Create is not idempotent under concurrency"},
		{"machines made without tags", flaws{untagged: true}, "Create sets the ownership tags", "lacks ownership tags (claimscale.io/cluster=ours, has \"\""},
		{"untagged machines are not listed", flaws{untagged: true}, "List returns only this cluster's machines", "List does not answer machine"},
		{"a delete of foreign machines", flaws{deletesForeign: true}, "Delete refuses a machine without our cluster tag", "a machine without our cluster tag must never be deleted"},
		{"errors without their kind", flaws{flattensErrors: true}, "errors keep their kinds", "Create of a claim with zero cpu: answered a Retryable error"},
		{"a harness without error cases", flaws{noErrorCases: true}, "errors keep their kinds", "the harness gives no ErrorCases"},
		{"tags set by a second call", flaws{tagsLater: true}, "Create sets the ownership tags", "was made without its ownership tags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check, ok := checks[tc.check]
			if !ok {
				t.Fatalf("no check %q", tc.check)
			}
			err := conformance.RunCheck(t.Context(), check, harness(t, tc.flaws))
			if err == nil {
				t.Fatalf("check %q passed a plugin with %s", tc.check, tc.name)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("check %q failed with\n  %v\nwant a message containing %q", tc.check, err, tc.message)
			}
			t.Logf("caught: %v", err)
		})
	}
}
