package proxmox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	pmx "github.com/luthermonson/go-proxmox"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// tagPolicyRecheck is how long a tag policy that refused our tags keeps
// new VMs from being made: after it, one Create tries again (a person may
// have changed the policy), and the VM it makes tells.
const tagPolicyRecheck = 10 * time.Minute

// noteTagRefusal remembers that the datacenter's tag policy refused our
// tags, for Problems and to make no more VMs it would leave untagged.
func (p *Provider) noteTagRefusal(err error) {
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	p.tagRefused, p.tagRefusedAt = err.Error(), p.clock.Now()
}

// tagRefusal is the tag policy's last refusal while it stands, else "",
// and when it came.
func (p *Provider) tagRefusal() (string, time.Time) {
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	if p.tagRefused != "" && p.clock.Since(p.tagRefusedAt) >= tagPolicyRecheck {
		p.tagRefused = ""
	}
	return p.tagRefused, p.tagRefusedAt
}

// tagsAccepted forgets a refusal once tags were written.
func (p *Provider) tagsAccepted() {
	p.tagMu.Lock()
	defer p.tagMu.Unlock()
	p.tagRefused = ""
}

// lockedRetryAfter is how long to wait before looking again at a VM that
// Proxmox is still working on.
const lockedRetryAfter = 10 * time.Second

// launch is the outcome of the first, serialized part of Create: either a
// VM of the claim that exists already, or a new one whose making has begun.
type launch struct {
	// existing is set when the claim's VM exists already.
	existing *claimVM

	vmid int
	node string
	task *pmx.Task
	// template is what the VM is cloned from, nil for netboot.
	template *templateInfo
}

// claimVM is a VM found to carry a claim's markers.
type claimVM struct {
	vm  vmResource
	cfg *vmConfig
}

// templateInfo is the template a clone copies, with what the clone
// inherits from it.
type templateInfo struct {
	vmid int
	node string
	tags string
	// protected templates make protected clones, which cannot be destroyed
	// until the flag is cleared.
	protected bool
}

// Create makes the claim's VM, or adopts it when it exists already (a retry
// or a restart after a crash): a VM whose tags, or whose description, carry
// the claim's markers. /cluster/resources shows names late (pvestatd
// publishes them every 10 s), so a VM is never found by its name. A new VM
// is cloned from the chosen node's template or made blank for netboot, with
// the markers in the call that makes it, then tagged, sized, given its
// cloud-init drive and started.
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	want, err := p.sizeOf(claim)
	if err != nil {
		return nil, err
	}
	m := markers{cluster: p.cluster, pool: claim.Spec.NodePoolRef.Name, claim: claim.Name}
	log := logf.FromContext(ctx).WithValues("nodeclaim", claim.Name)

	taken := map[int]bool{}
	// avoid are the nodes where the claim's VM could not start, with why.
	avoid := map[string]string{}
	for {
		l, err := p.launch(ctx, log, claim, m, want, taken, avoid)
		if err != nil {
			return nil, err
		}
		var inst *provider.Instance
		if l.existing != nil {
			inst, err = p.adopt(ctx, log, l.existing, m, want, opts)
		} else {
			inst, err = p.finish(ctx, log, l, m, want, opts)
			p.release(l.vmid)
		}
		var refused *startRefusedError
		switch {
		case err == nil:
			return inst, nil
		case l.existing == nil && idTaken(err) && len(taken) < maxIDConflicts:
			// Proxmox finds an ID taken on another node only inside the
			// clone task, when pmxcfs refuses the config file.
			log.V(1).Info("VM ID taken on another node, trying the next", "vmid", l.vmid)
			taken[l.vmid] = true
			p.forget(l.vmid)
		case errors.As(err, &refused) && refused.devices:
			log.Info("Proxmox node cannot give the VM its PCI devices; the VM is removed and another node tried", "proxmoxNode", refused.node, "reason", refused.reason)
			avoid[refused.node] = refused.reason
		case errors.As(err, &refused):
			log.Info("Proxmox node lacks the memory to start the VM; the VM is removed and another node tried", "proxmoxNode", refused.node)
			avoid[refused.node] = refused.reason
		default:
			return nil, err
		}
	}
}

