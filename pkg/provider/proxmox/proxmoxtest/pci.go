package proxmoxtest

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// PCIMapping is a cluster PCI resource mapping (Datacenter > Resource
// Mappings; pve-guest-common src/PVE/Mapping/PCI.pm, stored in
// /etc/pve/mapping/pci.cfg): an ID the guests' hostpciN options name with
// mapping=<ID>, and per Proxmox node the devices it stands for.
type PCIMapping struct {
	ID          string
	Description string
	// MDev marks devices that provide mediated devices (vGPU). Listed as
	// Proxmox lists it; the fake does not model mediated devices.
	MDev bool
	// Map holds the mapping's entries. Each entry of a node is one device
	// of that node: qemu-server's parse_hostpci makes one alternative per
	// entry, and choose_hostpci_devices gives each hostpciN of a VM a
	// different one.
	Map []PCIMapEntry
}

// PCIMapEntry is one device of a mapping on one node, as the map
// property's strings carry it ($map_fmt in PVE/Mapping/PCI.pm).
type PCIMapEntry struct {
	Node string
	// Path is the device's PCI address with its domain
	// (0000:01:00.0), or a whole device without the function
	// (0000:01:00), or several joined by ';', which qemu-server passes
	// through together as one device (parse_hostpci splits the path of an
	// entry into the functions of one alternative).
	Path string
	// ID is vendor:device (10de:2204), SubsystemID the subsystem's.
	ID          string
	SubsystemID string
	// IOMMUGroup is the device's IOMMU group; negative leaves it out.
	IOMMUGroup  int
	Description string
}

// String is the entry as the map property holds it, in the order
// qemu-server's own tests write it (src/test/run_config2command_tests.pl:
// node=…,path=…,id=…,iommugroup=…).
func (e PCIMapEntry) String() string {
	parts := []string{"node=" + e.Node, "path=" + e.Path, "id=" + e.ID}
	if e.IOMMUGroup >= 0 {
		parts = append(parts, "iommugroup="+strconv.Itoa(e.IOMMUGroup))
	}
	if e.SubsystemID != "" {
		parts = append(parts, "subsystem-id="+e.SubsystemID)
	}
	if e.Description != "" {
		parts = append(parts, "description="+e.Description)
	}
	return strings.Join(parts, ",")
}

// AddPCIMapping adds a cluster PCI mapping, or replaces the one of its ID.
func (s *Server) AddPCIMapping(m PCIMapping) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := m
	c.Map = slices.Clone(m.Map)
	s.pciMappings[m.ID] = &c
}

// RemovePCIMapping deletes a cluster PCI mapping behind the provider's
// back.
func (s *Server) RemovePCIMapping(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pciMappings, id)
}

// PCIReservations returns which VM holds each host PCI device, by node and
// device ID ("pve1/0000:01:00.0"): what qemu-server's reservation file
// (/var/run/pve-pci-reservation) holds for VMs running or starting.
func (s *Server) PCIReservations() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, vm := range s.vms {
		for _, id := range vm.PCI {
			out[vm.Node+"/"+id] = vm.VMID
		}
	}
	return out
}

// listPCIMappings answers GET /cluster/mapping/pci as pve-manager's
// PVE/API2/Cluster/Mapping/PCI.pm index does: every mapping (the fake's
// token may see them all; Proxmox lists only those the user has
// Mapping.Audit, Mapping.Use or Mapping.Modify on) with its id, its map
// strings, description, mdev flag and the config digest; with check-node,
// a "No mapping for node N." warning in checks when the mapping has no
// entry for that node. assert_valid's hardware checks (vendor, device and
// IOMMU group against sysfs) are not modelled: the fake's hardware always
// matches.
func (s *Server) listPCIMappings(c *call) (any, *apiError) {
	checkNode := c.params["check-node"]
	if checkNode != "" {
		if _, failed := s.onlineNode(checkNode); failed != nil {
			return nil, failed
		}
	}
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.pciMappings)) {
		e := s.pciMappingEntry(s.pciMappings[id])
		if checkNode != "" {
			checks := []map[string]any{}
			if len(s.pciMappings[id].entriesOn(checkNode)) == 0 {
				checks = append(checks, map[string]any{"severity": "warning", "message": "No mapping for node " + checkNode + "."})
			}
			e["checks"] = checks
		}
		out = append(out, e)
	}
	return out, nil
}

// getPCIMapping answers GET /cluster/mapping/pci/{id}; an unknown ID dies
// "mapping 'ID' not found" (a 500, as every die in a handler).
func (s *Server) getPCIMapping(c *call) (any, *apiError) {
	m, ok := s.pciMappings[c.args[0]]
	if !ok {
		return nil, errorf(http.StatusInternalServerError, "mapping '%s' not found", c.args[0])
	}
	e := s.pciMappingEntry(m)
	delete(e, "id")
	return e, nil
}

