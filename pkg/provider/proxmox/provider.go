// Package proxmox makes claimscale's machines as virtual machines on a
// Proxmox VE cluster, by cloning a template or by netbooting a blank VM,
// through the Proxmox API (github.com/luthermonson/go-proxmox).
package proxmox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pmx "github.com/luthermonson/go-proxmox"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// ProviderIDPrefix starts every providerID: proxmox://<cluster-name>/<vmid>.
const ProviderIDPrefix = "proxmox://"

// Defaults for Tuning.
const (
	DefaultTaskPollInterval = time.Second
	// DefaultTaskTimeout is generous because a full clone copies the
	// template's disks.
	DefaultTaskTimeout = 10 * time.Minute
)

// maxIDConflicts bounds how many taken VM IDs one Create steps over before
// it gives up for this round.
const maxIDConflicts = 16

// Tuning adjusts timings; the zero value means the defaults.
type Tuning struct {
	// TaskPollInterval is how often a running Proxmox task is polled.
	TaskPollInterval time.Duration
	// TaskTimeout is how long one task may run before the call gives up on
	// it (the task itself runs on; its VM is adopted by the next Create).
	TaskTimeout time.Duration
	// StaleLockAfter is how long a VM of the ID range may show a clone or
	// create lock without saying whose it is before Create stops waiting
	// for it and reports it as a leftover (default: TaskTimeout).
	StaleLockAfter time.Duration
	// ShutdownGrace is how much longer than spec.proxmox.shutdownTimeout
	// Suspend waits for the shutdown task before it stops the VM
	// (default: DefaultShutdownGrace).
	ShutdownGrace time.Duration
	// Clock is the time source; tests pass a fake one.
	Clock clock.WithTicker
}

// Provider makes NodeClaims' machines as Proxmox VMs.
type Provider struct {
	settings *settings
	cluster  string
	api      *api
	tasks    *tasks
	clock    clock.WithTicker

	// mu serializes choosing a node and a VM ID with the call that makes the
	// VM, so two claims made at once neither pick the same ID nor count the
	// same free memory twice.
	mu       sync.Mutex
	inflight map[int]reservation
	// launched maps the VMs this provider began to the claims they are
	// for, while they are locked without markers: Proxmox writes a clone's
	// name and description only when its first disk is copied.
	launched map[int]string
	// lockSeen is when each locked VM without markers was first seen, for
	// the stale-lock deadline; reported, which of them were logged.
	lockSeen       map[int]time.Time
	reported       map[int]bool
	staleLockAfter time.Duration
	// shutdownGrace is Tuning.ShutdownGrace.
	shutdownGrace time.Duration
	// staleLocks says, by VM ID, what is wrong with each VM locked past
	// the deadline, for Problems.
	staleLocks map[int]string
	// pciProblems says, by mapping ID, what is wrong with each PCI mapping
	// of spec.proxmox.pciDevices the cluster did not list, for Problems.
	pciProblems map[string]string
	// started is when the provider was built: a claim made since cannot
	// own a VM the provider did not begin.
	started time.Time

	// tagRefused is the datacenter tag policy's last refusal of our tags
	// (empty when none stands), tagRefusedAt when it came. Its own lock:
	// the refusal is noted while p.mu is held.
	tagMu        sync.Mutex
	tagRefused   string
	tagRefusedAt time.Time

	// lastSweep is when List last looked for cloud-init ISOs no VM uses.
	lastSweep time.Time
}

var (
	_ provider.Provider        = (*Provider)(nil)
	_ provider.ProblemReporter = (*Provider)(nil)
)

// Problems reports what an operator must fix in the Proxmox cluster that
// fails no single call: a tag policy that refuses our tags, VMs of the ID
// range locked past the stale-lock deadline, PCI mappings of
// spec.proxmox.pciDevices the cluster does not have.
func (p *Provider) Problems() []provider.Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Problem
	if refused, _ := p.tagRefusal(); refused != "" {
		out = append(out, provider.Problem{Reason: ProblemTagPolicy, Message: refused})
	}
	for _, vmid := range slices.Sorted(maps.Keys(p.staleLocks)) {
		out = append(out, provider.Problem{Reason: ProblemStaleLock, Message: p.staleLocks[vmid]})
	}
	for _, mapping := range slices.Sorted(maps.Keys(p.pciProblems)) {
		out = append(out, provider.Problem{Reason: ProblemPCIMappingMissing, Message: p.pciProblems[mapping]})
	}
	return out
}