// launch looks for the claim's VM and, when there is none, chooses a node
// and a free VM ID and calls Proxmox to make the VM. It holds p.mu so that
// concurrent Creates see each other's choices.
func (p *Provider) launch(ctx context.Context, log logr.Logger, claim *v1alpha1.NodeClaim, m markers, want size, taken map[int]bool, avoid map[string]string) (*launch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	vms, err := p.listVMs(ctx)
	if err != nil {
		return nil, p.api.classify(err, "listing VMs")
	}
	existing, err := p.findClaimVM(ctx, log, claim, vms)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return &launch{existing: existing}, nil
	}

	var nodes pmx.NodeStatuses
	if err := p.api.do(ctx, func(ctx context.Context) (err error) { nodes, err = p.api.pve.Nodes(ctx); return err }); err != nil {
		return nil, p.api.classify(err, "listing Proxmox nodes")
	}
	if refused, at := p.tagRefusal(); refused != "" {
		// Another clone would be one more VM the policy leaves untagged.
		return nil, provider.NewTerminal(fmt.Errorf("not making a VM for NodeClaim %s: the datacenter's tag policy refused our tags %s ago, and a new VM would stay untagged; looking again %s after the refusal: %s", claim.Name, p.clock.Since(at).Round(time.Second), tagPolicyRecheck, refused))
	}
	allowed := p.settings.allows(claim)
	templates := p.templates(vms)
	if p.settings.clone != nil && len(templates) == 0 {
		return nil, provider.NewTerminal(fmt.Errorf("no template of spec.proxmox.clone found in the Proxmox cluster (%s), or the %s lacks VM.Audit on it", p.settings.clone.describe(), p.api.principal))
	}
	usable := func(node string) bool {
		if _, avoided := avoid[node]; !allowed(node) || avoided {
			return false
		}
		if p.settings.clone == nil {
			return true
		}
		_, ok := templates[node]
		return ok || templates[""] != nil
	}
	pl := placement{nodes: nodes, vms: vms, inflight: p.inflight, pool: m.pool, avoid: avoid}
	if len(want.devices) > 0 {
		mappings, err := p.pciMappings(ctx)
		if err != nil {
			return nil, p.api.classify(err, "listing the cluster's PCI mappings")
		}
		if err := p.notePCIMappings(mappings, want.devices); err != nil {
			return nil, provider.NewTerminal(fmt.Errorf("not making a VM for NodeClaim %s: %w", claim.Name, err))
		}
		pl.devices = p.pciAvailability(ctx, nodes, usable, mappings, want.devices)
	}
	node, err := pl.choose(usable, want)
	if err != nil {
		return nil, provider.NewInsufficientCapacity(err)
	}

	var template *templateInfo
	if p.settings.clone != nil {
		t := templates[node]
		if t == nil {
			t = templates[""]
		}
		cfg, err := p.vmConfig(ctx, t.Node, t.VMID)
		if err != nil {
			return nil, p.api.classify(err, "reading template %d on %s", t.VMID, t.Node)
		}
		template = &templateInfo{vmid: t.VMID, node: t.Node, tags: cfg.Tags, protected: cfg.Protection != 0}
	}

	used := map[int]bool{}
	for _, vm := range vms {
		used[vm.VMID] = true
	}
	for vmid := range p.inflight {
		used[vmid] = true
	}
	for vmid := p.settings.lower; vmid <= p.settings.upper; vmid++ {
		if used[vmid] || taken[vmid] {
			continue
		}
		// Noted before the call: when its answer is lost, the VM it made
		// is still known to be this claim's.
		p.launched[vmid] = claim.Name
		var task *pmx.Task
		if template != nil {
			task, err = p.cloneCall(ctx, template, vmid, node, m)
		} else {
			task, err = p.createCall(ctx, vmid, node, m, want)
		}
		var refused *apiError
		if errors.As(err, &refused) {
			// Proxmox answered: nothing was made.
			delete(p.launched, vmid)
		}
		if err != nil && idTaken(err) && len(taken) < maxIDConflicts {
			// Taken between our listing and the call, by someone else.
			taken[vmid] = true
			continue
		}
		if err != nil {
			what := "creating"
			if template != nil {
				what = fmt.Sprintf("cloning template %d to", template.vmid)
			}
			return nil, p.classifyTags(err, "%s VM %d on %s for NodeClaim %s", what, vmid, node, claim.Name)
		}
		r := reservation{node: node, pool: m.pool, cores: want.cores, memMiB: want.vmMemMiB}
		for _, d := range want.devices {
			if r.devices == nil {
				r.devices = map[string]int{}
			}
			r.devices[d.mapping] += d.count
		}
		p.inflight[vmid] = r
		return &launch{vmid: vmid, node: node, task: task, template: template}, nil
	}
	if len(taken) >= maxIDConflicts {
		return nil, provider.NewRetryable(fmt.Errorf("%d VM IDs in %d-%d were taken by someone else while NodeClaim %s's VM was made", len(taken), p.settings.lower, p.settings.upper, claim.Name), 0)
	}
	return nil, provider.NewInsufficientCapacity(fmt.Errorf("no free VM ID left in spec.proxmox.vmIDRange %d-%d", p.settings.lower, p.settings.upper))
}

