package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProviderType names an implementation in pkg/provider.
// +kubebuilder:validation:Enum=proxmox;cloudscale;simulated;grpc;clusterapi;redfish
type ProviderType string

const (
	ProviderTypeProxmox    ProviderType = "proxmox"
	ProviderTypeCloudscale ProviderType = "cloudscale"
	ProviderTypeSimulated  ProviderType = "simulated"
	// ProviderTypeGRPC is a provider plugin outside claimscale, reached
	// over the claimscale.provider.v1 gRPC protocol.
	ProviderTypeGRPC ProviderType = "grpc"
	// ProviderTypeClusterAPI makes Cluster API Machines, so any CAPI
	// infrastructure provider (CAPMOX, CAPCS, vSphere, …) makes the
	// machines and CAPI's bootstrap provider joins them.
	ProviderTypeClusterAPI ProviderType = "clusterapi"
	// ProviderTypeRedfish powers a fixed inventory of servers on and off
	// through their BMCs.
	ProviderTypeRedfish ProviderType = "redfish"
)

// NodeProviderSpec says where machines come from: which kind of
// infrastructure, its credentials, and its settings. Exactly the settings
// block that matches type may be set.
//
// +kubebuilder:validation:XValidation:rule="self.type == 'proxmox' ? has(self.proxmox) : !has(self.proxmox)",message="spec.proxmox must be set when type is proxmox, and only then"
// +kubebuilder:validation:XValidation:rule="self.type == 'cloudscale' ? has(self.cloudscale) : !has(self.cloudscale)",message="spec.cloudscale must be set when type is cloudscale, and only then"
// +kubebuilder:validation:XValidation:rule="self.type == 'simulated' || !has(self.simulated)",message="spec.simulated may be set only when type is simulated"
// +kubebuilder:validation:XValidation:rule="self.type == 'grpc' ? has(self.grpc) : !has(self.grpc)",message="spec.grpc must be set when type is grpc, and only then"
// +kubebuilder:validation:XValidation:rule="self.type == 'clusterapi' ? has(self.clusterAPI) : !has(self.clusterAPI)",message="spec.clusterAPI must be set when type is clusterapi, and only then"
// +kubebuilder:validation:XValidation:rule="self.type == 'redfish' ? has(self.redfish) : !has(self.redfish)",message="spec.redfish must be set when type is redfish, and only then"
// +kubebuilder:validation:XValidation:rule="self.type == 'simulated' || self.type == 'grpc' || self.type == 'clusterapi' || self.type == 'redfish' || has(self.credentialsSecretRef)",message="spec.credentialsSecretRef is required for the proxmox and cloudscale types"
// +kubebuilder:validation:XValidation:rule="self.type != 'redfish' || !has(self.redfish) || has(self.credentialsSecretRef) || self.redfish.servers.all(s, has(s.credentialsSecretRef))",message="every redfish server needs credentials: its own credentialsSecretRef, or spec.credentialsSecretRef for all"
// +kubebuilder:validation:XValidation:rule="self.type != 'grpc' || !has(self.grpc) || self.grpc.endpoint.startsWith('unix://') || has(self.credentialsSecretRef)",message="spec.credentialsSecretRef (the client certificate, tls.crt and tls.key) is required for a grpc endpoint over TCP: plugins are reached over mutual TLS; only a unix:// socket goes without"
// +kubebuilder:validation:XValidation:rule="self.type != 'grpc' || !has(self.grpc) || !self.grpc.endpoint.startsWith('unix://') || !has(self.credentialsSecretRef)",message="spec.credentialsSecretRef must not be set for a unix:// grpc endpoint: a Unix socket carries no TLS"
type NodeProviderSpec struct {
	// Type of infrastructure: proxmox (Proxmox VE), cloudscale
	// (cloudscale.ch), clusterapi (Cluster API Machines, so any CAPI
	// infrastructure provider; see docs/clusterapi.md), grpc (a provider
	// plugin out of process; see docs/provider-plugins.md), redfish (bare
	// metal servers powered on and off through their BMCs; see
	// docs/baremetal.md), or simulated (Nodes run by kwok, for demos and
	// tests).
	// +required
	Type ProviderType `json:"type"`

	// CredentialsSecretRef names the Secret holding the provider's
	// credentials (see each type's documentation for the keys). Its values
	// never appear in logs, events or conditions. For type grpc it is the
	// client certificate (a kubernetes.io/tls Secret: tls.crt, tls.key, and
	// ca.crt unless spec.grpc.caSecretRef names the CA); a change to it is
	// picked up at the next call.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// Proxmox settings, for type proxmox.
	// +optional
	Proxmox *ProxmoxSettings `json:"proxmox,omitempty"`

	// Cloudscale settings, for type cloudscale. Flavors have no price in
	// the cloudscale API: cheapest-first needs a price on each of a pool's
	// shapes; a pool that prices none ranks its flavors by size instead.
	// +optional
	Cloudscale *CloudscaleSettings `json:"cloudscale,omitempty"`

	// Simulated settings, for type simulated.
	// +optional
	Simulated *SimulatedSettings `json:"simulated,omitempty"`

	// GRPC settings, for type grpc: where the provider plugin listens.
	// +optional
	GRPC *GRPCSettings `json:"grpc,omitempty"`

	// ClusterAPI settings, for type clusterapi: the CAPI Cluster the
	// Machines belong to and the templates each shape is made from. For
	// this type, credentialsSecretRef is optional: a kubeconfig (key
	// "kubeconfig", else "value" as in CAPI's <cluster>-kubeconfig
	// Secrets) for the management cluster that holds the Machines, when
	// that is not the cluster claimscale runs in.
	// +optional
	ClusterAPI *ClusterAPISettings `json:"clusterAPI,omitempty"`

	// Redfish settings, for type redfish: servers powered on and off
	// through their BMCs (see docs/baremetal.md). For this type,
	// credentialsSecretRef (keys username and password, optionally ca.crt)
	// is the BMCs' shared account, for the servers that name none.
	// +optional
	Redfish *RedfishSettings `json:"redfish,omitempty"`
}