// Reasons of the provider's problems.
const (
	// ProblemStaleLock: a VM of the ID range locked past the stale-lock
	// deadline.
	ProblemStaleLock = "StaleLock"
	// ProblemTagPolicy: the datacenter's tag policy refuses our tags, so
	// no VM is made until it changes.
	ProblemTagPolicy = "TagPolicy"
	// ProblemPCIMappingMissing: a PCI mapping of spec.proxmox.pciDevices
	// is not in the cluster (or the API token may not see it), so no VM
	// with its devices can be made.
	ProblemPCIMappingMissing = "PCIMappingMissing"
)

// New builds the Proxmox provider of a NodeProvider; it is the
// provider.Factory for type proxmox.
func New(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
	return NewFactory(Tuning{})(ctx, np, opts)
}

// NewFactory returns a provider.Factory with other timings than the
// defaults, for tests that drive the provider against a fake API.
func NewFactory(t Tuning) provider.Factory {
	return func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		p, err := newProvider(np, opts, t)
		if err != nil {
			return nil, err
		}
		// Asking for the version proves the endpoint, TLS and credentials
		// before the first claim depends on them.
		if err := p.api.do(ctx, func(ctx context.Context) error { _, err := p.api.pve.Version(ctx); return err }); err != nil {
			return nil, p.api.classify(err, "reaching the proxmox API at %s", p.settings.endpoint)
		}
		return p, nil
	}
}

func newProvider(np *v1alpha1.NodeProvider, opts provider.Options, t Tuning) (*Provider, error) {
	if !tagValuePattern.MatchString(opts.ClusterName) {
		return nil, provider.NewTerminal(fmt.Errorf("cluster name %q cannot go into a Proxmox tag: use letters, digits, '_', '-', '+' and '.'", opts.ClusterName))
	}
	s, err := parseSettings(np)
	if err != nil {
		return nil, err
	}
	creds, err := parseCredentials(opts.Credentials)
	if err != nil {
		return nil, err
	}
	if t.TaskPollInterval <= 0 {
		t.TaskPollInterval = DefaultTaskPollInterval
	}
	if t.TaskTimeout <= 0 {
		t.TaskTimeout = DefaultTaskTimeout
	}
	if t.Clock == nil {
		t.Clock = clock.RealClock{}
	}
	if t.StaleLockAfter <= 0 {
		t.StaleLockAfter = t.TaskTimeout
	}
	if t.ShutdownGrace <= 0 {
		t.ShutdownGrace = DefaultShutdownGrace
	}

	var redactions []string
	for _, v := range creds.values() {
		redactions = append(redactions, v, "[redacted]")
	}
	redact := strings.NewReplacer(redactions...)

	httpClient := newHTTPClient(s, creds, t.Clock, redact)
	clientOpts := []pmx.Option{
		pmx.WithHTTPClient(httpClient),
		pmx.WithUserAgent("claimscale"),
		pmx.WithLogger(discardLogger{}),
	}
	principal := "user"
	if creds.tokenID != "" {
		clientOpts = append(clientOpts, pmx.WithAPIToken(creds.tokenID, creds.tokenSecret))
		principal = "token"
	}
	a := &api{pve: pmx.NewClient(s.endpoint, clientOpts...), principal: principal, redact: redact, http: httpClient, endpoint: s.endpoint}
	if creds.tokenID != "" {
		a.token = creds.tokenID + "=" + creds.tokenSecret
	}
	return &Provider{
		settings: s,
		cluster:  opts.ClusterName,
		api:      a,
		tasks:    &tasks{api: a, clock: t.Clock, interval: t.TaskPollInterval, timeout: t.TaskTimeout},
		clock:    t.Clock,
		inflight: map[int]reservation{},
		launched: map[int]string{},
		lockSeen: map[int]time.Time{},
		reported: map[int]bool{},

		staleLocks:  map[int]string{},
		pciProblems: map[string]string{},
		started:     t.Clock.Now(),

		staleLockAfter: t.StaleLockAfter,
		shutdownGrace:  t.ShutdownGrace,
	}, nil
}

