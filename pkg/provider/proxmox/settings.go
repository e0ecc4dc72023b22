package proxmox

import (
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// The keys of the credentials Secret.
const (
	SecretKeyTokenID     = "tokenID"
	SecretKeyTokenSecret = "tokenSecret"
	SecretKeyUsername    = "username"
	SecretKeyPassword    = "password"
	SecretKeyCA          = "ca.crt"
)

const mib = 1 << 20

// settings are a NodeProvider's proxmox block, checked and turned into the
// values the API calls take.
type settings struct {
	endpoint    string
	insecureTLS bool
	// allowed is the node allow-list; empty allows every node.
	allowed map[string]bool
	lower   int
	upper   int
	clone   *cloneSettings
	netboot *netbootSettings
	storage string
	// nics are the net0, net1, … values, e.g. "virtio,bridge=vmbr0,tag=10".
	nics        []string
	cicustom    string
	overheadMiB int64
	extra       []v1alpha1.NameValue
	// pool is the resource pool VMs are added to.
	pool string
	// cloudInitStorage and cloudInitDrive say where a claim's cloud-init
	// ISO goes.
	cloudInitStorage string
	cloudInitDrive   string
	// shutdownTimeout is how long a VM put to sleep is given to shut down
	// before it is stopped.
	shutdownTimeout time.Duration
	// pci says which PCI mapping passes through each extended resource's
	// devices.
	pci map[corev1.ResourceName]pciDevice
}

// pciDevice is how the devices of one extended resource reach a VM: each
// as a hostpciN option naming the cluster PCI mapping, with the options
// of spec.proxmox.pciDevices.
type pciDevice struct {
	resource corev1.ResourceName
	mapping  string
	// options follow mapping=<mapping> in the hostpciN value, e.g.
	// ",pcie=1,x-vga=1".
	options string
}

// hostpci is the value of one hostpciN option for a device.
func (d pciDevice) hostpci() string { return "mapping=" + d.mapping + d.options }

// DefaultShutdownTimeout is spec.proxmox.shutdownTimeout's default.
const DefaultShutdownTimeout = 2 * time.Minute

type cloneSettings struct {
	// templateID is the template for nodes not in nodeTemplates; 0 when
	// there is none.
	templateID int
	// templateName finds the template on the chosen node by name.
	templateName string
	// nodeTemplates is the template of each node.
	nodeTemplates map[string]int
	full          bool
}

// describe names the configured templates, for messages.
func (c *cloneSettings) describe() string {
	var parts []string
	if c.templateID != 0 {
		parts = append(parts, fmt.Sprintf("templateID %d", c.templateID))
	}
	if c.templateName != "" {
		parts = append(parts, fmt.Sprintf("templateName %q", c.templateName))
	}
	for node, id := range c.nodeTemplates {
		parts = append(parts, fmt.Sprintf("template %d on %s", id, node))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

type netbootSettings struct {
	// boot is the VM's boot option, e.g. "order=net0".
	boot   string
	osType string
	// disk is the scsi0 value that allocates a new disk, e.g. "local-lvm:32".
	disk string
}

// credentials are the values of the credentials Secret. They are never
// formatted into a message.
type credentials struct {
	tokenID     string
	tokenSecret string
	username    string
	password    string
	roots       *x509.CertPool
}

// values lists the secret values, for redaction.
func (c credentials) values() []string {
	var out []string
	for _, v := range []string{c.tokenID, c.tokenSecret, c.username, c.password} {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// reservedOptions are set by the provider itself; passing them through
// extraOptions would break sizing or the ownership markers.
var reservedOptions = map[string]string{
	"vmid":        "the VM ID comes from vmIDRange",
	"name":        "the VM is named after its NodeClaim",
	"tags":        "the tags carry claimscale's ownership markers",
	"description": "the description carries claimscale's ownership markers",
	"cores":       "cores come from the claim's shape",
	"sockets":     "cores come from the claim's shape",
	"memory":      "memory comes from the claim's shape and memoryOverhead",
	"pool":        "the pool comes from spec.proxmox.pool",
}

var diskSizePattern = regexp.MustCompile(`^([0-9]+)([KMGT]?)$`)

// parseSettings checks a NodeProvider's proxmox block. Every error is
// terminal: the NodeProvider has to change before anything can work.
func parseSettings(np *v1alpha1.NodeProvider) (*settings, error) {
	px := np.Spec.Proxmox
	if px == nil {
		return nil, provider.NewTerminal(errors.New("spec.proxmox is not set"))
	}
	s := &settings{
		insecureTLS: px.InsecureSkipTLSVerify,
		lower:       int(px.VMIDRange.Lower),
		upper:       int(px.VMIDRange.Upper),
		storage:     px.Storage,
		cicustom:    px.CICustom,
		pool:        px.Pool,

		cloudInitStorage: orDefault(px.CloudInitStorage, "local"),
		cloudInitDrive:   orDefault(px.CloudInitDrive, "ide3"),
		shutdownTimeout:  DefaultShutdownTimeout,
	}
	if px.ShutdownTimeout != nil {
		if px.ShutdownTimeout.Duration <= 0 {
			return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.shutdownTimeout %s must be positive", px.ShutdownTimeout.Duration))
		}
		s.shutdownTimeout = px.ShutdownTimeout.Duration
	}
	endpoint, err := apiBase(px.Endpoint)
	if err != nil {
		return nil, provider.NewTerminal(err)
	}
	s.endpoint = endpoint

	if len(px.Nodes) > 0 {
		s.allowed = make(map[string]bool, len(px.Nodes))
		for _, n := range px.Nodes {
			s.allowed[n] = true
		}
	}
	if s.lower < 100 || s.upper < s.lower {
		return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.vmIDRange %d-%d is not a range of VM IDs from 100 up", s.lower, s.upper))
	}

	switch {
	case px.Clone != nil && px.Netboot != nil, px.Clone == nil && px.Netboot == nil:
		return nil, provider.NewTerminal(errors.New("exactly one of spec.proxmox.clone and spec.proxmox.netboot must be set"))
	case px.Clone != nil:
		c := px.Clone
		s.clone = &cloneSettings{templateID: int(c.TemplateID), templateName: c.TemplateName, full: c.Full == nil || *c.Full}
		if len(c.NodeTemplates) > 0 {
			s.clone.nodeTemplates = map[string]int{}
			for _, nt := range c.NodeTemplates {
				s.clone.nodeTemplates[nt.Node] = int(nt.TemplateID)
			}
		}
		switch {
		case c.TemplateID != 0 && c.TemplateName != "":
			return nil, provider.NewTerminal(errors.New("spec.proxmox.clone.templateID and templateName are exclusive"))
		case c.TemplateID == 0 && c.TemplateName == "" && len(c.NodeTemplates) == 0:
			return nil, provider.NewTerminal(errors.New("spec.proxmox.clone needs templateID, templateName or nodeTemplates"))
		}
	default:
		nb, err := parseNetboot(px.Netboot, px.Storage)
		if err != nil {
			return nil, provider.NewTerminal(err)
		}
		s.netboot = nb
	}

	for i, nic := range px.NetworkInterfaces {
		if nic.Bridge == "" {
			return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.networkInterfaces[%d] has no bridge", i))
		}
		model := nic.Model
		if model == "" {
			model = "virtio"
		}
		v := model + ",bridge=" + nic.Bridge
		if nic.VLANTag != nil {
			v += ",tag=" + strconv.Itoa(int(*nic.VLANTag))
		}
		s.nics = append(s.nics, v)
	}

	if px.MemoryOverhead != nil {
		if px.MemoryOverhead.Sign() < 0 {
			return nil, provider.NewTerminal(errors.New("spec.proxmox.memoryOverhead must not be negative"))
		}
		s.overheadMiB = ceilDiv(px.MemoryOverhead.Value(), mib)
	}

	if err := s.parsePCIDevices(px.PCIDevices); err != nil {
		return nil, provider.NewTerminal(err)
	}

	for _, o := range px.ExtraOptions {
		if len(s.pci) > 0 && hostPCIOption.MatchString(o.Name) {
			return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.extraOptions sets %q, but spec.proxmox.pciDevices is set: the provider numbers the passed-through devices itself", o.Name))
		}
		if why, ok := reservedOptions[o.Name]; ok {
			return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.extraOptions may not set %q: %s", o.Name, why))
		}
		if o.Name == s.cloudInitDrive {
			return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.extraOptions sets %q, which carries the per-claim cloud-init drive (spec.proxmox.cloudInitDrive)", o.Name))
		}
		if i, ok := nicIndex(o.Name); ok && i < len(s.nics) {
			return nil, provider.NewTerminal(fmt.Errorf("spec.proxmox.extraOptions sets %q, which spec.proxmox.networkInterfaces already sets", o.Name))
		}
		s.extra = append(s.extra, o)
	}
	return s, nil
}

// maxHostPCI is how many hostpciN options a VM may have: qemu-server's
// $MAX_HOSTPCI_DEVICES (src/PVE/QemuServer/PCI.pm), hostpci0 to hostpci15.
const maxHostPCI = 16

var (
	hostPCIOption = regexp.MustCompile(`^hostpci[0-9]+$`)
	// configID is Proxmox's pve-configid format (pve-common
	// PVE/JSONSchema.pm $CONFIGID_RE), which a mapping's ID has.
	configID = regexp.MustCompile(`(?i)^[a-z][a-z0-9_-]+$`)
	hexID    = regexp.MustCompile(`^0x[0-9a-fA-F]{4}$`)
)

// parsePCIDevices checks spec.proxmox.pciDevices as the CRD's rules do (a
// NodeProvider written before them, or by hand into a test, is not
// trusted) and renders each entry's hostpci options in the order of
// qemu-server's pve-qm-hostpci format.
func (s *settings) parsePCIDevices(devices []v1alpha1.ProxmoxPCIDevice) error {
	if len(devices) == 0 {
		return nil
	}
	s.pci = make(map[corev1.ResourceName]pciDevice, len(devices))
	mappings := map[string]string{}
	for i, d := range devices {
		name := corev1.ResourceName(d.Resource)
		field := fmt.Sprintf("spec.proxmox.pciDevices[%d]", i)
		switch {
		case !strings.Contains(d.Resource, "/") || len(validation.IsQualifiedName(d.Resource)) > 0 || strings.Contains(d.Resource, "kubernetes.io/"):
			return fmt.Errorf("%s.resource %q is not an extended resource (a domain-prefixed name outside kubernetes.io, such as nvidia.com/gpu)", field, d.Resource)
		case !configID.MatchString(d.Mapping):
			return fmt.Errorf("%s.mapping %q is not a Proxmox mapping ID (a letter, then letters, digits, '-' and '_')", field, d.Mapping)
		case d.Driver != "" && d.Driver != "vfio" && d.Driver != "keep":
			return fmt.Errorf("%s.driver %q is neither vfio nor keep", field, d.Driver)
		}
		if _, dup := s.pci[name]; dup {
			return fmt.Errorf("%s names resource %s a second time", field, name)
		}
		if other, dup := mappings[d.Mapping]; dup {
			return fmt.Errorf("%s maps PCI mapping %s to %s, which already serves %s: its devices would be counted twice", field, d.Mapping, name, other)
		}
		mappings[d.Mapping] = d.Resource
		var opts strings.Builder
		flag := func(key string, v *bool) {
			switch {
			case v == nil:
			case *v:
				fmt.Fprintf(&opts, ",%s=1", key)
			default:
				fmt.Fprintf(&opts, ",%s=0", key)
			}
		}
		flag("rombar", d.ROMBar)
		flag("pcie", d.PCIe)
		flag("x-vga", d.XVGA)
		for _, id := range []struct{ key, field, value string }{
			{"vendor-id", "vendorID", d.VendorID}, {"device-id", "deviceID", d.DeviceID},
			{"sub-vendor-id", "subVendorID", d.SubVendorID}, {"sub-device-id", "subDeviceID", d.SubDeviceID},
		} {
			if id.value == "" {
				continue
			}
			if !hexID.MatchString(id.value) {
				return fmt.Errorf("%s.%s %q is not a PCI ID such as 0x10de", field, id.field, id.value)
			}
			fmt.Fprintf(&opts, ",%s=%s", id.key, id.value)
		}
		if d.Driver != "" {
			opts.WriteString(",driver=" + d.Driver)
		}
		s.pci[name] = pciDevice{resource: name, mapping: d.Mapping, options: opts.String()}
	}
	return nil
}

// nicIndex returns 3 for "net3".
func nicIndex(name string) (int, bool) {
	n, ok := strings.CutPrefix(name, "net")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil
}

// apiBase turns the endpoint into the API's base URL, which ends in
// /api2/json; "https://pve.example:8006" is accepted as well.
func apiBase(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("spec.proxmox.endpoint %q is not an http(s) URL", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/api2/json") {
		u.Path += "/api2/json"
	}
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

func parseNetboot(nb *v1alpha1.ProxmoxNetboot, storage string) (*netbootSettings, error) {
	if storage == "" {
		return nil, errors.New("spec.proxmox.storage must name the storage for the netboot VM's disk")
	}
	out := &netbootSettings{boot: nb.BootOrder, osType: nb.OSType}
	if out.boot == "" {
		out.boot = "net0"
	}
	// Proxmox's boot option is "order=net0;scsi0"; the bare order is accepted
	// here because it is what people write.
	if !strings.Contains(out.boot, "=") {
		out.boot = "order=" + out.boot
	}
	if out.osType == "" {
		out.osType = "l26"
	}
	size := nb.DiskSize
	if size == "" {
		size = "32G"
	}
	gib, err := diskGiB(size)
	if err != nil {
		return nil, err
	}
	// STORAGE:SIZE is Proxmox's syntax for "allocate a new disk of SIZE GiB".
	out.disk = fmt.Sprintf("%s:%d", storage, gib)
	return out, nil
}

// diskGiB converts a size such as 32G or 512M into whole GiB, rounding up,
// because a new disk is allocated in GiB.
func diskGiB(size string) (int64, error) {
	m := diskSizePattern.FindStringSubmatch(size)
	if m == nil {
		return 0, fmt.Errorf("spec.proxmox.netboot.diskSize %q is not a size such as 32G", size)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("spec.proxmox.netboot.diskSize %q is not a size such as 32G", size)
	}
	switch m[2] {
	case "K":
		return ceilDiv(n, 1<<20), nil
	case "M":
		return ceilDiv(n, 1<<10), nil
	case "T":
		if n > math.MaxInt64/1024 {
			return 0, fmt.Errorf("spec.proxmox.netboot.diskSize %q is too large", size)
		}
		return n * 1024, nil
	default: // G, or a bare number, which Proxmox reads as GiB too
		return n, nil
	}
}

// parseCredentials reads the credentials Secret: an API token (tokenID,
// tokenSecret) or a user and password, and an optional CA bundle. Errors name
// keys, never values.
func parseCredentials(data map[string][]byte) (*credentials, error) {
	c := &credentials{
		tokenID:     strings.TrimSpace(string(data[SecretKeyTokenID])),
		tokenSecret: strings.TrimSpace(string(data[SecretKeyTokenSecret])),
		username:    strings.TrimSpace(string(data[SecretKeyUsername])),
		password:    string(data[SecretKeyPassword]),
	}
	switch {
	case c.tokenID != "" || c.tokenSecret != "":
		if c.tokenID == "" || c.tokenSecret == "" {
			return nil, provider.NewTerminal(fmt.Errorf("the credentials Secret has only one of %s and %s; an API token needs both", SecretKeyTokenID, SecretKeyTokenSecret))
		}
	case c.username != "" || c.password != "":
		if c.username == "" || c.password == "" {
			return nil, provider.NewTerminal(fmt.Errorf("the credentials Secret has only one of %s and %s; both are needed", SecretKeyUsername, SecretKeyPassword))
		}
	default:
		return nil, provider.NewTerminal(fmt.Errorf("the credentials Secret needs %s and %s (an API token), or %s and %s",
			SecretKeyTokenID, SecretKeyTokenSecret, SecretKeyUsername, SecretKeyPassword))
	}
	if pem, ok := data[SecretKeyCA]; ok && len(pem) > 0 {
		c.roots = x509.NewCertPool()
		if !c.roots.AppendCertsFromPEM(pem) {
			return nil, provider.NewTerminal(fmt.Errorf("%s in the credentials Secret holds no PEM certificate", SecretKeyCA))
		}
	}
	return c, nil
}

// ceilDiv divides rounding up, without the overflow of (a+b-1)/b near the
// int64 bound.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