// ClusterAPISettings say which CAPI Cluster the machines join and what each
// shape of a pool is made from. A Machine is made per claim, its bootstrap
// config and infrastructure machine cloned from the shape's templates,
// owned by no MachineSet (so nothing scales it back).
type ClusterAPISettings struct {
	// Cluster is the CAPI Cluster (in the management cluster) the Machines
	// belong to; they are made in its namespace.
	Cluster ClusterAPIClusterReference `json:"cluster"`
	// Shapes map shape names of the pools using this provider to what
	// their Machines are made from. A pool's fixed shape whose name is not
	// here is not offered.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	Shapes []ClusterAPIShape `json:"shapes"`
}

// ClusterAPIClusterReference names a CAPI Cluster.
type ClusterAPIClusterReference struct {
	// Namespace of the Cluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="clusterAPI.cluster.namespace must be a namespace name"
	Namespace string `json:"namespace"`
	// Name of the Cluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="clusterAPI.cluster.name must be a DNS label, as CAPI requires of a Cluster's name"
	Name string `json:"name"`
}

// ClusterAPIShape is what one shape's Machines are made from: templates
// named directly, or those of a MachineDeployment of the Cluster (which
// claimscale reads but never scales).
// +kubebuilder:validation:XValidation:rule="has(self.machineDeployment) != has(self.infrastructureTemplate)",message="set exactly one of machineDeployment or infrastructureTemplate"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrapConfigTemplate) || has(self.infrastructureTemplate)",message="bootstrapConfigTemplate goes with infrastructureTemplate; a machineDeployment brings its own"
// +kubebuilder:validation:XValidation:rule="!has(self.version) || has(self.infrastructureTemplate)",message="version goes with infrastructureTemplate; a machineDeployment brings its own"
type ClusterAPIShape struct {
	// Name of the shape in the pools' spec.shapes.fixed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`
	Name string `json:"name"`
	// InfrastructureTemplate is the infrastructure machine template (a
	// ProxmoxMachineTemplate, a CloudscaleMachineTemplate, …) in the
	// Cluster's namespace. Its status.capacity, else its
	// capacity.cluster-autoscaler.kubernetes.io/* annotations, give the
	// shape's size.
	// +optional
	InfrastructureTemplate *ClusterAPITemplateReference `json:"infrastructureTemplate,omitempty"`
	// BootstrapConfigTemplate is the bootstrap config template (a
	// KubeadmConfigTemplate, …) in the Cluster's namespace. Unset, the
	// Machine gets no bootstrap config: the infrastructure must join the
	// node by itself.
	// +optional
	BootstrapConfigTemplate *ClusterAPITemplateReference `json:"bootstrapConfigTemplate,omitempty"`
	// Version is the Kubernetes version of the Machines (spec.version),
	// for templates named directly.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$`
	Version string `json:"version,omitempty"`
	// MachineDeployment names a MachineDeployment of the Cluster, in its
	// namespace, to take the templates, version and failure domain from.
	// A change to its templates drifts the claims made from the old ones.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="clusterAPI.shapes.machineDeployment must be an object name"
	MachineDeployment string `json:"machineDeployment,omitempty"`
}