// ProviderID returns the providerID of a VM of a cluster.
func ProviderID(cluster string, vmid int) string {
	return ProviderIDPrefix + cluster + "/" + strconv.Itoa(vmid)
}

// vmidOf parses a providerID of this cluster. A providerID of another
// cluster is an error wrapping errOtherCluster.
func (p *Provider) vmidOf(providerID string) (int, error) {
	rest, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	cluster, id, found := strings.Cut(rest, "/")
	vmid, err := strconv.Atoi(id)
	if !ok || !found || err != nil || vmid <= 0 {
		return 0, fmt.Errorf("providerID %q is not of the form %s<cluster>/<vmid>", providerID, ProviderIDPrefix)
	}
	if cluster != p.cluster {
		return 0, fmt.Errorf("providerID %q belongs to cluster %q, not %q: %w", providerID, cluster, p.cluster, errOtherCluster)
	}
	return vmid, nil
}

var errOtherCluster = errors.New("not this cluster's machine")

// sizeOf turns the claim's shape into the VM's: whole cores (rounded up)
// and MiB of memory (rounded up), plus the memory overhead.
func (p *Provider) sizeOf(claim *v1alpha1.NodeClaim) (size, error) {
	cpu, mem := claim.Spec.Shape.CPU, claim.Spec.Shape.Memory
	cores := ceilDiv(cpu.MilliValue(), 1000)
	memMiB := ceilDiv(mem.Value(), mib)
	if cores < 1 || memMiB < 1 {
		return size{}, provider.NewTerminal(fmt.Errorf("NodeClaim %s has shape %s with cpu %s and memory %s; both must be positive", claim.Name, claim.Spec.Shape.Name, cpu.String(), mem.String()))
	}
	devices, err := p.settings.devicesOf(claim.Spec.Shape.ExtendedResources)
	if err != nil {
		return size{}, provider.NewTerminal(fmt.Errorf("NodeClaim %s has shape %s: %w", claim.Name, claim.Spec.Shape.Name, err))
	}
	return size{cores: int(cores), memMiB: memMiB, vmMemMiB: memMiB + p.settings.overheadMiB, devices: devices}, nil
}

// Get returns a VM of this cluster, or NotFound when it is gone or not ours.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	vmid, err := p.vmidOf(providerID)
	if errors.Is(err, errOtherCluster) {
		return nil, provider.NewNotFound("%w", err)
	}
	if err != nil {
		return nil, provider.NewTerminal(err)
	}
	vms, err := p.listVMs(ctx)
	if err != nil {
		return nil, p.api.classify(err, "listing VMs to find VM %d", vmid)
	}
	for _, vm := range vms {
		if vm.VMID != vmid || !vm.isVM() {
			continue
		}
		m, cfg, err := p.ownership(ctx, vm)
		if err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s", vmid, vm.Node)
		}
		if !m.ownedBy(p.cluster) {
			return nil, provider.NewNotFound("VM %d carries no %s marker of cluster %s", vmid, v1alpha1.TagCluster, p.cluster)
		}
		return p.describe(ctx, vm, cfg, m)
	}
	return nil, provider.NewNotFound("no VM %d in the Proxmox cluster", vmid)
}

// List returns the VMs carrying this cluster's marker: in their tags, or,
// for a VM in the VM ID range that has no tags yet (a clone whose Create was
// cut short), in its description, so that garbage collection sees it too.
func (p *Provider) List(ctx context.Context) ([]*provider.Instance, error) {
	vms, err := p.listVMs(ctx)
	if err != nil {
		return nil, p.api.classify(err, "listing VMs")
	}
	var out []*provider.Instance
	for _, vm := range vms {
		if !vm.isVM() {
			continue
		}
		m := markersFromTags(vm.Tags)
		var cfg *vmConfig
		if m.cluster == "" && vm.VMID >= p.settings.lower && vm.VMID <= p.settings.upper {
			if m, cfg, err = p.ownership(ctx, vm); err != nil {
				return nil, p.api.classify(err, "reading VM %d on %s", vm.VMID, vm.Node)
			}
		}
		if !m.ownedBy(p.cluster) {
			continue
		}
		inst, err := p.describe(ctx, vm, cfg, m)
		if err != nil {
			return nil, err
		}
		out = append(out, inst)
	}
	p.sweepISOs(ctx, vms)
	return out, nil
}

