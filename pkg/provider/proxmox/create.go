package proxmox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	pmx "github.com/luthermonson/go-proxmox"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// lockedRetryAfter is how long to wait before looking again at a VM that
// Proxmox is still working on.
const lockedRetryAfter = 10 * time.Second

// launch is the outcome of the first, serialized part of Create: either a
// VM of the claim that exists already, or a new one whose making has begun.
type launch struct {
	// existing is set when the claim's VM exists already.
	existing    *vmResource
	existingCfg *vmConfig

	vmid int
	node string
	task *pmx.Task
	// templateTags are the tags a clone inherits.
	templateTags string
}

// Create makes the claim's VM, or adopts it when it exists already (a retry
// or a restart after a crash): a VM named after the claim that carries our
// markers. A new VM is cloned from the template or made blank for netboot,
// with the markers in the call that makes it, then sized and started.
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	want, err := p.sizeOf(claim)
	if err != nil {
		return nil, err
	}
	m := markers{cluster: p.cluster, pool: claim.Spec.NodePoolRef.Name, claim: claim.Name}
	log := logf.FromContext(ctx).WithValues("nodeclaim", claim.Name)

	taken := map[int]bool{}
	for {
		l, err := p.launch(ctx, claim, m, want, taken)
		if err != nil {
			return nil, err
		}
		if l.existing != nil {
			return p.adopt(ctx, log, *l.existing, l.existingCfg, m, want)
		}
		inst, err := p.finish(ctx, log, l, m, want)
		p.release(l.vmid)
		// Proxmox may find the ID taken only inside the task, when another
		// client made that VM after it checked; the next ID is tried then.
		if err != nil && idTaken(err) && len(taken) < maxIDConflicts {
			log.V(1).Info("VM ID taken while the VM was made, trying the next", "vmid", l.vmid)
			taken[l.vmid] = true
			continue
		}
		if err != nil {
			return nil, err
		}
		return inst, nil
	}
}

// launch looks for the claim's VM and, when there is none, chooses a node
// and a free VM ID and calls Proxmox to make the VM. It holds p.mu so that
// concurrent Creates see each other's choices.
func (p *Provider) launch(ctx context.Context, claim *v1alpha1.NodeClaim, m markers, want size, taken map[int]bool) (*launch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	vms, err := p.listVMs(ctx)
	if err != nil {
		return nil, p.api.classify(err, "listing VMs")
	}
	if err := p.waitForNamelessVMs(vms, claim.Name); err != nil {
		return nil, err
	}
	for _, vm := range vms {
		if !vm.isVM() || vm.Name != claim.Name {
			continue
		}
		found, cfg, err := p.ownership(ctx, vm)
		if err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s, named like NodeClaim %s", vm.VMID, vm.Node, claim.Name)
		}
		if found.ownedBy(p.cluster) && found.claim == claim.Name {
			return &launch{existing: &vm, existingCfg: cfg}, nil
		}
	}

	var nodes pmx.NodeStatuses
	if err := p.api.do(ctx, func(ctx context.Context) (err error) { nodes, err = p.api.pve.Nodes(ctx); return err }); err != nil {
		return nil, p.api.classify(err, "listing Proxmox nodes")
	}
	node, err := placement{nodes: nodes, vms: vms, inflight: p.inflight}.choose(p.settings.allows(claim), want)
	if err != nil {
		return nil, provider.NewInsufficientCapacity(err)
	}

	var template *vmResource
	if p.settings.clone != nil {
		for i := range vms {
			if vms[i].VMID == p.settings.clone.templateID && vms[i].Type == "qemu" {
				template = &vms[i]
			}
		}
		if template == nil {
			return nil, provider.NewTerminal(fmt.Errorf("template VM %d not found in the Proxmox cluster (or the %s lacks VM.Audit on it)", p.settings.clone.templateID, p.api.principal))
		}
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
		var task *pmx.Task
		if template != nil {
			task, err = p.cloneCall(ctx, *template, vmid, node, m)
		} else {
			task, err = p.createCall(ctx, vmid, node, m, want)
		}
		if err != nil && idTaken(err) && len(taken) < maxIDConflicts {
			// Taken between our listing and the call, by someone else.
			taken[vmid] = true
			continue
		}
		if err != nil {
			what := "creating"
			if template != nil {
				what = fmt.Sprintf("cloning template %d to", template.VMID)
			}
			return nil, p.api.classify(err, "%s VM %d on %s for NodeClaim %s", what, vmid, node, claim.Name)
		}
		p.inflight[vmid] = reservation{node: node, cores: want.cores, memMiB: want.vmMemMiB}
		p.launched[vmid] = claim.Name
		l := &launch{vmid: vmid, node: node, task: task}
		if template != nil {
			l.templateTags = template.Tags
		}
		return l, nil
	}
	if len(taken) >= maxIDConflicts {
		return nil, provider.NewRetryable(fmt.Errorf("%d VM IDs in %d-%d were taken by someone else while NodeClaim %s's VM was made", len(taken), p.settings.lower, p.settings.upper, claim.Name), 0)
	}
	return nil, provider.NewInsufficientCapacity(fmt.Errorf("no free VM ID left in spec.proxmox.vmIDRange %d-%d", p.settings.lower, p.settings.upper))
}

