package proxmox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	pmx "github.com/luthermonson/go-proxmox"
	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// size is what a claim's VM gets.
type size struct {
	cores int
	// memMiB is the shape's memory; the VM gets vmMemMiB, with the overhead.
	memMiB   int64
	vmMemMiB int64
	// devices are the PCI devices passed through to it.
	devices []deviceWant
}

// reservation is a VM being made by this provider, counted against its
// node until Create returns: until then Proxmox may not yet show its final
// size.
type reservation struct {
	node   string
	pool   string
	cores  int
	memMiB int64
	// devices counts the PCI devices it gets, by mapping.
	devices map[string]int
}

// placement chooses the Proxmox node for a VM.
type placement struct {
	nodes    pmx.NodeStatuses
	vms      []vmResource
	inflight map[int]reservation
	// pool is the NodePool whose VMs are spread over the nodes.
	pool string
	// avoid are nodes where a VM of this claim could not start, with why
	// (no memory, or its PCI devices busy).
	avoid map[string]string
	// devices says, per node, how many devices of each PCI mapping the VM
	// wants it has and how many are free; nil when it wants none.
	devices map[string]nodeDevices
}

// choose returns the allowed, online node with room for the VM that holds
// the fewest VMs of the pool (so a pool spreads over the hosts, and a host
// failure takes few of its nodes), the one with the most free memory among
// those, and else explains per node why none has room.
//
// Free memory is the node's memory less the larger of what it reports in use
// and what its running VMs were given, because a guest that just started has
// not touched its memory yet; free CPU is the share of the node's CPUs that
// is idle now. VMs still being made by this provider count with the size
// they are being given, and with their PCI devices. A VM with PCI devices
// goes only to a node where each of its mappings has that many free
// devices; a node without the mapping is not a candidate.
func (pl placement) choose(allowed func(node string) bool, want size) (string, error) {
	nodes := slices.Clone(pl.nodes)
	slices.SortFunc(nodes, func(a, b *pmx.NodeStatus) int { return strings.Compare(a.Node, b.Node) })

	committed := map[string]uint64{}
	for _, vm := range pl.vms {
		if _, making := pl.inflight[vm.VMID]; making || vm.Type != "qemu" || vm.Status != "running" {
			continue
		}
		committed[vm.Node] += vm.MaxMem
	}
	reservedCores := map[string]float64{}
	reservedDevices := map[string]map[string]int{}
	for _, r := range pl.inflight {
		committed[r.node] += uint64(r.memMiB) * mib
		reservedCores[r.node] += float64(r.cores)
		for m, n := range r.devices {
			if reservedDevices[r.node] == nil {
				reservedDevices[r.node] = map[string]int{}
			}
			reservedDevices[r.node][m] += n
		}
	}

	// The pool's VMs per node, by their tags (fresh in the listing),
	// and the ones being made.
	poolVMs := map[string]int{}
	for _, vm := range pl.vms {
		if m := markersFromTags(vm.Tags); m.pool != "" && m.pool == pl.pool {
			if _, making := pl.inflight[vm.VMID]; !making {
				poolVMs[vm.Node]++
			}
		}
	}
	for _, r := range pl.inflight {
		if r.pool == pl.pool {
			poolVMs[r.node]++
		}
	}

	var (
		best     string
		bestFree uint64
		reasons  []string
	)
	need := uint64(want.vmMemMiB) * mib
	for _, n := range nodes {
		if n == nil || !allowed(n.Node) {
			if why, avoided := pl.avoid[n.Node]; n != nil && avoided {
				reasons = append(reasons, n.Node+": could not start the VM: "+why)
			}
			continue
		}
		if n.Status != "online" {
			reasons = append(reasons, n.Node+": "+orDefault(n.Status, "not online"))
			continue
		}
		used := max(n.Mem, committed[n.Node])
		var free uint64
		if n.MaxMem > used {
			free = n.MaxMem - used
		}
		idle := float64(n.MaxCPU)*(1-n.CPU) - reservedCores[n.Node]
		if short := pl.lackingDevices(n.Node, want.devices, reservedDevices[n.Node]); short != "" {
			reasons = append(reasons, n.Node+": "+short)
			continue
		}
		switch {
		case want.cores > n.MaxCPU:
			reasons = append(reasons, fmt.Sprintf("%s: has %d CPUs", n.Node, n.MaxCPU))
		case free < need:
			reasons = append(reasons, fmt.Sprintf("%s: %d MiB free", n.Node, free/mib))
		case idle < float64(want.cores):
			reasons = append(reasons, fmt.Sprintf("%s: %.1f CPUs idle", n.Node, max(idle, 0)))
		case best == "" || poolVMs[n.Node] < poolVMs[best] || (poolVMs[n.Node] == poolVMs[best] && free > bestFree):
			best, bestFree = n.Node, free
		}
	}
	if best != "" {
		return best, nil
	}
	if len(reasons) == 0 {
		return "", fmt.Errorf("no Proxmox node is allowed for the VM (check spec.proxmox.nodes and the claim's zone requirement)")
	}
	if len(want.devices) > 0 {
		return "", fmt.Errorf("no allowed, online Proxmox node has %d CPUs, %d MiB and %s free (%s)", want.cores, want.vmMemMiB, describeDevices(want.devices), strings.Join(reasons, "; "))
	}
	return "", fmt.Errorf("no allowed, online Proxmox node has %d CPUs and %d MiB free (%s)", want.cores, want.vmMemMiB, strings.Join(reasons, "; "))
}