// ClusterAPITemplateReference names a template object in the Cluster's
// namespace.
type ClusterAPITemplateReference struct {
	// APIGroup of the template, e.g. infrastructure.cluster.x-k8s.io or
	// bootstrap.cluster.x-k8s.io.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIGroup string `json:"apiGroup"`
	// Kind of the template; it must end in Template (the cloned object's
	// kind is the same without it).
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.endsWith('Template')",message="a template kind ends in Template"
	Kind string `json:"kind"`
	// Name of the template.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// GRPCSettings say how to reach a provider plugin that serves the
// claimscale.provider.v1 protocol (pkg/provider/plugin/pluginpb).
type GRPCSettings struct {
	// Endpoint is host:port, reached over mutual TLS 1.3 with the client
	// certificate of credentialsSecretRef, or unix:///path/to.sock for a
	// plugin in a sidecar container, reached without TLS.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^(unix:///[^\s]+|[^\s/:]+:[0-9]{1,5}|\[[0-9a-fA-F:.]+\]:[0-9]{1,5})$`
	Endpoint string `json:"endpoint"`
	// CASecretRef names the Secret key holding the CA bundle (PEM) the
	// plugin's server certificate must chain to. Unset: ca.crt of the
	// credentials Secret. It is read at every new connection, so a rotated
	// CA takes effect without a restart.
	// +optional
	CASecretRef *SecretKeyReference `json:"caSecretRef,omitempty"`
	// ServerName is the name the plugin's certificate must carry; unset,
	// the endpoint's host.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
	// CallTimeout bounds one call to the plugin, its retries included.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('10m')",message="grpc.callTimeout must be more than 0s and at most 10m"
	CallTimeout *metav1.Duration `json:"callTimeout,omitempty"`
	// Retries of a call the plugin answered UNAVAILABLE (or could not be
	// reached for), with exponential backoff, within callTimeout. Every
	// call is safe to retry: Create is idempotent by claim, Delete of a
	// machine already gone is success.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4
	Retries *int32 `json:"retries,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
}

// SecretKeyReference names one key of a Secret in a namespace.
type SecretKeyReference struct {
	SecretReference `json:",inline"`
	// Key within the Secret's data.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ProxmoxSettings configure how VMs are made on a Proxmox VE cluster.
// A VM is made either by cloning a template or by netbooting a blank VM.
//
// +kubebuilder:validation:XValidation:rule="has(self.clone) != has(self.netboot)",message="exactly one of clone or netboot must be set"
type ProxmoxSettings struct {
	// Endpoint is the Proxmox VE API URL, e.g. https://pve.example:8006/api2/json.
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint"`

	// InsecureSkipTLSVerify disables verification of the API's certificate.
	// Prefer a CA bundle in the credentials Secret (key ca.crt).
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`

	// Nodes is the allow-list of Proxmox nodes VMs may be placed on. Empty
	// means every online node.
	// +optional
	// +listType=set
	Nodes []string `json:"nodes,omitempty"`

	// VMIDRange is the range of VM IDs claimscale may allocate from.
	VMIDRange VMIDRange `json:"vmIDRange"`

	// Clone makes each VM as a clone of a template VM.
	// +optional
	Clone *ProxmoxClone `json:"clone,omitempty"`

	// Netboot makes each VM blank and boots it from the network.
	// +optional
	Netboot *ProxmoxNetboot `json:"netboot,omitempty"`

	// Storage is the storage for the VM's disks (clone target or new disk).
	// +optional
	Storage string `json:"storage,omitempty"`

	// NetworkInterfaces of each VM, net0 first.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	NetworkInterfaces []ProxmoxNetworkInterface `json:"networkInterfaces,omitempty"`

	// CICustom is passed as the VM's cicustom option, e.g.
	// "user=local:snippets/join.yaml": one snippet shared by all VMs, used
	// when the pool renders no per-claim user data.
	// +optional
	CICustom string `json:"cicustom,omitempty"`

	// CloudInitStorage is the storage (with content type iso) the per-claim
	// cloud-init drive is uploaded to, when the pool renders user data: an
	// ISO with the volume label cidata, attached as a CD-ROM and deleted
	// with the VM. Defaults to local.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CloudInitStorage string `json:"cloudInitStorage,omitempty"`

	// CloudInitDrive is the VM option the cloud-init ISO is attached as.
	// Defaults to ide3 (templates often hold their own cloud-init drive in
	// ide2).
	// +optional
	// +kubebuilder:validation:Pattern=`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30))$`
	CloudInitDrive string `json:"cloudInitDrive,omitempty"`

	// Pool is the Proxmox resource pool every VM is added to, so that the
	// API token's privileges can be granted on the pool alone.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Pool string `json:"pool,omitempty"`

	// ShutdownTimeout is how long a VM put to sleep is given to shut down
	// cleanly (ACPI) before it is stopped hard. Defaults to 2m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="proxmox.shutdownTimeout must be between 1s and 1h"
	ShutdownTimeout *metav1.Duration `json:"shutdownTimeout,omitempty"`

	// MemoryOverhead is added to each VM's memory on top of the shape's, for
	// what the guest kernel keeps to itself.
	// +optional
	MemoryOverhead *resource.Quantity `json:"memoryOverhead,omitempty"`

	// ExtraOptions are passed through to the VM's configuration as
	// name/value pairs (as `qm set --name value` would).
	// +optional
	// +listType=map
	// +listMapKey=name
	ExtraOptions []NameValue `json:"extraOptions,omitempty"`

	// PCIDevices pass host PCI devices (GPUs) through to the VMs by the
	// Proxmox cluster's PCI resource mappings (Datacenter > Resource
	// Mappings, /cluster/mapping/pci): a VM whose shape has N of an
	// extended resource listed here gets N devices of its mapping, as
	// hostpci0, hostpci1, … with mapping=<mapping> and the options set
	// here, and is placed only on a Proxmox node where that mapping has N
	// devices no running VM uses. A pool's shape with an extended resource
	// not listed here is refused, and so is a hostpciN in extraOptions
	// beside this list (the provider numbers the devices itself).
	// +optional
	// +listType=map
	// +listMapKey=resource
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.mapping == a.mapping))",message="pciDevices: a mapping may serve one resource only"
	PCIDevices []ProxmoxPCIDevice `json:"pciDevices,omitempty"`
}

// ProxmoxPCIDevice maps an extended resource of the pools' shapes to a
// Proxmox cluster PCI resource mapping, with the hostpci options
// (qemu-server's pve-qm-hostpci format) each of its devices gets.
type ProxmoxPCIDevice struct {
	// Resource is the extended resource a shape counts these devices in,
	// as the device plugin on the node advertises them (nvidia.com/gpu).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.contains('/') && !self.contains('kubernetes.io/') && !self.startsWith('requests.') && !format.qualifiedName().validate(self).hasValue()",message="pciDevices.resource must be an extended resource: a domain-prefixed name (example.com/device) outside kubernetes.io"
	Resource string `json:"resource"`
	// Mapping is the ID of the cluster PCI resource mapping (a Proxmox
	// configuration ID: a letter, then letters, digits, '-' and '_').
	// Each of its entries for a Proxmox node is one device of that node.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-zA-Z][a-zA-Z0-9_-]+$`
	Mapping string `json:"mapping"`
	// PCIe puts each device on the PCI Express bus (hostpci pcie=1);
	// Proxmox refuses to start such a VM unless its machine type is q35
	// (the template's, or machine in extraOptions).
	// +optional
	PCIe *bool `json:"pcie,omitempty"`
	// ROMBar says whether the device's ROM is visible in the guest's
	// memory map (hostpci rombar; Proxmox's default is true).
	// +optional
	ROMBar *bool `json:"rombar,omitempty"`
	// XVGA enables vfio-vga support, for a GPU that is the guest's primary
	// display (hostpci x-vga=1).
	// +optional
	XVGA *bool `json:"xVGA,omitempty"`
	// Driver is vfio (Proxmox's default: the device is reset and bound to
	// vfio-pci) or keep (neither reset nor rebound, for devices already
	// bound to the right driver). Proxmox VE 9.1 (qemu-server 9.0.25) and
	// later.
	// +optional
	// +kubebuilder:validation:Enum=vfio;keep
	Driver string `json:"driver,omitempty"`
	// VendorID overrides the PCI vendor ID the guest sees (0x10de).
	// +optional
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{4}$`
	VendorID string `json:"vendorID,omitempty"`
	// DeviceID overrides the PCI device ID the guest sees.
	// +optional
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{4}$`
	DeviceID string `json:"deviceID,omitempty"`
	// SubVendorID overrides the PCI subsystem vendor ID the guest sees.
	// +optional
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{4}$`
	SubVendorID string `json:"subVendorID,omitempty"`
	// SubDeviceID overrides the PCI subsystem device ID the guest sees.
	// +optional
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{4}$`
	SubDeviceID string `json:"subDeviceID,omitempty"`
}

