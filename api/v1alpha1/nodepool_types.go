package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodePoolSpec says what nodes may exist: where they come from, what they
// look like, which machine shapes are allowed, how many, and when they may be
// taken away again.
//
// +kubebuilder:validation:XValidation:rule="!has(self.limits) || !has(self.limits.nodes) || self.minNodes <= self.limits.nodes",message="minNodes must not exceed limits.nodes"
type NodePoolSpec struct {
	// ProviderRef names the NodeProvider that makes this pool's machines.
	ProviderRef ProviderReference `json:"providerRef"`

	// Template of every node in the pool.
	// +optional
	// +kubebuilder:default={}
	Template NodeTemplate `json:"template,omitempty"`

	// Shapes are the machine sizes the pool may use: a fixed list, or a
	// flexible CPU/memory range for providers that size VMs freely.
	Shapes Shapes `json:"shapes"`

	// Limits are the most the pool may hold, counting nodes that are still
	// booting. Unset means unlimited.
	// +optional
	Limits *Limits `json:"limits,omitempty"`

	// MinNodes is warm capacity: nodes kept even when idle.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	MinNodes int32 `json:"minNodes,omitempty"`

	// Weight orders pools: a pending pod goes to the highest-weight pool
	// that admits it.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`

	// Disruption says when nodes may be removed voluntarily.
	// +optional
	// +kubebuilder:default={}
	Disruption Disruption `json:"disruption,omitempty"`

	// RegistrationTimeout is how long a machine may take to register as a
	// Node before it is deleted and its claim with it.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	RegistrationTimeout *metav1.Duration `json:"registrationTimeout,omitempty"`
}