func (s *Server) pciMappingEntry(m *PCIMapping) map[string]any {
	entries := make([]string, 0, len(m.Map))
	for _, e := range m.Map {
		entries = append(entries, e.String())
	}
	e := map[string]any{"id": m.ID, "type": "pci", "map": entries, "digest": "0e2b7a1c5d9f"}
	if m.Description != "" {
		e["description"] = m.Description
	}
	if m.MDev {
		e["mdev"] = 1
	}
	return e
}

// entriesOn returns the mapping's entries for a node, as
// PVE::Mapping::PCI::get_node_mapping does.
func (m *PCIMapping) entriesOn(node string) []PCIMapEntry {
	var out []PCIMapEntry
	for _, e := range m.Map {
		if e.Node == node {
			out = append(out, e)
		}
	}
	return out
}

// maxHostPCI is qemu-server's $MAX_HOSTPCI_DEVICES: hostpci0 to hostpci15.
const maxHostPCI = 16

// hostPCIKeys are the keys of qemu-server's pve-qm-hostpci format
// (src/PVE/QemuServer/PCI.pm $hostpci_fmt), with the pattern of each
// value. driver exists since qemu-server 9.0.25 (commit aa47045f); the fake
// takes it whatever version it answers.
var hostPCIKeys = map[string]*regexp.Regexp{
	"host":          regexp.MustCompile(`^(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?(;(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?)*$`),
	"mapping":       regexp.MustCompile(`(?i)^[a-z][a-z0-9_-]+$`), // pve-configid
	"rombar":        booleanValue,
	"romfile":       regexp.MustCompile(`^[^,;]+$`),
	"pcie":          booleanValue,
	"x-vga":         booleanValue,
	"legacy-igd":    booleanValue,
	"mdev":          regexp.MustCompile(`^[^/.:]+$`),
	"vendor-id":     hexID,
	"device-id":     hexID,
	"sub-vendor-id": hexID,
	"sub-device-id": hexID,
	"driver":        regexp.MustCompile(`^(vfio|keep)$`),
}

var (
	// booleanValue is what PVE::JSONSchema::parse_boolean takes.
	booleanValue = regexp.MustCompile(`(?i)^(1|0|on|off|yes|no|true|false)$`)
	hexID        = regexp.MustCompile(`^0x[0-9a-fA-F]{4}$`)
	hostPCIName  = regexp.MustCompile(`^hostpci(\d+)$`)
)

// checkHostPCI verifies the hostpciN options of a create or config call
// as the API's parameter verification does (PVE::JSONSchema
// parse_property_string against $hostpci_fmt): a key the format lacks or
// a value its pattern refuses is a 400 "Parameter verification failed."
// with the property's error.
func checkHostPCI(params map[string]string) *apiError {
	for _, k := range slices.Sorted(maps.Keys(params)) {
		m := hostPCIName.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		if i, _ := strconv.Atoi(m[1]); i >= maxHostPCI {
			return errorf(http.StatusBadRequest, "Parameter verification failed. (%s: property is not defined in schema and the schema does not allow additional properties)", k)
		}
		for key, value := range propertyString(params[k]) {
			re, known := hostPCIKeys[key]
			switch {
			case !known:
				return errorf(http.StatusBadRequest, "Parameter verification failed. (%s: invalid format - format error %s.%s: property is not defined in schema and the schema does not allow additional properties)", k, k, key)
			case !re.MatchString(value):
				return errorf(http.StatusBadRequest, "Parameter verification failed. (%s: invalid format - format error %s.%s: value does not match the regex pattern)", k, k, key)
			}
		}
	}
	return nil
}

// propertyString splits a property string into its keys; a part without
// '=' is the default key's value (host, for hostpci).
func propertyString(v string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			k, val = "host", part
		}
		out[k] = val
	}
	return out
}

func isTrue(v string) bool {
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		return true
	}
	return false
}