// VMIDRange is an inclusive range of Proxmox VM IDs.
// +kubebuilder:validation:XValidation:rule="self.lower < self.upper",message="vmIDRange.lower must be less than vmIDRange.upper"
type VMIDRange struct {
	// Lower is the first VM ID claimscale may use.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	Lower int32 `json:"lower"`
	// Upper is the last VM ID claimscale may use.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	Upper int32 `json:"upper"`
}

// ProxmoxClone clones each VM from a template: one template for the
// whole cluster (templateID, on shared storage), a template per Proxmox
// node (nodeTemplates, for local storage), or the template of a given name
// on the node the VM goes to (templateName).
//
// +kubebuilder:validation:XValidation:rule="has(self.templateID) || has(self.templateName) || (has(self.nodeTemplates) && size(self.nodeTemplates) > 0)",message="one of templateID, templateName or nodeTemplates must be set"
// +kubebuilder:validation:XValidation:rule="!(has(self.templateID) && has(self.templateName))",message="templateID and templateName are exclusive"
type ProxmoxClone struct {
	// TemplateID is the VM ID of the template to clone, for nodes that
	// nodeTemplates does not name.
	// +optional
	// +kubebuilder:validation:Minimum=100
	TemplateID int32 `json:"templateID,omitempty"`
	// TemplateName is the name of the template to clone, looked up on the
	// Proxmox node the VM goes to; only nodes with such a template are used.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	TemplateName string `json:"templateName,omitempty"`
	// NodeTemplates names the template of each Proxmox node, for clusters
	// whose templates sit on local storage: a VM is cloned from the
	// template of the node it goes to, and only these nodes (or every node,
	// when templateID is set too) are used.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=64
	NodeTemplates []ProxmoxNodeTemplate `json:"nodeTemplates,omitempty"`
	// Full makes a full clone; false makes a linked clone.
	// +optional
	// +kubebuilder:default=true
	Full *bool `json:"full,omitempty"`
}