// findClaimVM returns the claim's VM: one whose tags (which
// /cluster/resources reads fresh from the config) carry the claim's
// markers, or, for a VM of the ID range without tags, whose configuration
// does (tags, else the description the clone call wrote).
//
// A VM of the range that Proxmox is still making shows no markers until its
// first disk is copied (qemu-server's clone writes a bare "lock: clone"
// config first), so it may be this claim's. It is waited for only while it
// can be: when this provider began it for this claim, or when the claim is
// older than this provider (a clone begun before a restart, or by a call
// whose answer was lost), and never past the stale-lock deadline. A claim
// made since this provider started has no VM this provider did not begin,
// so a clone of someone else's, or a leftover of a node that crashed
// mid-clone, holds up no new claim. A lock older than the deadline is a
// leftover: it is reported (Problems) and stepped over. Callers hold p.mu.
func (p *Provider) findClaimVM(ctx context.Context, log logr.Logger, claim *v1alpha1.NodeClaim, vms []vmResource) (*claimVM, error) {
	var (
		found   *claimVM
		blocker *vmResource
		locked  = map[int]bool{}
	)
	olderThanUs := claim.CreationTimestamp.IsZero() || claim.CreationTimestamp.Time.Before(p.started)
	for i := range vms {
		vm := vms[i]
		if vm.Type != "qemu" {
			continue
		}
		if vm.Lock == "clone" || vm.Lock == "create" {
			locked[vm.VMID] = true
		}
		if m := markersFromTags(vm.Tags); m.cluster != "" {
			if m.ownedBy(p.cluster) && m.claim == claim.Name && (found == nil || vm.VMID < found.vm.VMID) {
				found = &claimVM{vm: vm}
			}
			continue
		}
		if !p.inRange(vm.VMID) {
			continue
		}
		cfg, err := p.vmConfig(ctx, vm.Node, vm.VMID)
		if notExists(err) {
			continue // gone since the listing: a failed clone cleans up
		}
		if err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s", vm.VMID, vm.Node)
		}
		lock := orDefault(cfg.Lock, vm.Lock)
		if lock == "clone" || lock == "create" {
			locked[vm.VMID] = true
		}
		if m := cfg.markers(); m.cluster != "" {
			if m.ownedBy(p.cluster) && m.claim == claim.Name && (found == nil || vm.VMID < found.vm.VMID) {
				found = &claimVM{vm: vm, cfg: cfg}
			}
			continue
		}
		if !locked[vm.VMID] {
			continue
		}
		owner, ours := p.launched[vm.VMID]
		if p.staleLock(vm.VMID) {
			p.reportStale(log, vm.VMID, vm.Node, lock)
			continue
		}
		if ours && owner != claim.Name || !ours && !olderThanUs {
			continue
		}
		if blocker == nil {
			blocker = &vms[i]
		}
	}
	p.forgetLocks(locked)
	for vmid := range p.launched {
		if _, making := p.inflight[vmid]; !making && !locked[vmid] {
			delete(p.launched, vmid)
		}
	}
	if found != nil || blocker == nil {
		return found, nil
	}
	wait := p.staleLockAfter - p.clock.Since(p.lockSeen[blocker.VMID])
	return nil, provider.NewInProgress(fmt.Errorf("VM %d on %s is being made (lock %s) and does not show whose it is yet; waiting for it (at most %s more) so that NodeClaim %s does not get a second VM", blocker.VMID, blocker.Node, orDefault(blocker.Lock, "clone"), wait.Round(time.Second), claim.Name), lockedRetryAfter)
}