// lackingDevices says what a node lacks of the PCI devices wanted, "" when
// it has them free; reserved are the devices of VMs this provider is
// making there.
func (pl placement) lackingDevices(node string, want []deviceWant, reserved map[string]int) string {
	if len(want) == 0 {
		return ""
	}
	nd, ok := pl.devices[node]
	if !ok {
		return "its PCI devices were not looked at"
	}
	if nd.unknown != "" {
		return "its PCI devices' use is unknown (" + nd.unknown + ")"
	}
	var lacks []string
	for _, d := range want {
		total, free := nd.total[d.mapping], nd.free[d.mapping]-reserved[d.mapping]
		switch {
		case total == 0:
			lacks = append(lacks, fmt.Sprintf("PCI mapping %s has no device there", d.mapping))
		case free < d.count:
			lacks = append(lacks, fmt.Sprintf("%d of its %d %s of PCI mapping %s free", max(free, 0), total, plural(total, "device", "devices"), d.mapping))
		}
	}
	return strings.Join(lacks, ", ")
}

// allows returns the test for the nodes a claim's VM may go to: the
// allow-list, narrowed by the claim's zone requirement, since a VM's zone
// label is its Proxmox node (as the Proxmox cloud-controller-manager sets it).
func (s *settings) allows(claim *v1alpha1.NodeClaim) func(string) bool {
	var reqs []corev1.NodeSelectorRequirement
	for _, r := range claim.Spec.Requirements.NodeSelector {
		if r.Key == corev1.LabelTopologyZone {
			reqs = append(reqs, r)
		}
	}
	return func(node string) bool {
		if len(s.allowed) > 0 && !s.allowed[node] {
			return false
		}
		for _, r := range reqs {
			switch r.Operator {
			case corev1.NodeSelectorOpIn:
				if !slices.Contains(r.Values, node) {
					return false
				}
			case corev1.NodeSelectorOpNotIn:
				if slices.Contains(r.Values, node) {
					return false
				}
			case corev1.NodeSelectorOpDoesNotExist:
				return false
			}
		}
		return true
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Zones are the Proxmox nodes a VM may be placed on now: the online nodes
// of the allow-list (every online node when it is empty). A VM's zone is
// its node, so provisioning treats the hosts as zones and a pod spread over
// zones spreads over hosts (provider.Zoner).
func (p *Provider) Zones(ctx context.Context) ([]string, error) {
	var nodes pmx.NodeStatuses
	if err := p.api.do(ctx, func(ctx context.Context) (err error) { nodes, err = p.api.pve.Nodes(ctx); return err }); err != nil {
		return nil, p.api.classify(err, "listing Proxmox nodes")
	}
	var zones []string
	for _, n := range nodes {
		if n == nil || n.Status != "online" || len(p.settings.allowed) > 0 && !p.settings.allowed[n.Node] {
			continue
		}
		zones = append(zones, n.Node)
	}
	slices.Sort(zones)
	return zones, nil
}