// ProxmoxNodeTemplate is the template of one Proxmox node.
type ProxmoxNodeTemplate struct {
	// Node is the Proxmox node's name.
	// +kubebuilder:validation:MinLength=1
	Node string `json:"node"`
	// TemplateID is the VM ID of the template on that node.
	// +kubebuilder:validation:Minimum=100
	TemplateID int32 `json:"templateID"`
}

// ProxmoxNetboot makes blank VMs that boot from the network.
type ProxmoxNetboot struct {
	// BootOrder is the VM's boot order.
	// +optional
	// +kubebuilder:default="net0"
	BootOrder string `json:"bootOrder,omitempty"`
	// DiskSize of the blank VM's first disk, e.g. 32G.
	// +optional
	// +kubebuilder:default="32G"
	// +kubebuilder:validation:Pattern=`^[0-9]+[KMGT]?$`
	DiskSize string `json:"diskSize,omitempty"`
	// OSType is the Proxmox ostype, l26 for Linux.
	// +optional
	// +kubebuilder:default="l26"
	OSType string `json:"osType,omitempty"`
}

// ProxmoxNetworkInterface is one virtual NIC.
type ProxmoxNetworkInterface struct {
	// Model of the NIC.
	// +optional
	// +kubebuilder:default=virtio
	// +kubebuilder:validation:Enum=virtio;e1000;rtl8139;vmxnet3
	Model string `json:"model,omitempty"`
	// Bridge the NIC is attached to, e.g. vmbr0.
	// +kubebuilder:validation:MinLength=1
	Bridge string `json:"bridge"`
	// VLANTag of the NIC, if any.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4094
	VLANTag *int32 `json:"vlanTag,omitempty"`
}