// reportStale logs a stale locked VM once and keeps it among the
// provider's problems while it stays locked. Callers hold p.mu.
func (p *Provider) reportStale(log logr.Logger, vmid int, node, lock string) {
	if p.reported[vmid] {
		return
	}
	p.reported[vmid] = true
	p.staleLocks[vmid] = fmt.Sprintf("VM %d on %s has held the Proxmox lock %q for longer than %s without saying whose it is: a clone or create that never finished (its node crashed mid-task?); it is stepped over, and takes its VM ID until someone runs `qm unlock %d` and `qm destroy %d` on %s", vmid, node, orDefault(lock, "clone"), p.staleLockAfter, vmid, vmid, node)
	log.Info("ignoring a stale locked VM in the VM ID range: it shows no owner and has been locked for longer than the stale-lock deadline; if nobody is making it, run `qm unlock` and `qm destroy` on its node",
		"vmid", vmid, "proxmoxNode", node, "lock", lock, "deadline", p.staleLockAfter)
}

// staleLock notes when a locked VM was first seen and says whether that is
// longer ago than the stale-lock deadline. Callers hold p.mu.
func (p *Provider) staleLock(vmid int) bool {
	first, ok := p.lockSeen[vmid]
	if !ok {
		first = p.clock.Now()
		p.lockSeen[vmid] = first
	}
	return p.clock.Since(first) >= p.staleLockAfter
}

// forgetLocks drops what is remembered of VMs no longer locked (or gone).
// Callers hold p.mu.
func (p *Provider) forgetLocks(locked map[int]bool) {
	for vmid := range p.lockSeen {
		if !locked[vmid] {
			delete(p.lockSeen, vmid)
			delete(p.reported, vmid)
			delete(p.staleLocks, vmid)
		}
	}
}

func (p *Provider) inRange(vmid int) bool {
	return vmid >= p.settings.lower && vmid <= p.settings.upper
}

// templates returns the templates by Proxmox node: from nodeTemplates, by
// name on each node, and the one of templateID under "" for every other
// node.
func (p *Provider) templates(vms []vmResource) map[string]*vmResource {
	c := p.settings.clone
	if c == nil {
		return nil
	}
	out := map[string]*vmResource{}
	for i := range vms {
		vm := &vms[i]
		if vm.Type != "qemu" {
			continue
		}
		// The template flag and the name come from pvestatd and lag; a
		// template named by ID is taken without its flag.
		switch {
		case c.templateID != 0 && vm.VMID == c.templateID:
			out[""] = vm
		case c.templateName != "" && vm.Template != 0 && vm.Name == c.templateName:
			if prev := out[vm.Node]; prev == nil || vm.VMID < prev.VMID {
				out[vm.Node] = vm
			}
		}
		for node, id := range c.nodeTemplates {
			if vm.VMID == id && vm.Node == node {
				out[node] = vm
			}
		}
	}
	return out
}

// forget drops a VM ID noted for a claim.
func (p *Provider) forget(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.launched, vmid)
}

func (p *Provider) release(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inflight, vmid)
}

// cloneCall starts cloning the template. The clone call takes no tags, so
// the markers (and the creation time, since a clone inherits its template's
// meta ctime) go into the description; the tags follow right after.
func (p *Provider) cloneCall(ctx context.Context, template *templateInfo, vmid int, node string, m markers) (*pmx.Task, error) {
	opts := &pmx.VirtualMachineCloneOptions{
		NewID:       vmid,
		Name:        m.claim,
		Description: m.description(p.clock.Now()),
		Pool:        p.settings.pool,
	}
	if p.settings.clone.full {
		opts.Full = 1
		// A linked clone stays on its template's storage.
		opts.Storage = p.settings.storage
	}
	if node != template.node {
		opts.Target = node
	}
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		_, task, err = p.vm(template.node, template.vmid).Clone(ctx, opts)
		return err
	})
	return task, err
}