// ProviderReference names a NodeProvider.
type ProviderReference struct {
	// Name of the NodeProvider.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NodeTemplate is what every node of a pool carries.
type NodeTemplate struct {
	// Labels on every node of the pool.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('claimscale.io/'))",message="labels in the claimscale.io/ domain are reserved"
	Labels map[string]string `json:"labels,omitempty"`

	// Taints on every node of the pool.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	Taints []corev1.Taint `json:"taints,omitempty"`

	// StartupTaints are expected on a new node until something (a CNI, a
	// driver installer) removes them; the node is Initialized only once they
	// are gone. They do not keep pending pods from being placed on the pool.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	StartupTaints []corev1.Taint `json:"startupTaints,omitempty"`

	// Kubelet settings the nodes are started with, needed to know their
	// allocatable resources before they exist.
	// +optional
	// +kubebuilder:default={}
	Kubelet KubeletConfiguration `json:"kubelet,omitempty"`

	// Bootstrap makes each machine join by itself: claimscale renders its
	// user data (a join command with a bootstrap token of its own) and the
	// provider delivers it. Unset: the provider's own user data, if any.
	// +optional
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
}

// JoinMethod is how a machine joins the cluster.
// +kubebuilder:validation:Enum=kubeadm;k3s;custom
type JoinMethod string

const (
	// JoinKubeadm: kubeadm join with a per-claim bootstrap token.
	JoinKubeadm JoinMethod = "kubeadm"
	// JoinK3s: a k3s agent with a per-claim bootstrap token (k3s supports
	// kubeadm-style bootstrap token Secrets for agents).
	JoinK3s JoinMethod = "k3s"
	// JoinCustom: only the referenced template, which decides what to do
	// with the token.
	JoinCustom JoinMethod = "custom"
)

// Bootstrap says how a pool's machines join the cluster.
//
// +kubebuilder:validation:XValidation:rule="self.method != 'custom' || has(self.userDataTemplateRef)",message="method custom needs a userDataTemplateRef"
type Bootstrap struct {
	// Method of joining: kubeadm and k3s have built-in user-data templates;
	// custom needs userDataTemplateRef.
	Method JoinMethod `json:"method"`

	// UserDataTemplateRef names a ConfigMap or Secret key, in the
	// controller's namespace, holding a Go text/template that renders the
	// user data. Unset: the method's built-in template.
	// +optional
	UserDataTemplateRef *KeyReference `json:"userDataTemplateRef,omitempty"`

	// APIServerEndpoint (host:port) the machines join. Unset: the server of
	// kube-public/cluster-info, else the controller's
	// --bootstrap-api-server-endpoint flag.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[^\s/]+:[0-9]{1,5}$`
	APIServerEndpoint string `json:"apiServerEndpoint,omitempty"`

	// SharedTokenRef names a Secret key, in the controller's namespace,
	// holding a join token every machine of the pool shares (a k3s agent
	// token, for k3s versions without bootstrap-token support). When set,
	// no per-claim token is made: a leaked machine image then lets anything
	// join until the token is rotated by hand.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.kind == 'Secret'",message="sharedTokenRef must name a Secret"
	SharedTokenRef *KeyReference `json:"sharedTokenRef,omitempty"`
}

// KeyReference names one key of a ConfigMap or Secret in the controller's
// namespace.
type KeyReference struct {
	// Kind of the object: ConfigMap or Secret.
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key within the object's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// KubeletConfiguration is the part of the kubelet's configuration that decides
// a node's allocatable resources.
type KubeletConfiguration struct {
	// MaxPods per node.
	// +optional
	// +kubebuilder:default=110
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxPods *int32 `json:"maxPods,omitempty"`
	// KubeReserved resources (cpu, memory, ephemeral-storage).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])",message="kubeReserved takes cpu, memory, ephemeral-storage and pid"
	KubeReserved corev1.ResourceList `json:"kubeReserved,omitempty"`
	// SystemReserved resources (cpu, memory, ephemeral-storage).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])",message="systemReserved takes cpu, memory, ephemeral-storage and pid"
	SystemReserved corev1.ResourceList `json:"systemReserved,omitempty"`
	// EvictionHard thresholds, e.g. memory.available: 100Mi,
	// nodefs.available: 10%.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",message="evictionHard takes memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree and pid.available"
	// +kubebuilder:validation:MaxProperties=6
	EvictionHard map[string]EvictionThreshold `json:"evictionHard,omitempty"`
}

// EvictionThreshold is a quantity (100Mi) or a percentage (10%).
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?%|[0-9]+(\.[0-9]+)?([KMGTPE]i?)?)$`
// +kubebuilder:validation:MaxLength=32
type EvictionThreshold string

// Shapes are the machine sizes a pool may use.
// +kubebuilder:validation:XValidation:rule="has(self.fixed) != has(self.flexible)",message="exactly one of shapes.fixed or shapes.flexible must be set"
type Shapes struct {
	// Fixed is a catalog of named shapes (cloudscale flavors, Proxmox
	// buckets). CPU and memory may be left out where the provider's catalog
	// knows them (cloudscale flavors).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	Fixed []Shape `json:"fixed,omitempty"`

	// Flexible is a CPU/memory range on a step grid, for providers that can
	// make a VM of any size.
	// +optional
	Flexible *FlexibleShape `json:"flexible,omitempty"`
}

// Shape is one machine size.
// +kubebuilder:validation:XValidation:rule="!has(self.cpu) || quantity(string(self.cpu)).isGreaterThan(quantity('0'))",message="shape cpu must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || quantity(string(self.memory)).isGreaterThan(quantity('0'))",message="shape memory must be greater than zero"
type Shape struct {
	// Name of the shape: the provider's flavor name, or a name of your own.
	// It becomes the node's node.kubernetes.io/instance-type label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`
	Name string `json:"name"`
	// CPU of the machine.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory of the machine.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Price per hour in any currency, used to pick the cheapest shape that
	// fits. Unset means the provider's price, else one derived from size.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price,omitempty"`
}

// FlexibleShape is a range of sizes: CPU and memory from min to max, in steps.
// +kubebuilder:validation:XValidation:rule="quantity(string(self.minCPU)).compareTo(quantity(string(self.maxCPU))) <= 0",message="flexible minCPU must not exceed maxCPU"
// +kubebuilder:validation:XValidation:rule="quantity(string(self.minMemory)).compareTo(quantity(string(self.maxMemory))) <= 0",message="flexible minMemory must not exceed maxMemory"
// +kubebuilder:validation:XValidation:rule="quantity(string(self.minCPU)).isGreaterThan(quantity('0')) && quantity(string(self.minMemory)).isGreaterThan(quantity('0'))",message="flexible minCPU and minMemory must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.cpuStep) || quantity(string(self.cpuStep)).isGreaterThan(quantity('0'))",message="flexible cpuStep must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.memoryStep) || quantity(string(self.memoryStep)).isGreaterThan(quantity('0'))",message="flexible memoryStep must be greater than zero"
type FlexibleShape struct {
	// MinCPU is the smallest CPU size.
	MinCPU resource.Quantity `json:"minCPU"`
	// MaxCPU is the largest CPU size.
	MaxCPU resource.Quantity `json:"maxCPU"`
	// CPUStep is the grid CPU sizes are rounded up to.
	// +optional
	// +kubebuilder:default="1"
	CPUStep *resource.Quantity `json:"cpuStep,omitempty"`
	// MinMemory is the smallest memory size.
	MinMemory resource.Quantity `json:"minMemory"`
	// MaxMemory is the largest memory size.
	MaxMemory resource.Quantity `json:"maxMemory"`
	// MemoryStep is the grid memory sizes are rounded up to.
	// +optional
	// +kubebuilder:default="1Gi"
	MemoryStep *resource.Quantity `json:"memoryStep,omitempty"`
	// PricePerCPU per hour, to rank sizes; unset counts one unit per core.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	PricePerCPU string `json:"pricePerCPU,omitempty"`
	// PricePerGiB of memory per hour; unset counts a quarter unit per GiB.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	PricePerGiB string `json:"pricePerGiB,omitempty"`
}