// waitForNamelessVMs refuses to go on while a VM in the range is being
// made and does not show its name yet, unless this provider began it for
// another claim: it may be this claim's VM, begun before a restart or by a
// call that gave up waiting, and a second one must not be made. It also
// forgets the VMs that show their names by now. Callers hold p.mu.
func (p *Provider) waitForNamelessVMs(vms []vmResource, claim string) error {
	seen := map[int]bool{}
	for _, vm := range vms {
		seen[vm.VMID] = true
		nameless := vm.Name == "" || vm.Name == "VM "+strconv.Itoa(vm.VMID)
		if !nameless {
			delete(p.launched, vm.VMID)
		}
		if vm.Type != "qemu" || !nameless || (vm.Lock != "clone" && vm.Lock != "create") || vm.VMID < p.settings.lower || vm.VMID > p.settings.upper {
			continue
		}
		if owner, ok := p.launched[vm.VMID]; ok && owner != claim {
			continue
		}
		return provider.NewRetryable(fmt.Errorf("VM %d on %s is being made (lock %s) and does not show whose it is yet; waiting for it so that NodeClaim %s does not get a second VM", vm.VMID, vm.Node, vm.Lock, claim), lockedRetryAfter)
	}
	for vmid := range p.launched {
		if !seen[vmid] {
			delete(p.launched, vmid)
		}
	}
	return nil
}

func (p *Provider) release(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inflight, vmid)
}

// cloneCall starts cloning the template. The clone call takes no tags, so
// the markers go into the description; the tags follow right after.
func (p *Provider) cloneCall(ctx context.Context, template vmResource, vmid int, node string, m markers) (*pmx.Task, error) {
	opts := &pmx.VirtualMachineCloneOptions{
		NewID:       vmid,
		Name:        m.claim,
		Description: m.description(),
	}
	if p.settings.clone.full {
		opts.Full = 1
		// A linked clone stays on its template's storage.
		opts.Storage = p.settings.storage
	}
	if node != template.Node {
		opts.Target = node
	}
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		_, task, err = p.vm(template.Node, template.VMID).Clone(ctx, opts)
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
		{Name: "description", Value: m.description()},
		{Name: "ostype", Value: nb.osType},
		{Name: "boot", Value: nb.boot},
		{Name: "scsihw", Value: "virtio-scsi-single"},
		{Name: "scsi0", Value: nb.disk},
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
	if p.settings.cicustom != "" {
		opts = append(opts, pmx.VirtualMachineOption{Name: "cicustom", Value: p.settings.cicustom})
	}
	for _, o := range p.settings.extra {
		opts = append(opts, pmx.VirtualMachineOption{Name: o.Name, Value: o.Value})
	}
	return opts
}