// createCall starts making a blank VM that boots from the network, with the
// markers in its tags and description.
func (p *Provider) createCall(ctx context.Context, vmid int, node string, m markers, want size) (*pmx.Task, error) {
	nb := p.settings.netboot
	opts := []pmx.VirtualMachineOption{
		{Name: "name", Value: m.claim},
		{Name: "tags", Value: mergeTags("", m)},
		{Name: "description", Value: m.description(p.clock.Now())},
		{Name: "ostype", Value: nb.osType},
		{Name: "boot", Value: nb.boot},
		{Name: "scsihw", Value: "virtio-scsi-single"},
		{Name: "scsi0", Value: nb.disk},
	}
	if p.settings.pool != "" {
		opts = append(opts, pmx.VirtualMachineOption{Name: "pool", Value: p.settings.pool})
	}
	opts = append(opts, p.vmOptions(want, vmid, m.claim)...)
	handle := &pmx.Node{}
	handle = handle.New(p.api.pve, node)
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		task, err = handle.NewVirtualMachine(ctx, vmid, opts...)
		return err
	})
	return task, err
}

// vmOptions are the options that size, connect and identify a VM, extra
// options last so that they win.
func (p *Provider) vmOptions(want size, vmid int, name string) []pmx.VirtualMachineOption {
	opts := []pmx.VirtualMachineOption{
		{Name: "cores", Value: want.cores},
		{Name: "sockets", Value: 1},
		{Name: "memory", Value: want.vmMemMiB},
		{Name: "smbios1", Value: smbios1(name, ProviderID(p.cluster, vmid))},
	}
	for i, nic := range p.settings.nics {
		opts = append(opts, pmx.VirtualMachineOption{Name: "net" + strconv.Itoa(i), Value: nic})
	}
	opts = append(opts, hostpciOptions(want.devices)...)
	if p.settings.cicustom != "" {
		opts = append(opts, pmx.VirtualMachineOption{Name: "cicustom", Value: p.settings.cicustom})
	}
	for _, o := range p.settings.extra {
		opts = append(opts, pmx.VirtualMachineOption{Name: o.Name, Value: o.Value})
	}
	return opts
}

// finish waits for the VM to be made, then (for a clone) tags and sizes it,
// gives it its cloud-init drive and starts it.
func (p *Provider) finish(ctx context.Context, log logr.Logger, l *launch, m markers, want size, opts provider.CreateOptions) (*provider.Instance, error) {
	log = log.WithValues("vmid", l.vmid, "proxmoxNode", l.node)
	if err := p.tasks.wait(ctx, l.task); err != nil {
		if l.template != nil {
			return nil, p.api.classify(err, "cloning template %d to VM %d on %s", l.template.vmid, l.vmid, l.node)
		}
		return nil, p.classifyTags(err, "creating VM %d on %s", l.vmid, l.node)
	}
	if l.template != nil {
		log.Info("cloned VM", "template", l.template.vmid)
		if err := p.setTags(ctx, l.node, l.vmid, mergeTags(l.template.tags, m)); err != nil {
			return nil, err
		}
		if err := p.configure(ctx, l.node, l.vmid, m.claim, want, l.template.protected); err != nil {
			return nil, err
		}
	} else {
		log.Info("created VM for netboot")
	}
	if err := p.attachUserData(ctx, l.node, l.vmid, m, nil, opts.UserData); err != nil {
		return nil, err
	}
	if err := p.start(ctx, l.node, l.vmid); err != nil {
		return nil, err
	}
	log.Info("started VM")
	return p.instance(l.vmid, l.node, want, m, provider.InstanceRunning, p.clock.Now()), nil
}

