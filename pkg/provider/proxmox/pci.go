package proxmox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	pmx "github.com/luthermonson/go-proxmox"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// deviceWant is how many devices of one extended resource a VM gets.
type deviceWant struct {
	pciDevice
	count int
}

// devicesOf turns a shape's extended resources into the devices its VM
// gets, in the order of the resources' names (so hostpciN are numbered the
// same way every time). A resource no entry of spec.proxmox.pciDevices
// maps is an error: the VM could not have the devices its node is bought
// for.
func (s *settings) devicesOf(resources corev1.ResourceList) ([]deviceWant, error) {
	var out []deviceWant
	total := 0
	for _, name := range slices.Sorted(maps.Keys(resources)) {
		q := resources[name]
		n, ok := q.AsInt64()
		if !ok || n < 1 {
			return nil, fmt.Errorf("it asks for %s %s, not a whole number of devices", q.String(), name)
		}
		d, mapped := s.pci[name]
		if !mapped {
			return nil, fmt.Errorf("it asks for %d %s, and spec.proxmox.pciDevices maps no Proxmox PCI mapping to that resource: add {resource: %s, mapping: <the ID of a Datacenter > Resource Mappings > PCI Devices entry>}", n, name, name)
		}
		total += int(min(n, maxHostPCI+1))
		if total > maxHostPCI {
			return nil, fmt.Errorf("it asks for more than %d PCI devices, the most a Proxmox VM can have (hostpci0 to hostpci%d)", maxHostPCI, maxHostPCI-1)
		}
		out = append(out, deviceWant{pciDevice: d, count: int(n)})
	}
	return out, nil
}

// withDevices adds the devices, by their resources, to a capacity.
func withDevices(capacity corev1.ResourceList, devices []deviceWant) corev1.ResourceList {
	for _, d := range devices {
		capacity[d.resource] = *resource.NewQuantity(int64(d.count), resource.DecimalSI)
	}
	return capacity
}

// hostpciOptions are the hostpciN options of a VM with these devices.
func hostpciOptions(devices []deviceWant) []pmx.VirtualMachineOption {
	var out []pmx.VirtualMachineOption
	for _, d := range devices {
		for range d.count {
			out = append(out, pmx.VirtualMachineOption{Name: "hostpci" + strconv.Itoa(len(out)), Value: d.hostpci()})
		}
	}
	return out
}