// describe turns a VM into an Instance, reading its configuration for the
// size and creation time unless given.
func (p *Provider) describe(ctx context.Context, vm vmResource, cfg *vmConfig, m markers) (*provider.Instance, error) {
	if cfg == nil {
		var err error
		if cfg, err = p.vmConfig(ctx, vm.Node, vm.VMID); err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s", vm.VMID, vm.Node)
		}
	}
	lock := orDefault(cfg.Lock, vm.Lock)
	created := cfg.created()
	if created.IsZero() {
		// A clone locked before its first disk was copied has no meta yet.
		p.mu.Lock()
		p.staleLock(vm.VMID)
		created = p.lockSeen[vm.VMID]
		p.mu.Unlock()
	}
	p.mu.Lock()
	_, making := p.inflight[vm.VMID]
	p.mu.Unlock()
	st := state(vm.Status, lock, making || markersFromTags(vm.Tags).cluster == "")
	inst := p.instance(vm.VMID, vm.Node, size{cores: int(cfg.vcpus()), memMiB: int64(cfg.Memory) - p.settings.overheadMiB}, m, st, created)
	// The devices its configuration passes through, by the resources
	// spec.proxmox.pciDevices names them.
	maps.Copy(inst.Capacity, p.settings.mappedDevices(cfg))
	return inst, nil
}

func (p *Provider) instance(vmid int, node string, sz size, m markers, st provider.InstanceState, created time.Time) *provider.Instance {
	return &provider.Instance{
		ProviderID: ProviderID(p.cluster, vmid),
		Name:       m.claim,
		// The shape's memory, without the overhead the guest keeps to
		// itself: what the node will report.
		Capacity:  withDevices(shapeCapacity(int64(sz.cores), sz.memMiB), sz.devices),
		Labels:    map[string]string{"topology.kubernetes.io/zone": node},
		Tags:      m.asTags(),
		State:     st,
		CreatedAt: created,
	}
}

// state maps a VM's status and lock: a lock while it is made means
// Creating, a destroy in progress Deleting. A stopped VM is asleep
// (Suspended) unless it is still being made: one this provider is making
// (cloned, not yet sized or started), or one that carries our markers only
// in its description (a clone whose Create was cut short before its tags;
// Create sets the tags before it first starts a VM, so a VM that was ever
// started, and so any VM put to sleep, has them). A VM whose status is not
// published yet ("unknown": pvestatd reports every 10 s) counts as
// Stopping, as before.
func state(status, lock string, unfinished bool) provider.InstanceState {
	switch {
	case lock == "clone" || lock == "create":
		return provider.InstanceCreating
	case lock == "destroyed":
		return provider.InstanceDeleting
	case status == "running":
		return provider.InstanceRunning
	case unfinished:
		return provider.InstanceCreating
	case status == "stopped":
		return provider.InstanceSuspended
	default:
		return provider.InstanceStopping
	}
}