// finish waits for the VM to be made, then (for a clone) tags and sizes it,
// and starts it.
func (p *Provider) finish(ctx context.Context, log logr.Logger, l *launch, m markers, want size) (*provider.Instance, error) {
	log = log.WithValues("vmid", l.vmid, "proxmoxNode", l.node)
	if err := p.tasks.wait(ctx, l.task); err != nil {
		if p.settings.clone != nil {
			return nil, p.api.classify(err, "cloning template %d to VM %d on %s", p.settings.clone.templateID, l.vmid, l.node)
		}
		return nil, p.api.classify(err, "creating VM %d on %s", l.vmid, l.node)
	}
	if p.settings.clone != nil {
		log.Info("cloned VM", "template", p.settings.clone.templateID)
		if err := p.setTags(ctx, l.node, l.vmid, mergeTags(l.templateTags, m)); err != nil {
			return nil, err
		}
		if err := p.configure(ctx, l.node, l.vmid, m.claim, want); err != nil {
			return nil, err
		}
	} else {
		log.Info("created VM for netboot")
	}
	if err := p.start(ctx, l.node, l.vmid); err != nil {
		return nil, err
	}
	log.Info("started VM")
	return p.instance(l.vmid, l.node, want, m, provider.InstanceRunning, p.clock.Now()), nil
}

// adopt finishes a VM a previous Create began: it sets the tags if they are
// missing, sizes it if it is not sized yet, and starts it if it is not
// running. A VM Proxmox still holds a lock on is waited for.
func (p *Provider) adopt(ctx context.Context, log logr.Logger, vm vmResource, cfg *vmConfig, m markers, want size) (*provider.Instance, error) {
	log = log.WithValues("vmid", vm.VMID, "proxmoxNode", vm.Node)
	if cfg == nil {
		var err error
		if cfg, err = p.vmConfig(ctx, vm.Node, vm.VMID); err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s", vm.VMID, vm.Node)
		}
	}
	if lock := orDefault(cfg.Lock, vm.Lock); lock != "" {
		return nil, provider.NewRetryable(fmt.Errorf("VM %d on %s for NodeClaim %s is locked (%s): Proxmox is still working on it", vm.VMID, vm.Node, m.claim, lock), lockedRetryAfter)
	}
	log.V(1).Info("adopting the claim's existing VM")
	if !hasAllTags(cfg.Tags, m) {
		if err := p.setTags(ctx, vm.Node, vm.VMID, mergeTags(cfg.Tags, m)); err != nil {
			return nil, err
		}
	}
	if vm.Status != "running" {
		// A VM that already has the wanted size was sized (or made with
		// it); sizing it again could allocate extra disks named in
		// extraOptions a second time.
		if cfg.vcpus() != int64(want.cores) || int64(cfg.Memory) != want.vmMemMiB {
			if err := p.configure(ctx, vm.Node, vm.VMID, m.claim, want); err != nil {
				return nil, err
			}
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
		return p.api.classify(err, "tagging VM %d on %s", vmid, node)
	}
	return nil
}

// configure sizes, connects and identifies a cloned VM.
func (p *Provider) configure(ctx context.Context, node string, vmid int, name string, want size) error {
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		task, err = p.vm(node, vmid).Config(ctx, p.vmOptions(want, vmid, name)...)
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

func (p *Provider) start(ctx context.Context, node string, vmid int) error {
	var task *pmx.Task
	err := p.api.do(ctx, func(ctx context.Context) (err error) {
		task, err = p.vm(node, vmid).Start(ctx)
		return err
	})
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	if err != nil && !alreadyRunning(err) {
		return p.api.classify(err, "starting VM %d on %s", vmid, node)
	}
	return nil
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