// adopt finishes a VM a previous Create began: it sets the tags if they are
// missing, sizes it if it is not sized yet, gives it its cloud-init drive
// and starts it if it is not running. A VM Proxmox still holds a lock on is
// waited for, unless the lock is stale, which is reported.
func (p *Provider) adopt(ctx context.Context, log logr.Logger, found *claimVM, m markers, want size, opts provider.CreateOptions) (*provider.Instance, error) {
	vm := found.vm
	log = log.WithValues("vmid", vm.VMID, "proxmoxNode", vm.Node)
	cfg := found.cfg
	if cfg == nil {
		var err error
		if cfg, err = p.vmConfig(ctx, vm.Node, vm.VMID); err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s", vm.VMID, vm.Node)
		}
	}
	if lock := orDefault(cfg.Lock, vm.Lock); lock != "" {
		p.mu.Lock()
		_, ours := p.launched[vm.VMID]
		stale := !ours && (lock == "clone" || lock == "create") && p.staleLock(vm.VMID)
		var err error
		if stale {
			err = fmt.Errorf("VM %d on %s for NodeClaim %s has held the Proxmox lock %q for longer than %s: a %s that never finished (its node crashed mid-task?); run `qm unlock %d` on %s so that it can be finished or removed", vm.VMID, vm.Node, m.claim, lock, p.staleLockAfter, lock, vm.VMID, vm.Node)
			p.staleLocks[vm.VMID] = err.Error()
		}
		p.mu.Unlock()
		if stale {
			return nil, provider.NewRetryable(err, lockedRetryAfter)
		}
		return nil, provider.NewInProgress(fmt.Errorf("VM %d on %s for NodeClaim %s is locked (%s): Proxmox is still working on it", vm.VMID, vm.Node, m.claim, lock), lockedRetryAfter)
	}
	log.V(1).Info("adopting the claim's existing VM")
	if !hasAllTags(cfg.Tags, m) {
		if err := p.setTags(ctx, vm.Node, vm.VMID, mergeTags(cfg.Tags, m)); err != nil {
			return nil, err
		}
	}
	// The status in /cluster/resources may be old; starting a running VM
	// answers "already running", which is fine.
	if vm.Status != "running" {
		// A VM that already has the wanted size was sized (or made with
		// it); sizing it again could allocate extra disks named in
		// extraOptions a second time.
		if cfg.vcpus() != int64(want.cores) || int64(cfg.Memory) != want.vmMemMiB || !p.settings.hasDevices(cfg, want.devices) {
			if err := p.configure(ctx, vm.Node, vm.VMID, m.claim, want, cfg.Protection != 0); err != nil {
				return nil, err
			}
		}
		if err := p.attachUserData(ctx, vm.Node, vm.VMID, m, cfg, opts.UserData); err != nil {
			return nil, err
		}
		if err := p.start(ctx, vm.Node, vm.VMID); err != nil {
			return nil, err
		}
		log.Info("started adopted VM")
	}
	return p.instance(vm.VMID, vm.Node, want, m, provider.InstanceRunning, cfg.created()), nil
}

// setTags writes the tags with a synchronous PUT: nothing else needs to
// wait for it.
func (p *Provider) setTags(ctx context.Context, node string, vmid int, tags string) error {
	path := fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid)
	err := p.api.do(ctx, func(ctx context.Context) error {
		return p.api.pve.Put(ctx, path, map[string]string{"tags": tags}, nil)
	})
	if err != nil {
		return p.classifyTags(err, "tagging VM %d on %s", vmid, node)
	}
	p.tagsAccepted()
	return nil
}

var tagRefused = regexp.MustCompile(`Sys\.Modify for modifying tag '([^']*)'`)

// classifyTags is classify with a clear message for tags the datacenter's
// tag policy refuses and for a missing resource pool: retrying cannot help
// until the policy or the pool changes.
func (p *Provider) classifyTags(err error, format string, args ...any) error {
	var failed *apiError
	if errors.As(err, &failed) && failed.Code == 403 {
		if m := tagRefused.FindStringSubmatch(failed.Message); m != nil {
			err := provider.NewTerminal(fmt.Errorf("%s: the Proxmox datacenter's tag policy refuses tag %q to the %s: allow the claimscale-cluster., claimscale-pool. and claimscale-claim. tags (Datacenter > Options > User Tag Access: user-allow free, or list them), or grant Sys.Modify on /; a VM already made keeps its ownership in its description and is removed with its claim",
				fmt.Sprintf(format, args...), m[1], p.api.principal))
			p.noteTagRefusal(err)
			return err
		}
	}
	if errors.As(err, &failed) && strings.Contains(failed.Message, "pool '") && strings.Contains(failed.Message, "does not exist") {
		return provider.NewTerminal(fmt.Errorf("%s: spec.proxmox.pool %q is not a resource pool of the Proxmox cluster (create it under Datacenter > Permissions > Pools): %s", fmt.Sprintf(format, args...), p.settings.pool, failed.Message))
	}
	return p.api.classify(err, format, args...)
}

// configure sizes, connects and identifies a cloned VM. A clone of a
// protected template is protected too, which would keep it from being
// destroyed; the flag is cleared.
func (p *Provider) configure(ctx context.Context, node string, vmid int, name string, want size, protected bool) error {
	opts := p.vmOptions(want, vmid, name)
	if protected {
		opts = append(opts, pmx.VirtualMachineOption{Name: "protection", Value: 0})
	}
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		task, err = p.vm(node, vmid).Config(ctx, opts...)
		return err
	})
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	if err != nil {
		return p.api.classify(err, "configuring VM %d on %s", vmid, node)
	}
	return nil
}