// choosePCI picks the host PCI devices a VM's start reserves, as
// qemu-server does before QEMU runs (vm_start_nolock → config_to_command →
// print_hostpci_devices, then reserve_pci_usage on every chosen ID), and
// returns the task's error message when it cannot. Each error is the die
// message that ends the qmstart task, without the "start failed:" prefix
// that only QEMU's own failures get:
//
//   - parse_hostpci_devices parses every hostpciN first: a mapping with no
//     entry for the VM's node dies "PCI device mapping not found for 'M'";
//     both host and mapping die "Cannot set both 'host' and 'mapping'.";
//     pcie=1 on a machine type that is not q35 dies "q35 machine model is
//     not enabled" (a die without a newline, so Perl appends where:
//     " at /usr/share/perl5/PVE/QemuServer/PCI.pm line 510.", the line of
//     that commit).
//   - choose_hostpci_devices, for each hostpciN in order: a device with one
//     alternative (a raw host path, or a mapping with one entry on the
//     node) is taken as it is, and a device taken twice in the VM dies
//     "device 'ID' assigned more than once"; of several alternatives, the
//     first that no earlier hostpciN of the VM took and that
//     reserve_pci_usage can reserve (no other VM holds it) is taken, and
//     none dies "could not find a free device for 'hostpciN'".
//   - reserve_pci_usage of all chosen IDs: an ID another VM holds dies
//     "PCI device 'ID' already in use by VMID 'V'" when that VM runs (its
//     pid reservation), or "PCI device 'ID' is currently reserved for use
//     by VMID 'V'" while that VM starts (the time reservation taken before
//     QEMU runs). A reservation of a VM that no longer runs is a leftover
//     and is taken ("leftover PCI reservation found"): a stopped VM's
//     devices are free. vm_stop_cleanup (cleanup_pci_devices →
//     remove_pci_reservation) drops a VM's reservations when it stops.
//
// Device IDs are the paths as written, with the domain 0000: added where
// a raw host path leaves it out (lspci's IDs carry it); a path without
// the function stands for the whole device and is not expanded into its
// functions (an assumption that keeps one ID per device).
func (s *Server) choosePCI(vm *VM) ([]string, string) {
	type hostpci struct {
		index        int
		alternatives [][]string
	}
	var devices []hostpci
	for i := range maxHostPCI {
		v, ok := vm.Config["hostpci"+strconv.Itoa(i)]
		if !ok || v == "" {
			continue
		}
		opts := propertyString(v)
		host, mapping := opts["host"], opts["mapping"]
		switch {
		case host != "" && mapping != "":
			return nil, "Cannot set both 'host' and 'mapping'."
		case host == "" && mapping == "":
			return nil, "Either 'host' or 'mapping' must be set."
		}
		if isTrue(opts["pcie"]) && !isQ35(vm.Config["machine"]) {
			return nil, "q35 machine model is not enabled at /usr/share/perl5/PVE/QemuServer/PCI.pm line 510."
		}
		d := hostpci{index: i}
		if mapping != "" {
			var entries []PCIMapEntry
			if m := s.pciMappings[mapping]; m != nil {
				entries = m.entriesOn(vm.Node)
			}
			if len(entries) == 0 {
				return nil, fmt.Sprintf("PCI device mapping not found for '%s'", mapping)
			}
			for _, e := range entries {
				d.alternatives = append(d.alternatives, pciIDs(e.Path))
			}
		} else {
			d.alternatives = [][]string{pciIDs(host)}
		}
		devices = append(devices, d)
	}

	used := map[string]bool{}
	var chosen []string
	take := func(ids []string) string {
		for _, id := range ids {
			if used[id] {
				return fmt.Sprintf("device '%s' assigned more than once", id)
			}
			used[id] = true
		}
		chosen = append(chosen, ids...)
		return ""
	}
	for _, d := range devices {
		if len(d.alternatives) == 1 {
			if msg := take(d.alternatives[0]); msg != "" {
				return nil, msg
			}
			continue
		}
		found := false
		for _, ids := range d.alternatives {
			if slices.ContainsFunc(ids, func(id string) bool { return used[id] }) {
				continue
			}
			if msg := s.pciHeld(vm, ids); msg != "" {
				continue
			}
			_ = take(ids)
			found = true
			break
		}
		if !found {
			return nil, fmt.Sprintf("could not find a free device for 'hostpci%d'", d.index)
		}
	}
	if msg := s.pciHeld(vm, chosen); msg != "" {
		return nil, msg
	}
	return chosen, ""
}

// pciHeld returns reserve_pci_usage's refusal when another VM on the VM's
// node holds one of the IDs, else "".
func (s *Server) pciHeld(vm *VM, ids []string) string {
	for _, id := range ids {
		for _, other := range s.vms {
			if other.VMID == vm.VMID || other.Node != vm.Node || !slices.Contains(other.PCI, id) {
				continue
			}
			if other.Status == "running" {
				return fmt.Sprintf("PCI device '%s' already in use by VMID '%d'", id, other.VMID)
			}
			return fmt.Sprintf("PCI device '%s' is currently reserved for use by VMID '%d'", id, other.VMID)
		}
	}
	return ""
}

// pciIDs splits a path list into device IDs, adding the domain where it
// is left out.
func pciIDs(path string) []string {
	var out []string
	for _, p := range strings.Split(path, ";") {
		if strings.Count(p, ":") == 1 {
			p = "0000:" + p
		}
		out = append(out, strings.ToLower(p))
	}
	return out
}

// isQ35 is machine_type_is_q35 (src/PVE/QemuServer/Machine.pm): the
// machine option's type (q35, pc-q35-9.0, or type=… in the property
// string) has the base type q35.
func isQ35(machine string) bool {
	typ := propertyString(machine)["host"]
	if t, ok := propertyString(machine)["type"]; ok {
		typ = t
	}
	return typ == "q35" || strings.HasPrefix(typ, "pc-q35-")
}
