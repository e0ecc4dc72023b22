package proxmox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	pmx "github.com/luthermonson/go-proxmox"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

var _ provider.PowerManager = (*Provider)(nil)

// DefaultShutdownGrace is how much longer than the shutdown timeout the
// provider waits for the shutdown task: Proxmox's worker may first wait up
// to 10 s for the VM's flock and runs the pre-stop hookscript before it
// starts counting.
const DefaultShutdownGrace = 30 * time.Second

// Suspend puts a VM of this cluster to sleep: an ACPI shutdown that Proxmox
// waits spec.proxmox.shutdownTimeout for, then, when the guest did not stop
// in time (or the shutdown failed otherwise), a hard stop. The VM keeps its
// disks, tags, cloud-init ISO and VM ID. A VM already stopped is success.
func (p *Provider) Suspend(ctx context.Context, providerID string) error {
	target, err := p.powerTarget(ctx, providerID, "suspend")
	if err != nil {
		return err
	}
	node, vmid := target.vm.Node, target.vm.VMID
	log := logf.FromContext(ctx).WithValues("vmid", vmid, "proxmoxNode", node, "nodeclaim", target.markers.claim)
	running, err := p.running(ctx, node, vmid)
	if err != nil {
		return p.powerError(err, "reading the status of VM %d on %s", vmid, node)
	}
	if !running {
		return nil
	}

	task, err := p.powerCall(ctx, node, vmid, "shutdown", map[string]any{"timeout": seconds(p.settings.shutdownTimeout)})
	if err != nil {
		return p.powerError(err, "shutting down VM %d on %s", vmid, node)
	}
	err = p.tasks.waitFor(ctx, task, p.settings.shutdownTimeout+p.shutdownGrace)
	if err == nil {
		log.Info("shut down VM to sleep")
		return nil
	}
	if ctx.Err() != nil || vmGone(err) {
		return p.powerError(err, "shutting down VM %d on %s", vmid, node)
	}
	// A shutdown still running past its deadline holds the VM's flock:
	// the stop aborts it first.
	var timedOut *taskTimeoutError
	overrule := errors.As(err, &timedOut)
	log.Info("VM did not shut down cleanly; stopping it", "shutdownTimeout", p.settings.shutdownTimeout, "reason", p.api.scrub(err).Error())
	if err := p.stopVM(ctx, node, vmid, overrule); err != nil {
		return p.powerError(err, "stopping VM %d on %s after its shutdown failed", vmid, node)
	}
	log.Info("stopped VM to sleep")
	return nil
}

// Resume starts a sleeping VM of this cluster where it is. A running VM is
// success. A start that fails because the node cannot give the VM its
// memory, or its PCI devices (another VM started with them while it
// slept), is InsufficientCapacity: the VM's disks are local to the node,
// so it cannot start elsewhere, and the caller replaces it.
func (p *Provider) Resume(ctx context.Context, providerID string) error {
	target, err := p.powerTarget(ctx, providerID, "resume")
	if err != nil {
		return err
	}
	node, vmid := target.vm.Node, target.vm.VMID
	running, err := p.running(ctx, node, vmid)
	if err != nil {
		return p.powerError(err, "reading the status of VM %d on %s", vmid, node)
	}
	if running {
		return nil
	}
	err = p.startTask(ctx, node, vmid)
	why, devicesBusy := devicesUnavailable(err)
	switch {
	case err == nil:
		logf.FromContext(ctx).Info("started sleeping VM", "vmid", vmid, "proxmoxNode", node, "nodeclaim", target.markers.claim)
		return nil
	case devicesBusy:
		return provider.NewInsufficientCapacity(fmt.Errorf("Proxmox node %s cannot give sleeping VM %d (NodeClaim %s) its PCI devices to start (%s); its disks are on that node, so it cannot start elsewhere and is to be replaced",
			node, vmid, target.markers.claim, p.api.redact.Replace(why)))
	case p.outOfMemory(ctx, err):
		return provider.NewInsufficientCapacity(fmt.Errorf("Proxmox node %s cannot give sleeping VM %d (NodeClaim %s) its %d MiB of memory to start (%s); its disks are on that node, so it cannot start elsewhere and is to be replaced",
			node, vmid, target.markers.claim, int64(target.cfg.Memory), p.api.scrub(err)))
	default:
		return p.powerError(err, "starting sleeping VM %d on %s", vmid, node)
	}
}

// powerTarget is a VM the power calls may act on.
type powerTarget struct {
	vm      vmResource
	cfg     *vmConfig
	markers markers
}

