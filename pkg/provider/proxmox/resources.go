package proxmox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// vmResource is a guest as /cluster/resources?type=vm lists it. go-proxmox's
// ClusterResource lacks the lock, which tells a VM being cloned from one
// that is merely stopped.
type vmResource struct {
	VMID     int     `json:"vmid"`
	Type     string  `json:"type"`
	Name     string  `json:"name"`
	Node     string  `json:"node"`
	Status   string  `json:"status"`
	Template flexInt `json:"template"`
	Tags     string  `json:"tags"`
	Lock     string  `json:"lock"`
	MaxCPU   float64 `json:"maxcpu"`
	MaxMem   uint64  `json:"maxmem"`
}

func (r vmResource) isVM() bool { return r.Type == "qemu" && r.Template == 0 }

// vmConfig is the part of a VM's configuration the provider reads.
type vmConfig struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        string   `json:"tags"`
	Cores       flexInt  `json:"cores"`
	Sockets     flexInt  `json:"sockets"`
	Memory      memoryMB `json:"memory"`
	Meta        string   `json:"meta"`
	Lock        string   `json:"lock"`
	Protection  flexInt  `json:"protection"`
	// options holds every option as text, for the drives.
	options map[string]string
}

// markers reads the VM's markers from its tags, else from its description.
func (c *vmConfig) markers() markers {
	if m := markersFromTags(c.Tags); m.cluster != "" {
		return m
	}
	return markersFromDescription(c.Description)
}

// vcpus is what the guest sees: cores times sockets, each defaulting to 1.
func (c *vmConfig) vcpus() int64 {
	cores, sockets := int64(c.Cores), int64(c.Sockets)
	if cores < 1 {
		cores = 1
	}
	if sockets < 1 {
		sockets = 1
	}
	return cores * sockets
}

// created is when the VM was made: the time claimscale wrote into its
// description, else the ctime Proxmox records in the meta option
// ("creation-qemu=8.1.2,ctime=1700000000"), which a clone copies from its
// template and so is only right for VMs made blank.
func (c *vmConfig) created() time.Time {
	if t, ok := createdFromDescription(c.Description); ok {
		return t
	}
	for _, part := range strings.Split(c.Meta, ",") {
		if v, ok := strings.CutPrefix(part, "ctime="); ok {
			if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(secs, 0)
			}
		}
	}
	return time.Time{}
}

// flexInt decodes an integer that Proxmox sends as a number, a string or a
// boolean, depending on the endpoint and version.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	switch s {
	case "", "null", "false":
		*f = 0
		return nil
	case "true":
		*f = 1
		return nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*f = flexInt(n)
	return nil
}

// memoryMB decodes the memory option: a number of MiB, or since Proxmox VE
// 8.1 the property string "[current=]MiB".
type memoryMB int64

func (m *memoryMB) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimPrefix(part, "current=")
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			*m = memoryMB(n)
			return nil
		}
	}
	*m = 0
	return nil
}

// listVMs returns every guest in the cluster.
func (p *Provider) listVMs(ctx context.Context) ([]vmResource, error) {
	var out []vmResource
	if err := p.api.get(ctx, "/cluster/resources?type=vm", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// vmConfig reads a VM's configuration.
func (p *Provider) vmConfig(ctx context.Context, node string, vmid int) (*vmConfig, error) {
	var raw json.RawMessage
	if err := p.api.get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid), &raw); err != nil {
		return nil, err
	}
	var cfg vmConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decoding the config of VM %d: %w", vmid, err)
	}
	var all map[string]any
	_ = json.Unmarshal(raw, &all)
	cfg.options = map[string]string{}
	for k, v := range all {
		if s, ok := v.(string); ok {
			cfg.options[k] = s
		}
	}
	return &cfg, nil
}

// ownership returns a VM's markers: from its tags when they carry a cluster
// marker, else from its description, which is all a clone carries until its
// tags are set. The configuration is returned when it was read.
func (p *Provider) ownership(ctx context.Context, vm vmResource) (markers, *vmConfig, error) {
	if m := markersFromTags(vm.Tags); m.cluster != "" {
		return m, nil, nil
	}
	cfg, err := p.vmConfig(ctx, vm.Node, vm.VMID)
	if err != nil {
		return markers{}, nil, err
	}
	return cfg.markers(), cfg, nil
}