// NameValue is a name/value pair.
type NameValue struct {
	// Name of the option.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Value of the option.
	Value string `json:"value"`
}

// CloudscaleSettings configure how servers are made on cloudscale.ch.
//
// Flavors have no price in the cloudscale API: cheapest-first needs a
// price on each of the pool's shapes (spec.shapes.fixed[].price). A pool
// that prices none of its flavors ranks them by size instead (vCPUs plus
// GiB of memory / 4, see docs/cloudscale.md); one that prices some but not
// all is refused.
// +kubebuilder:validation:XValidation:rule="has(self.zone) || has(self.zones)",message="set zones (or, for a single zone, zone)"
// +kubebuilder:validation:XValidation:rule="!(has(self.zone) && has(self.zones))",message="set zones or zone, not both: zone is the older form of a single-entry zones"
type CloudscaleSettings struct {
	// Zone slug, e.g. lpg1 or rma1: the single zone of NodeProviders made
	// before zones existed, the same as zones with one entry. Prefer zones.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Zone string `json:"zone,omitempty"`
	// Zones servers are made in (cloudscale has lpg1 and rma1). Provisioning
	// considers each as a place of its own: pods with zone spread or zone
	// affinity get nodes in the right zone, and a zone out of capacity for a
	// flavor is backed off while the others take its pods. Nodes carry
	// topology.kubernetes.io/zone.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Zones []CloudscaleZone `json:"zones,omitempty"`
	// Image slug, or custom:<slug> for a custom image.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// VolumeSizeGB of the root volume.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=10
	VolumeSizeGB int32 `json:"volumeSizeGB,omitempty"`
	// PublicNetwork attaches a public interface.
	// +optional
	// +kubebuilder:default=true
	PublicNetwork *bool `json:"publicNetwork,omitempty"`
	// Interfaces on private networks, by network or subnet UUID.
	// +optional
	Interfaces []CloudscaleInterface `json:"interfaces,omitempty"`
	// ServerGroups (UUIDs) the servers join, e.g. for anti-affinity.
	// +optional
	// +listType=set
	ServerGroups []string `json:"serverGroups,omitempty"`
	// SSHKeys (public keys) installed on each server.
	// +optional
	SSHKeys []string `json:"sshKeys,omitempty"`
	// UserDataSecretRef names the Secret key whose value is passed unchanged
	// as user data: cloud-init, Talos machine config or Ignition.
	// +optional
	UserDataSecretRef *SecretKeyReference `json:"userDataSecretRef,omitempty"`
	// Tags added to every server besides claimscale's own.
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// ManagedServerGroups, when set, has claimscale create and manage
	// anti-affinity server groups per pool and zone: each server joins one
	// (besides any serverGroups listed), a new group is opened when the
	// others are full, and an empty group is deleted with its last server.
	// +optional
	ManagedServerGroups *CloudscaleManagedServerGroups `json:"managedServerGroups,omitempty"`
	// ErrorPatterns classify error answers of the API that its status code
	// alone does not: they are tried before the built-in table (see
	// docs/cloudscale.md), first match wins. Only an answer classified
	// InsufficientCapacity backs the pool's flavor off in that zone; an
	// answer nothing matches is shown verbatim on the claim.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ErrorPatterns []CloudscaleErrorPattern `json:"errorPatterns,omitempty"`
}

// CloudscaleZone is one zone servers are made in, with the settings that
// differ between zones (private networks and server groups are zonal).
type CloudscaleZone struct {
	// Name is the zone slug, e.g. lpg1 or rma1.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Interfaces on private networks in this zone, replacing
	// spec.cloudscale.interfaces for servers made here.
	// +optional
	Interfaces []CloudscaleInterface `json:"interfaces,omitempty"`
	// ServerGroups (UUIDs) in this zone the servers made here join,
	// replacing spec.cloudscale.serverGroups.
	// +optional
	// +listType=set
	ServerGroups []string `json:"serverGroups,omitempty"`
}

// CloudscaleManagedServerGroups configure the anti-affinity server groups
// claimscale makes per pool and zone.
type CloudscaleManagedServerGroups struct {
	// MaxServersPerGroup is how many servers claimscale puts in one group
	// before it opens another. cloudscale limits how many servers an
	// anti-affinity group holds (one per physical host) but does not
	// publish the number, so the default is an assumption: set what
	// cloudscale tells you.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	MaxServersPerGroup int32 `json:"maxServersPerGroup,omitempty"`
}