// powerTarget finds the VM of a providerID of this cluster: NotFound when
// it is gone, Terminal when it is not ours (another cluster's providerID,
// a guest without our cluster marker, a template or container), Retryable
// while Proxmox is still making it.
func (p *Provider) powerTarget(ctx context.Context, providerID, verb string) (*powerTarget, error) {
	vmid, err := p.vmidOf(providerID)
	if err != nil {
		return nil, provider.NewTerminal(fmt.Errorf("refusing to %s: %w", verb, err))
	}
	vms, err := p.listVMs(ctx)
	if err != nil {
		return nil, p.api.classify(err, "listing VMs to find VM %d", vmid)
	}
	for _, vm := range vms {
		if vm.VMID != vmid {
			continue
		}
		if !vm.isVM() {
			return nil, provider.NewTerminal(fmt.Errorf("refusing to %s guest %d on %s: it is a template or a container, not a claimscale VM", verb, vmid, vm.Node))
		}
		cfg, err := p.vmConfig(ctx, vm.Node, vmid)
		if vmGone(err) {
			return nil, provider.NewNotFound("VM %d is gone", vmid)
		}
		if err != nil {
			return nil, p.api.classify(err, "reading VM %d on %s", vmid, vm.Node)
		}
		m := markersFromTags(vm.Tags)
		if m.cluster == "" {
			m = cfg.markers()
		}
		if !m.ownedBy(p.cluster) {
			return nil, provider.NewTerminal(fmt.Errorf("refusing to %s VM %d on %s: it carries no %s marker of cluster %s", verb, vmid, vm.Node, v1alpha1.TagCluster, p.cluster))
		}
		switch lock := orDefault(cfg.Lock, vm.Lock); lock {
		case "clone", "create":
			return nil, provider.NewRetryable(fmt.Errorf("cannot %s VM %d on %s for NodeClaim %s: Proxmox is still making it (lock %s)", verb, vmid, vm.Node, m.claim, lock), lockedRetryAfter)
		case "destroyed":
			return nil, provider.NewNotFound("VM %d on %s is being destroyed", vmid, vm.Node)
		}
		return &powerTarget{vm: vm, cfg: cfg, markers: m}, nil
	}
	return nil, provider.NewNotFound("no VM %d in the Proxmox cluster", vmid)
}

// running reads whether the VM runs now: /cluster/resources shows what
// pvestatd published up to 10 s ago, status/current what is.
func (p *Provider) running(ctx context.Context, node string, vmid int) (bool, error) {
	var status struct {
		Status string `json:"status"`
	}
	if err := p.api.get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/current", node, vmid), &status); err != nil {
		return false, err
	}
	return status.Status == "running", nil
}

// powerCall posts to a VM's status/<action> and returns its task.
func (p *Provider) powerCall(ctx context.Context, node string, vmid int, action string, params map[string]any) (*pmx.Task, error) {
	var task *pmx.Task
	path := fmt.Sprintf("/nodes/%s/qemu/%d/status/%s", node, vmid, action)
	err := p.api.do(ctx, func(ctx context.Context) error {
		var upid pmx.UPID
		if err := p.api.pve.Post(ctx, path, params, &upid); err != nil {
			return err
		}
		task = pmx.NewTask(upid, p.api.pve)
		return nil
	})
	return task, err
}

// stopVM stops a VM hard and waits for it. With overrule the stop first
// aborts the VM's running shutdown tasks, which would otherwise hold its
// flock; a Proxmox VE older than 8.2 does not know the parameter, and is
// asked again without it.
func (p *Provider) stopVM(ctx context.Context, node string, vmid int, overrule bool) error {
	params := map[string]any{}
	if overrule {
		params["overrule-shutdown"] = 1
	}
	task, err := p.powerCall(ctx, node, vmid, "stop", params)
	var failed *apiError
	if overrule && errors.As(err, &failed) && failed.Code == 400 && strings.Contains(failed.Message, "overrule-shutdown") {
		task, err = p.powerCall(ctx, node, vmid, "stop", map[string]any{})
	}
	if err == nil {
		err = p.tasks.wait(ctx, task)
	}
	return err
}

// powerError classifies a power call's error; a VM gone meanwhile is
// NotFound.
func (p *Provider) powerError(err error, format string, args ...any) error {
	if vmGone(err) {
		return provider.NewNotFound("%s: %w", fmt.Sprintf(format, args...), p.api.scrub(err))
	}
	return p.api.classify(err, format, args...)
}

// vmGone says whether an error is Proxmox saying the VM's configuration
// does not exist (load_config: "Configuration file
// 'nodes/N/qemu-server/ID.conf' does not exist"), unlike notExists, which
// also takes a start failing on a missing volume ("volume '…' does not
// exist") for a VM gone.
func vmGone(err error) bool {
	var failed *apiError
	if errors.As(err, &failed) && failed.Code == 404 {
		return true
	}
	var task *taskError
	msg := ""
	switch {
	case errors.As(err, &failed):
		msg = failed.Message
	case errors.As(err, &task):
		msg = task.ExitStatus
	}
	return strings.Contains(msg, "Configuration file") && strings.Contains(msg, "does not exist")
}

// seconds is a duration in whole seconds, rounded up, at least one:
// Proxmox's timeout parameters are integers.
func seconds(d time.Duration) int {
	return int(math.Max(1, math.Ceil(d.Seconds())))
}