// Limits cap what a pool may hold.
// +kubebuilder:validation:XValidation:rule="!has(self.cpu) || !quantity(string(self.cpu)).isLessThan(quantity('0'))",message="limits.cpu must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || !quantity(string(self.memory)).isLessThan(quantity('0'))",message="limits.memory must not be negative"
type Limits struct {
	// Nodes is the most nodes the pool may hold.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Nodes *int32 `json:"nodes,omitempty"`
	// CPU is the most CPU the pool's nodes may have in total.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is the most memory the pool's nodes may have in total.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// ConsolidationPolicy says which nodes consolidation may remove.
// +kubebuilder:validation:Enum=WhenEmpty;WhenEmptyOrUnderutilized
type ConsolidationPolicy string

const (
	ConsolidationWhenEmpty                ConsolidationPolicy = "WhenEmpty"
	ConsolidationWhenEmptyOrUnderutilized ConsolidationPolicy = "WhenEmptyOrUnderutilized"
)

// Disruption says when a pool's nodes may be removed voluntarily.
type Disruption struct {
	// ConsolidationPolicy: WhenEmpty removes nodes with no pods but
	// DaemonSet pods; WhenEmptyOrUnderutilized also moves pods off nodes
	// whose pods fit elsewhere.
	// +optional
	// +kubebuilder:default=WhenEmpty
	ConsolidationPolicy ConsolidationPolicy `json:"consolidationPolicy,omitempty"`
	// ConsolidateAfter is how long a node must be empty or underused before
	// it is removed.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	ConsolidateAfter *metav1.Duration `json:"consolidateAfter,omitempty"`
	// ExpireAfter replaces nodes older than this. Unset: never.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	ExpireAfter *metav1.Duration `json:"expireAfter,omitempty"`
	// Budgets cap how many nodes may be disrupted at once; the strictest
	// active budget wins.
	// +optional
	// +kubebuilder:default={{nodes: "10%"}}
	// +kubebuilder:validation:MaxItems=50
	Budgets []Budget `json:"budgets,omitempty"`
}

// DisruptionReason is why a node is removed voluntarily.
// +kubebuilder:validation:Enum=Empty;Underutilized;Drifted
type DisruptionReason string

const (
	DisruptionReasonEmpty         DisruptionReason = "Empty"
	DisruptionReasonUnderutilized DisruptionReason = "Underutilized"
	DisruptionReasonDrifted       DisruptionReason = "Drifted"
)

// Budget caps voluntary disruptions, optionally only during a schedule and
// only for some reasons.
// +kubebuilder:validation:XValidation:rule="has(self.schedule) == has(self.duration)",message="a budget's schedule and duration must be set together"
type Budget struct {
	// Nodes is a count ("3") or a percentage of the pool's nodes ("10%").
	// +kubebuilder:validation:Pattern=`^((100|[0-9]{1,2})%|[0-9]+)$`
	Nodes string `json:"nodes"`
	// Reasons the budget applies to; unset means all.
	// +optional
	// +listType=set
	Reasons []DisruptionReason `json:"reasons,omitempty"`
	// Schedule (cron syntax, UTC) at which the budget becomes active.
	// +optional
	// +kubebuilder:validation:Pattern=`^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$`
	Schedule *string `json:"schedule,omitempty"`
	// Duration the budget stays active after each scheduled start.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// NodePoolStatus is the observed state of a NodePool.
type NodePoolStatus struct {
	// Nodes is the number of the pool's claims that are not being deleted.
	// +optional
	Nodes int32 `json:"nodes"`
	// Resources is the capacity of those claims in total.
	// +optional
	Resources corev1.ResourceList `json:"resources,omitempty"`
	// Conditions: Ready, ProviderReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodePool says what nodes may exist.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pool
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerRef.name`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.resources.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.resources.memory`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodePoolSpec   `json:"spec"`
	Status NodePoolStatus `json:"status,omitempty"`
}

// NodePoolList is a list of NodePools.
//
// +kubebuilder:object:root=true
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodePool{}, &NodePoolList{})
}