// Delete stops a VM of this cluster and destroys it with its disks. A VM
// that is already gone is success; a VM without this cluster's marker is
// refused.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	vmid, err := p.vmidOf(providerID)
	if err != nil {
		return provider.NewTerminal(fmt.Errorf("refusing to delete: %w", err))
	}
	vms, err := p.listVMs(ctx)
	if err != nil {
		return p.api.classify(err, "listing VMs to find VM %d", vmid)
	}
	idx := -1
	for i, vm := range vms {
		if vm.VMID == vmid {
			idx = i
		}
	}
	if idx < 0 {
		return nil
	}
	vm := vms[idx]
	if !vm.isVM() {
		return provider.NewTerminal(fmt.Errorf("refusing to delete guest %d on %s: it is a template or a container, not a claimscale VM", vmid, vm.Node))
	}
	cfg, err := p.vmConfig(ctx, vm.Node, vmid)
	if err != nil {
		if notExists(err) {
			return nil
		}
		return p.api.classify(err, "reading VM %d on %s", vmid, vm.Node)
	}
	m := markersFromTags(vm.Tags)
	if m.cluster == "" {
		m = cfg.markers()
	}
	if !m.ownedBy(p.cluster) {
		return provider.NewTerminal(fmt.Errorf("refusing to delete VM %d on %s: it carries no %s marker of cluster %s", vmid, vm.Node, v1alpha1.TagCluster, p.cluster))
	}
	switch {
	case cfg.Lock == "clone" || cfg.Lock == "create":
		return provider.NewRetryable(fmt.Errorf("VM %d on %s for NodeClaim %s is locked (%s): a clone or create that is running or never finished; if no task is running for it, run `qm unlock %d` on %s and it is removed on the next try", vmid, vm.Node, m.claim, cfg.Lock, vmid, vm.Node), lockedRetryAfter)
	case cfg.Protection != 0:
		return provider.NewTerminal(fmt.Errorf("VM %d on %s for NodeClaim %s has protection set, so Proxmox refuses to destroy it: clear it (qm set %d --protection 0) if the VM is to go", vmid, vm.Node, m.claim, vmid))
	}
	log := logf.FromContext(ctx).WithValues("vmid", vmid, "proxmoxNode", vm.Node)

	handle := p.vm(vm.Node, vmid)
	if vm.Status != "stopped" {
		var task *pmx.Task
		err := p.api.do(ctx, func(ctx context.Context) (err error) { task, err = handle.Stop(ctx); return err })
		if err == nil {
			err = p.tasks.wait(ctx, task)
		}
		switch {
		case err == nil:
			log.V(1).Info("stopped VM")
		case notExists(err):
			return nil
		case !notRunning(err):
			return p.api.classify(err, "stopping VM %d on %s", vmid, vm.Node)
		}
	}

	// The cloud-init ISO goes first: once the VM is gone, nothing would
	// name it any more.
	if err := p.removeUserData(ctx, vm.Node, cfg); err != nil {
		return err
	}
	if err := p.destroy(ctx, vm.Node, vmid); err != nil && !notExists(err) {
		return p.api.classify(err, "destroying VM %d on %s", vmid, vm.Node)
	}
	log.Info("destroyed VM", "nodeclaim", m.claim)
	return nil
}

// destroy removes a stopped VM with its disks. purge drops it from backup
// jobs, replication and HA as well, and destroy-unreferenced-disks removes
// disks the config no longer names.
func (p *Provider) destroy(ctx context.Context, node string, vmid int) error {
	var task *pmx.Task
	path := fmt.Sprintf("/nodes/%s/qemu/%d?purge=1&destroy-unreferenced-disks=1", node, vmid)
	err := p.api.do(ctx, func(ctx context.Context) error {
		var upid pmx.UPID
		if err := p.api.pve.Delete(ctx, path, &upid); err != nil {
			return err
		}
		task = pmx.NewTask(upid, p.api.pve)
		return nil
	})
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	return err
}

// vm returns a go-proxmox handle on a VM without asking the API.
func (p *Provider) vm(node string, vmid int) *pmx.VirtualMachine {
	vm := &pmx.VirtualMachine{}
	vm.New(p.api.pve, node, vmid)
	return vm
}

// notExists says whether an error is Proxmox saying the VM is gone.
func notExists(err error) bool {
	var failed *apiError
	if errors.As(err, &failed) {
		return failed.Code == 404 || strings.Contains(failed.Message, "does not exist")
	}
	var task *taskError
	return errors.As(err, &task) && strings.Contains(task.ExitStatus, "does not exist")
}

// notRunning says whether an error is Proxmox refusing to stop a VM that is
// not running.
func notRunning(err error) bool {
	var failed *apiError
	if errors.As(err, &failed) {
		return strings.Contains(failed.Message, "not running")
	}
	var task *taskError
	return errors.As(err, &task) && strings.Contains(task.ExitStatus, "not running")
}

// idTaken says whether an error is Proxmox refusing a VM ID that exists:
// on the node the call ran on, the clone call says "config file already
// exists" (qemu-server clone_vm) and create "already exists"; on another
// node, the clone task fails when pmxcfs refuses to rename its temporary
// config: "close (rename) atomic file '…/<id>.conf' failed: File exists".
func idTaken(err error) bool {
	taken := func(msg string) bool {
		return strings.Contains(msg, "already exists") || (strings.Contains(msg, "atomic file") && strings.Contains(msg, "File exists"))
	}
	var failed *apiError
	if errors.As(err, &failed) {
		return taken(failed.Message)
	}
	var task *taskError
	return errors.As(err, &task) && taken(task.ExitStatus)
}