// CloudscaleErrorKind is what an error answer means for claimscale.
// +kubebuilder:validation:Enum=InsufficientCapacity;Retryable;Terminal
type CloudscaleErrorKind string

const (
	// CloudscaleErrorInsufficientCapacity: out of capacity or quota for the
	// flavor in the zone; the claim is removed and the pool's flavor backed
	// off in that zone.
	CloudscaleErrorInsufficientCapacity CloudscaleErrorKind = "InsufficientCapacity"
	// CloudscaleErrorRetryable: worth another try soon.
	CloudscaleErrorRetryable CloudscaleErrorKind = "Retryable"
	// CloudscaleErrorTerminal: a person must change something.
	CloudscaleErrorTerminal CloudscaleErrorKind = "Terminal"
)

// CloudscaleErrorPattern classifies error answers whose message matches.
type CloudscaleErrorPattern struct {
	// Pattern is a regular expression (RE2 syntax), matched without regard
	// to case against the answer's message: its detail, or each field's
	// messages as "field: message".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Pattern string `json:"pattern"`
	// Status code the pattern applies to; unset for any error status.
	// +optional
	// +kubebuilder:validation:Minimum=400
	// +kubebuilder:validation:Maximum=599
	Status int32 `json:"status,omitempty"`
	// Kind the matching answers are.
	Kind CloudscaleErrorKind `json:"kind"`
}

// ZoneNames lists the zones servers are made in: zones, or the older
// single zone.
func (s *CloudscaleSettings) ZoneNames() []string {
	if len(s.Zones) == 0 {
		if s.Zone == "" {
			return nil
		}
		return []string{s.Zone}
	}
	names := make([]string, 0, len(s.Zones))
	for _, z := range s.Zones {
		names = append(names, z.Name)
	}
	return names
}

// CloudscaleInterface attaches a server to a private network.
// +kubebuilder:validation:XValidation:rule="has(self.network) || has(self.subnet)",message="an interface needs a network or a subnet"
type CloudscaleInterface struct {
	// Network UUID.
	// +optional
	Network string `json:"network,omitempty"`
	// Subnet UUID.
	// +optional
	Subnet string `json:"subnet,omitempty"`
}

// SimulatedSettings configure the simulated provider, which registers a Node
// object (run by kwok) for every machine after a boot delay.
type SimulatedSettings struct {
	// BootDelay between Create and the Node registering.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="simulated.bootDelay must be a duration of at most 2562047h"
	BootDelay *metav1.Duration `json:"bootDelay,omitempty"`
	// StartDelay between starting a sleeping machine and its Node
	// registering again; shorter than BootDelay, as starting a stopped
	// machine is quicker than making one.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="simulated.startDelay must be a duration of at most 2562047h"
	StartDelay *metav1.Duration `json:"startDelay,omitempty"`
	// CreateFailurePercent of Create calls fail with a retryable error.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	CreateFailurePercent int32 `json:"createFailurePercent,omitempty"`
	// NeverRegisterPercent of machines never register a Node.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	NeverRegisterPercent int32 `json:"neverRegisterPercent,omitempty"`
	// Zones the simulated machines are spread over; a machine's zone label
	// is chosen from its claim's requirements, else the first zone. Each is
	// a label value (topology.kubernetes.io/zone).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.all(z, z != '' && !format.labelValue().validate(z).hasValue())",message="simulated.zones: every zone must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	Zones []string `json:"zones,omitempty"`
}

// NodeProviderStatus is the observed state of a NodeProvider.
type NodeProviderStatus struct {
	// Conditions: Ready says the settings and credentials were read and the
	// provider answered.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeProvider says where machines come from. One provider serves many pools.
// Its name is at most 63 characters: it is the value of the
// claimscale.io/nodeprovider label on every node and claim it makes.
//
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name: a NodeProvider's name must be at most 63 characters, as it is a label value on its nodes and claims"
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=np
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeProviderSpec   `json:"spec"`
	Status NodeProviderStatus `json:"status,omitempty"`
}

// NodeProviderList is a list of NodeProviders.
//
// +kubebuilder:object:root=true
type NodeProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeProvider `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodeProvider{}, &NodeProviderList{})
}