// describeDevices says what a VM's devices are, for messages: "2 devices
// of PCI mapping gpu (nvidia.com/gpu)".
func describeDevices(devices []deviceWant) string {
	var parts []string
	for _, d := range devices {
		parts = append(parts, fmt.Sprintf("%d %s of PCI mapping %s (%s)", d.count, plural(d.count, "device", "devices"), d.mapping, d.resource))
	}
	return strings.Join(parts, " and ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// mappedDevices reads which of the configured devices a VM's
// configuration passes through: its hostpciN options that name a mapping
// of spec.proxmox.pciDevices, counted per resource.
func (s *settings) mappedDevices(cfg *vmConfig) corev1.ResourceList {
	if len(s.pci) == 0 || cfg == nil {
		return nil
	}
	byMapping := map[string]corev1.ResourceName{}
	for name, d := range s.pci {
		byMapping[d.mapping] = name
	}
	counts := map[corev1.ResourceName]int64{}
	for key, value := range cfg.options {
		if !hostPCIOption.MatchString(key) {
			continue
		}
		if name, ok := byMapping[hostpciMapping(value)]; ok {
			counts[name]++
		}
	}
	var out corev1.ResourceList
	for name, n := range counts {
		if out == nil {
			out = corev1.ResourceList{}
		}
		out[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out
}

// hasDevices says whether a VM's configuration already passes through
// exactly the devices it should.
func (s *settings) hasDevices(cfg *vmConfig, want []deviceWant) bool {
	have := s.mappedDevices(cfg)
	if len(have) != len(want) {
		return false
	}
	for _, d := range want {
		if q, ok := have[d.resource]; !ok || q.Value() != int64(d.count) {
			return false
		}
	}
	return true
}

// hostpciMapping is the mapping a hostpciN value names, "" for a raw host
// device.
func hostpciMapping(value string) string {
	for _, part := range strings.Split(value, ",") {
		if m, ok := strings.CutPrefix(part, "mapping="); ok {
			return m
		}
	}
	return ""
}

// hostpciHost is the device path list of a raw hostpciN value (its
// default key, or host=), "" for a mapped one.
func hostpciHost(value string) string {
	for _, part := range strings.Split(value, ",") {
		if h, ok := strings.CutPrefix(part, "host="); ok {
			return h
		}
		if !strings.Contains(part, "=") {
			return part
		}
	}
	return ""
}

// pciMapping is a cluster PCI resource mapping as GET /cluster/mapping/pci
// lists it (pve-manager PVE/API2/Cluster/Mapping/PCI.pm): its ID and its
// map, one property string per device and node
// ("node=pve1,path=0000:01:00.0,id=10de:2684,iommugroup=12").
type pciMapping struct {
	ID  string   `json:"id"`
	Map []string `json:"map"`
}

// pathsOn returns the paths of the mapping's entries for a node. Each
// entry is one device: qemu-server's parse_hostpci makes an alternative of
// each entry of the VM's node, and choose_hostpci_devices gives every
// hostpciN of a VM a different one that no running VM holds.
func (m pciMapping) pathsOn(node string) []string {
	var out []string
	for _, entry := range m.Map {
		var entryNode, path string
		for _, part := range strings.Split(entry, ",") {
			k, v, _ := strings.Cut(part, "=")
			switch k {
			case "node":
				entryNode = v
			case "path":
				path = v
			}
		}
		if entryNode == node && path != "" {
			out = append(out, path)
		}
	}
	return out
}

// pciMappings lists the cluster's PCI mappings by ID. go-proxmox v0.4.0
// has no call for /cluster/mapping, so it is read raw, as the guests are.
// A mapping the API token may not see (it needs Mapping.Audit or
// Mapping.Use on /mapping/pci/<id>) is not listed.
func (p *Provider) pciMappings(ctx context.Context) (map[string]pciMapping, error) {
	var list []pciMapping
	if err := p.api.get(ctx, "/cluster/mapping/pci", &list); err != nil {
		return nil, err
	}
	out := make(map[string]pciMapping, len(list))
	for _, m := range list {
		out[m.ID] = m
	}
	return out, nil
}

// nodeDevices is what a Proxmox node has of each wanted PCI mapping.
type nodeDevices struct {
	// total and free count the mapping's devices on the node, by mapping:
	// a device is free when no running VM holds it.
	total, free map[string]int
	// unknown says why the node's use of its devices could not be read.
	unknown string
}

// pciAvailability finds, for each node a VM with these devices may go to,
// how many devices of each wanted mapping it has and how many are free.
// A device is used while a VM that passes it through runs, and free while
// that VM is stopped: qemu-server reserves a VM's devices when it starts
// (reserve_pci_usage, by the QEMU process's pid) and drops the
// reservations when it stops (vm_stop_cleanup), and a reservation whose
// VM no longer runs is taken over. The API does not show the
// reservations, so a node's running VMs are read: GET /nodes/{node}/qemu
// answers from the node's own pid files, fresh (unlike /cluster/resources,
// which lags up to 10 s), and each running VM's configuration tells its
// hostpciN: one device of a mapping per mapping=<id>, and the entry whose
// path a raw host device names. VMs this provider is still making are
// left out: their reservations count for them. Which entry of a mapping a
// running VM holds cannot be read, and mappings that share devices are
// not told apart.
func (p *Provider) pciAvailability(ctx context.Context, nodes pmx.NodeStatuses, usable func(string) bool, mappings map[string]pciMapping, want []deviceWant) map[string]nodeDevices {
	out := map[string]nodeDevices{}
	for _, n := range nodes {
		if n == nil || n.Status != "online" || !usable(n.Node) {
			continue
		}
		nd := nodeDevices{total: map[string]int{}, free: map[string]int{}}
		hasAny := false
		for _, d := range want {
			nd.total[d.mapping] = len(mappings[d.mapping].pathsOn(n.Node))
			hasAny = hasAny || nd.total[d.mapping] > 0
		}
		maps.Copy(nd.free, nd.total)
		if hasAny {
			if err := p.countUsedDevices(ctx, n.Node, mappings, want, &nd); err != nil {
				nd.unknown = p.api.scrub(err).Error()
			}
		}
		out[n.Node] = nd
	}
	return out
}

// countUsedDevices takes the devices a node's running VMs hold from
// nd.free.
func (p *Provider) countUsedDevices(ctx context.Context, node string, mappings map[string]pciMapping, want []deviceWant, nd *nodeDevices) error {
	var guests []struct {
		VMID     int     `json:"vmid"`
		Status   string  `json:"status"`
		Template flexInt `json:"template"`
	}
	if err := p.api.get(ctx, fmt.Sprintf("/nodes/%s/qemu", node), &guests); err != nil {
		return fmt.Errorf("listing its VMs: %w", err)
	}
	for _, g := range guests {
		if _, making := p.inflight[g.VMID]; making || g.Status != "running" || g.Template != 0 {
			continue
		}
		cfg, err := p.vmConfig(ctx, node, g.VMID)
		if notExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading VM %d: %w", g.VMID, err)
		}
		for _, key := range slices.Sorted(maps.Keys(cfg.options)) {
			if !hostPCIOption.MatchString(key) {
				continue
			}
			value := cfg.options[key]
			if m := hostpciMapping(value); m != "" {
				if _, wanted := nd.free[m]; wanted {
					nd.free[m]--
				}
				continue
			}
			host := hostpciHost(value)
			for _, d := range want {
				for _, path := range mappings[d.mapping].pathsOn(node) {
					if sharesDevice(host, path) {
						nd.free[d.mapping]--
					}
				}
			}
		}
	}
	for m, n := range nd.free {
		nd.free[m] = max(n, 0)
	}
	return nil
}

// sharesDevice says whether two PCI path lists name a device in common,
// the domain 0000: added where one leaves it out.
func sharesDevice(a, b string) bool {
	norm := func(list string) []string {
		var out []string
		for _, p := range strings.Split(list, ";") {
			if strings.Count(p, ":") == 1 {
				p = "0000:" + p
			}
			out = append(out, strings.ToLower(p))
		}
		return out
	}
	bs := norm(b)
	for _, x := range norm(a) {
		for _, y := range bs {
			if x == y || strings.HasPrefix(x, y+".") || strings.HasPrefix(y, x+".") {
				return true
			}
		}
	}
	return false
}

// notePCIMappings checks that the cluster lists every wanted mapping. One
// it does not list is an error, and a problem of the NodeProvider until a
// later listing has it: no node could take the VM, and nothing but the
// operator (creating the mapping, or granting the API token Mapping.Use
// on it) can change that. Callers hold p.mu.
func (p *Provider) notePCIMappings(mappings map[string]pciMapping, want []deviceWant) error {
	var missing []string
	for _, d := range want {
		if _, ok := mappings[d.mapping]; ok {
			delete(p.pciProblems, d.mapping)
			continue
		}
		msg := fmt.Sprintf("spec.proxmox.pciDevices passes %s through by PCI mapping %s, which the Proxmox cluster does not list: create it (Datacenter > Resource Mappings > PCI Devices, one entry per device and node) or grant the %s Mapping.Use on /mapping/pci/%s", d.resource, d.mapping, p.api.principal, d.mapping)
		p.pciProblems[d.mapping] = msg
		missing = append(missing, msg)
	}
	if len(missing) > 0 {
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}

// devicesUnavailable says whether a failed start failed because the node
// could not give the VM its PCI devices, with qemu-server's message: the
// start worker dies before QEMU runs (vm_start_nolock, src/PVE/QemuServer.pm
// and src/PVE/QemuServer/PCI.pm) when the mapping has no entry for the
// node ("PCI device mapping not found for 'M'"), when its hardware changed
// ("PCI device mapping invalid (hardware probably changed): …", "no PCI
// device found for 'ID'"), when every entry is held by another VM ("could
// not find a free device for 'hostpciN'"; "PCI device 'ID' already in use
// by VMID 'V'" or "… is currently reserved for use by VMID 'V'" for a
// mapping with one entry), or when the VM has more devices of a mapping
// than the node has ("device 'ID' assigned more than once").
func devicesUnavailable(err error) (string, bool) {
	var task *taskError
	if !errors.As(err, &task) {
		return "", false
	}
	for _, sign := range []string{
		"PCI device mapping not found for",
		"PCI device mapping invalid",
		"no PCI device found for",
		"could not find a free device for 'hostpci",
		"already in use by VMID",
		"already in use by running VMID",
		"is currently reserved for use by VMID",
		"assigned more than once",
	} {
		if strings.Contains(task.ExitStatus, sign) {
			return task.ExitStatus, true
		}
	}
	return "", false
}