// startRefusedError says a VM could not start because its node lacked the
// memory or could not give it its PCI devices; the VM has been removed so
// that another node can be tried.
type startRefusedError struct {
	node string
	vmid int
	// reason says what the node lacked; devices that it was PCI devices.
	reason  string
	devices bool
}

func (e *startRefusedError) Error() string {
	return fmt.Sprintf("Proxmox node %s could not start VM %d: %s", e.node, e.vmid, e.reason)
}

func (p *Provider) start(ctx context.Context, node string, vmid int) error {
	err := p.startTask(ctx, node, vmid)
	if err == nil {
		return nil
	}
	refused := &startRefusedError{node: node, vmid: vmid}
	switch why, busy := devicesUnavailable(err); {
	case busy:
		refused.reason, refused.devices = p.api.redact.Replace(why), true
	case p.outOfMemory(ctx, err):
		refused.reason = "lack of memory"
	default:
		return p.api.classify(err, "starting VM %d on %s", vmid, node)
	}
	// The VM is ours and stopped; it goes, with its cloud-init ISO, so
	// that the claim's next VM can be made on another node.
	if derr := p.discard(ctx, node, vmid, refused.reason); derr != nil {
		return derr
	}
	return refused
}

// startTask starts a VM and waits for the start task. A VM that is
// running already is success: qemu-server's start worker fails with "VM N
// already running" (and the fake of old answered so synchronously).
func (p *Provider) startTask(ctx context.Context, node string, vmid int) error {
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		task, err = p.vm(node, vmid).Start(ctx)
		return err
	})
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	if alreadyRunning(err) {
		return nil
	}
	return err
}

// discard removes a stopped VM of ours that could not start, and its
// cloud-init ISO.
func (p *Provider) discard(ctx context.Context, node string, vmid int, why string) error {
	cfg, err := p.vmConfig(ctx, node, vmid)
	if err == nil {
		err = p.removeUserData(ctx, node, cfg)
	}
	if err == nil {
		err = p.destroy(ctx, node, vmid)
	}
	if err != nil && !notExists(err) {
		return p.api.classify(err, "removing VM %d on %s, which could not start (%s)", vmid, node, why)
	}
	return nil
}

// outOfMemory says whether a failed start failed because the node could
// not give the guest its memory: QEMU could not allocate it (the task's
// exit status only says that QEMU exited, its log says why), or the
// hugepages a VM with hugepages set needs could not be reserved
// (qemu-server QemuServer/Memory.pm hugepages_allocate dies "hugepage
// allocation failed", which is the exit status).
func (p *Provider) outOfMemory(ctx context.Context, err error) bool {
	var task *taskError
	if !errors.As(err, &task) {
		return false
	}
	if strings.Contains(task.ExitStatus, "hugepage allocation failed") {
		return true
	}
	if !strings.Contains(task.ExitStatus, "QEMU exited") {
		return false
	}
	var lines []struct {
		T string `json:"t"`
	}
	path := fmt.Sprintf("/nodes/%s/tasks/%s/log?limit=200", task.Node, url.PathEscape(task.UPID))
	if p.api.get(ctx, path, &lines) != nil {
		return false
	}
	for _, l := range lines {
		if strings.Contains(l.T, "Cannot allocate memory") || strings.Contains(l.T, "cannot set up guest memory") {
			return true
		}
	}
	return false
}

// smbios1 tells the guest its name and providerID through SMBIOS: a
// netbooted OS, which gets no name from cloud-init, reads them from
// /sys/class/dmi/id/product_serial and product_sku (for its hostname and the
// kubelet's --provider-id). The UUID is new, as Proxmox gives every VM.
func smbios1(name, providerID string) string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = (u[6] & 0x0f) | 0x40 // version 4
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("uuid=%s,serial=%s,sku=%s,base64=1", uuid, b64([]byte(name)), b64([]byte(providerID)))
}

func alreadyRunning(err error) bool {
	var failed *apiError
	if errors.As(err, &failed) {
		return strings.Contains(failed.Message, "already running")
	}
	var task *taskError
	return errors.As(err, &task) && strings.Contains(task.ExitStatus, "already running")
}
