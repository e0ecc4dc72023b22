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
// +kubebuilder:validation:XValidation:rule="!has(self.limits) || !has(self.limits.nodes) || !has(self.capacitySchedules) || self.capacitySchedules.all(c, !has(c.minNodes) || c.minNodes <= self.limits.nodes)",message="capacitySchedules: minNodes must not exceed limits.nodes"
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

	// Headroom is spare capacity kept free on the pool's nodes at all
	// times, so pods that arrive find a node at once instead of waiting for
	// a machine to boot. Provisioning places it as placeholder pods of the
	// lowest priority after every pending pod, and buys nodes for what
	// does not fit; consolidation never removes a node the headroom needs.
	// +optional
	Headroom *Headroom `json:"headroom,omitempty"`

	// CapacitySchedules change minNodes and headroom for a while on a cron
	// schedule (e.g. warm nodes on weekdays during office hours). While an
	// entry is active its values replace the pool's; when several are
	// active the largest minNodes and the largest headroom win.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	CapacitySchedules []CapacitySchedule `json:"capacitySchedules,omitempty"`

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
	// Node before it is deleted and its claim with it. At least 5s, which
	// only simulated machines meet: a timeout shorter than a machine's boot
	// deletes every machine before its node can register, so on real
	// infrastructure keep it at minutes.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="registrationTimeout must be at least 5s (and at most 2562047h)"
	RegistrationTimeout *metav1.Duration `json:"registrationTimeout,omitempty"`

	// Repair replaces nodes that stopped working (NotReady, Unknown, or
	// their heartbeat lease not renewed). Unset: nodes are never repaired.
	// +optional
	Repair *Repair `json:"repair,omitempty"`
}

// Repair says when a pool's broken nodes are replaced. A node whose Ready
// condition has been False or Unknown, or whose heartbeat Lease has not
// been renewed, for longer than After gets a replacement claim; then it is
// drained as far as a dead kubelet allows and deleted. Repair is not
// voluntary disruption: do-not-disrupt does not hold it back, but
// MaxUnhealthy and its own Budget do.
type Repair struct {
	// After is how long a node must be unhealthy before it is replaced.
	// At least 30s: a kubelet misses heartbeats for seconds on a busy host
	// or a short network blip, and the node lifecycle controller itself
	// waits 40s before marking a node Unknown. On real infrastructure keep
	// it at minutes.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s')",message="repair.after must be at least 30s (and at most 2562047h)"
	After *metav1.Duration `json:"after,omitempty"`
	// MaxUnhealthy is the most nodes of the pool that may be unhealthy at
	// once for repair to go on: a count ("2") or a share of the pool's
	// nodes ("20%", rounded up). When more are unhealthy, the cause is
	// likely outside the nodes (a network partition, the control plane)
	// and replacing them would not help, so repair pauses and the pool's
	// RepairAllowed condition says why.
	// +optional
	// +kubebuilder:default="20%"
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self.matches('^((100|[0-9]{1,2})%|[0-9]{1,9})$')",message="repair.maxUnhealthy must be a count of at most 9 digits, such as 2, or a percentage of at most 100%, such as 20%"
	MaxUnhealthy string `json:"maxUnhealthy,omitempty"`
	// Budget is the most nodes under repair at once: a count ("1") or a
	// share of the pool's nodes ("10%", rounded up). It is separate from
	// the disruption budgets, which only voluntary disruption uses.
	// +optional
	// +kubebuilder:default="1"
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self.matches('^((100|[0-9]{1,2})%|[0-9]{1,9})$')",message="repair.budget must be a count of at most 9 digits, such as 1, or a percentage of at most 100%, such as 10%"
	Budget string `json:"budget,omitempty"`
}

// DisruptionReasonUnhealthy is the reason of a repair: in the claim's
// Disrupting condition, events and the terminated-claims metric. It is no
// budget reason: repair has a budget of its own.
const DisruptionReasonUnhealthy DisruptionReason = "Unhealthy"

// ConditionRepairAllowed on a NodePool with repair set says whether its
// unhealthy nodes may be replaced now, and if not, why.
const ConditionRepairAllowed = "RepairAllowed"

// ConditionSleepAllowed on a pool with spec.disruption.sleep: True while
// its removals may still put machines to sleep, False (SleepBudgetUsedUp,
// PowerNotSupported) while they delete.
const ConditionSleepAllowed = "SleepAllowed"

// Headroom is spare capacity: resources (cpu, memory), kept free anywhere
// on the pool's nodes in pieces of at most 1 cpu and 4Gi; a number of pods
// of one size, each of which must fit on a node whole; or nodes or pods
// from an external signal.
// +kubebuilder:validation:XValidation:rule="[has(self.cpu) || has(self.memory), has(self.pods), has(self.external)].filter(x, x).size() == 1",message="headroom: set exactly one of resources (cpu, memory), pods or external"
// +kubebuilder:validation:XValidation:rule="(has(self.cpu) && string(self.cpu).matches('[eE][+-]?[0-9]{3}')) || (!has(self.cpu) || quantity(string(self.cpu)).isGreaterThan(quantity('0')))",message="headroom.cpu must be greater than zero"
// +kubebuilder:validation:XValidation:rule="(has(self.memory) && string(self.memory).matches('[eE][+-]?[0-9]{3}')) || (!has(self.memory) || quantity(string(self.memory)).isGreaterThan(quantity('0')))",message="headroom.memory must be greater than zero"
type Headroom struct {
	// CPU kept free in the pool, at most 10000 cores.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="headroom.cpu must be at most 10000"
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory kept free in the pool, at most 64Ti.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="headroom.memory must be at most 64Ti"
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Pods is room for count pods of a given size.
	// +optional
	Pods *HeadroomPods `json:"pods,omitempty"`
	// External takes the headroom from a scaler that speaks KEDA's
	// external-scaler gRPC protocol.
	// +optional
	External *ExternalHeadroom `json:"external,omitempty"`
}

// ExternalHeadroom asks a KEDA external scaler (IsActive, GetMetricSpec,
// GetMetrics) for a metric and keeps ceil(metric / target) nodes or pods
// of headroom, within [min, max]; an inactive scaler means min. When the
// scaler cannot be reached the last value stands for gracePeriod, then
// min; the pool's ExternalHeadroom condition says so.
// +kubebuilder:validation:XValidation:rule="has(self.targetPerNode) != has(self.targetPerPod)",message="headroom.external: set exactly one of targetPerNode or targetPerPod"
// +kubebuilder:validation:XValidation:rule="has(self.targetPerPod) == has(self.pod)",message="headroom.external: targetPerPod needs pod (the size of each pod), and pod needs targetPerPod"
// +kubebuilder:validation:XValidation:rule="self.min <= self.max",message="headroom.external: min must not exceed max"
// +kubebuilder:validation:XValidation:rule="!has(self.targetPerNode) || string(self.targetPerNode).matches('[eE][+-]?[0-9]{3}') || quantity(string(self.targetPerNode)).isGreaterThan(quantity('0'))",message="headroom.external.targetPerNode must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.targetPerPod) || string(self.targetPerPod).matches('[eE][+-]?[0-9]{3}') || quantity(string(self.targetPerPod)).isGreaterThan(quantity('0'))",message="headroom.external.targetPerPod must be greater than zero"
type ExternalHeadroom struct {
	// Address (host:port) of the scaler's gRPC server.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[^\s/]+:[0-9]{1,5}$`
	Address string `json:"address"`
	// Metadata sent as the ScaledObjectRef's scalerMetadata, as a
	// ScaledObject's trigger metadata would be. It is part of the pool's
	// spec: put no secrets in it.
	// +optional
	// +kubebuilder:validation:MaxProperties=50
	Metadata map[string]string `json:"metadata,omitempty"`
	// TargetPerNode is the metric one node of headroom stands for: a
	// queue of 500 jobs with 50 per node wants 10 nodes. A node of
	// headroom is the room of an empty node of the pool's cheapest shape.
	// +optional
	TargetPerNode *resource.Quantity `json:"targetPerNode,omitempty"`
	// TargetPerPod is the metric one pod of headroom stands for.
	// +optional
	TargetPerPod *resource.Quantity `json:"targetPerPod,omitempty"`
	// Pod is the size of each pod of headroom, with targetPerPod.
	// +optional
	Pod *PodSize `json:"pod,omitempty"`
	// Min is the floor: the headroom when the scaler is inactive or has
	// been unreachable for longer than gracePeriod.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Min int32 `json:"min,omitempty"`
	// Max is the ceiling.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Max int32 `json:"max"`
	// GracePeriod the last value stands for after the scaler stops
	// answering.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="gracePeriod must be a duration of at most 2562047h"
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`
	// TLS, when set, reaches the scaler over TLS, verified against the
	// system's trust roots. Unset: plain text, as KEDA's default.
	// +optional
	TLS *ExternalScalerTLS `json:"tls,omitempty"`
}

// ExternalScalerTLS says how to reach a scaler over TLS.
type ExternalScalerTLS struct {
	// ServerName to verify the scaler's certificate against; unset is the
	// address's host.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
}

// PodSize is what one pod requests.
// +kubebuilder:validation:XValidation:rule="string(self.cpu).matches('[eE][+-]?[0-9]{3}') || quantity(string(self.cpu)).isGreaterThan(quantity('0'))",message="pod cpu must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || string(self.memory).matches('[eE][+-]?[0-9]{3}') || quantity(string(self.memory)).isGreaterThan(quantity('0'))",message="pod memory must be greater than zero"
type PodSize struct {
	// CPU the pod requests, at most 10000 cores.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="pod cpu must be at most 10000"
	CPU resource.Quantity `json:"cpu"`
	// Memory the pod requests, at most 64Ti; unset requests none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="pod memory must be at most 64Ti"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// HeadroomPods is room for count pods, each requesting cpu and memory.
// +kubebuilder:validation:XValidation:rule="string(self.cpu).matches('[eE][+-]?[0-9]{3}') || quantity(string(self.cpu)).isGreaterThan(quantity('0'))",message="headroom.pods.cpu must be greater than zero"
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || string(self.memory).matches('[eE][+-]?[0-9]{3}') || quantity(string(self.memory)).isGreaterThan(quantity('0'))",message="headroom.pods.memory must be greater than zero"
type HeadroomPods struct {
	// Count of pods, 1 to 1000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Count int32 `json:"count"`
	// CPU each pod requests, at most 10000 cores.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="headroom.pods.cpu must be at most 10000"
	CPU resource.Quantity `json:"cpu"`
	// Memory each pod requests, at most 64Ti; unset requests none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="headroom.pods.memory must be at most 64Ti"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// CapacitySchedule changes a pool's warm capacity for duration after each
// time schedule fires.
// +kubebuilder:validation:XValidation:rule="has(self.minNodes) || has(self.headroom)",message="a capacity schedule sets minNodes, headroom or both"
type CapacitySchedule struct {
	// Schedule (cron syntax, UTC) at which the entry becomes active, with
	// the syntax of a disruption budget's schedule.
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]?)?(,([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]?)?)*[ ]+([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]?)?(,([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]?)?)*[ ]+([*]|[?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]?)?(,([*]|[?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]?)?)*[ ]+([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]?)?(,([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]?)?)*[ ]+([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]?)?(,([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]?)?)*)$')",message="schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields: minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat, each *, a value, a range a-b or a list, with an optional step /n of 1 to 99"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ ]+[ ]+[^ ]+[ ]+(30|31)(-(30|31))?(/[0-9]+)?(,(30|31)(-(30|31))?(/[0-9]+)?)*[ ]+(0?2|(?i:feb))(,(0?2|(?i:feb)))*[ ]+[*?]$')",message="schedule never fires: February has no day 30 or 31"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ ]+[ ]+[^ ]+[ ]+31(/[0-9]+)?(,31(/[0-9]+)?)*[ ]+(0?[2469]|11|(?i:feb|apr|jun|sep|nov))(,(0?[2469]|11|(?i:feb|apr|jun|sep|nov)))*[ ]+[*?]$')",message="schedule never fires: none of its months has a day 31"
	Schedule string `json:"schedule"`
	// Duration the entry stays active after each scheduled start, at
	// least 1m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="capacity schedule duration must be at least 1m (and at most 2562047h)"
	Duration metav1.Duration `json:"duration"`
	// MinNodes while active; unset keeps the pool's.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinNodes *int32 `json:"minNodes,omitempty"`
	// Headroom while active; unset keeps the pool's. It may not be
	// external: a scaler decides for itself when its demand is.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.external)",message="a capacity schedule's headroom may not be external"
	Headroom *Headroom `json:"headroom,omitempty"`
}

// ProviderReference names a NodeProvider.
type ProviderReference struct {
	// Name of the NodeProvider. At most 63 characters, as a NodeProvider's
	// name is the value of the claimscale.io/nodeprovider label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// NodeTemplate is what every node of a pool carries.
// +kubebuilder:validation:XValidation:rule="!has(self.taints) || !has(self.startupTaints) || self.startupTaints.all(s, !self.taints.exists(t, t.key == s.key && t.effect == s.effect))",message="template.startupTaints: a key and effect may not be both a taint and a startup taint"
type NodeTemplate struct {
	// Labels on every node of the pool. Keys and values follow Kubernetes'
	// label syntax. The claimscale.io domain is reserved, and in the
	// kubernetes.io and k8s.io domains only the labels a kubelet may set on
	// its own node are allowed (kubelet.kubernetes.io/ and
	// node.kubernetes.io/ keys, and the well-known os, arch, zone, region
	// and instance-type labels): a kubelet refuses to start with any other.
	// kubernetes.io/hostname is refused too: the kubelet sets it per node,
	// and one hostname on every node of the pool would break every hostname
	// spread and anti-affinity.
	// +optional
	// +kubebuilder:validation:MaxProperties=100
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",message="template.labels: every key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.labelValue().validate(self[k]).hasValue())",message="template.labels: every value must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('claimscale.io/') && !(k.contains('/') && k.split('/')[0].endsWith('.claimscale.io')))",message="template.labels: labels in the claimscale.io/ domain are reserved"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.contains('/') || !(k.split('/')[0] in ['kubernetes.io', 'k8s.io'] || k.split('/')[0].endsWith('.kubernetes.io') || k.split('/')[0].endsWith('.k8s.io')) || k in ['kubernetes.io/hostname', 'kubernetes.io/os', 'kubernetes.io/arch', 'beta.kubernetes.io/os', 'beta.kubernetes.io/arch', 'beta.kubernetes.io/instance-type', 'node.kubernetes.io/instance-type', 'topology.kubernetes.io/zone', 'topology.kubernetes.io/region', 'failure-domain.beta.kubernetes.io/zone', 'failure-domain.beta.kubernetes.io/region'] || k.split('/')[0] in ['kubelet.kubernetes.io', 'node.kubernetes.io'] || k.split('/')[0].endsWith('.kubelet.kubernetes.io') || k.split('/')[0].endsWith('.node.kubernetes.io'))",message="template.labels: in the kubernetes.io and k8s.io domains only labels a kubelet may set on its node are allowed (kubelet.kubernetes.io/, node.kubernetes.io/ and the well-known os, arch, zone, region, instance-type and hostname labels)"
	// +kubebuilder:validation:XValidation:rule="!('kubernetes.io/hostname' in self)",message="template.labels: kubernetes.io/hostname may not be set: every node of the pool would carry the same hostname, which breaks hostname spreads and anti-affinity; the kubelet sets it per node"
	Labels map[string]string `json:"labels,omitempty"`

	// Taints on every node of the pool. Keys are qualified names, values
	// label values, effects NoSchedule, PreferNoSchedule or NoExecute, and
	// a key may appear once per effect.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self.all(t, !format.qualifiedName().validate(t.key).hasValue())",message="template.taints: every key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.value) || !format.labelValue().validate(t.value).hasValue())",message="template.taints: every value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="template.taints: effect must be NoSchedule, PreferNoSchedule or NoExecute"
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",message="template.taints: a key may appear only once per effect"
	Taints []corev1.Taint `json:"taints,omitempty"`

	// StartupTaints are expected on a new node until something (a CNI, a
	// driver installer) removes them; the node is Initialized only once they
	// are gone. They do not keep pending pods from being placed on the pool.
	// The same syntax as taints applies, and a key and effect may not be
	// both a taint and a startup taint.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self.all(t, !format.qualifiedName().validate(t.key).hasValue())",message="template.startupTaints: every key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.value) || !format.labelValue().validate(t.value).hasValue())",message="template.startupTaints: every value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="template.startupTaints: effect must be NoSchedule, PreferNoSchedule or NoExecute"
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",message="template.startupTaints: a key may appear only once per effect"
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
	// KubeReserved resources (cpu, memory, ephemeral-storage, pid), none
	// negative and none beyond one machine: cpu at most 10000, memory at
	// most 64Ti, ephemeral-storage at most 1Pi.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])",message="kubeReserved takes cpu, memory, ephemeral-storage and pid"
	// +kubebuilder:validation:XValidation:rule="self.exists(k, string(self[k]).matches('[eE][+-]?[0-9]{3}')) || (self.all(k, !quantity(string(self[k])).isLessThan(quantity('0'))))",message="kubeReserved: values must not be negative"
	// +kubebuilder:validation:XValidation:rule="('cpu' in self && string(self['cpu']).matches('[eE][+-]?[0-9]{3}')) || (!('cpu' in self) || quantity(string(self['cpu'])).compareTo(quantity('10000')) <= 0)",message="kubeReserved.cpu must be at most 10000 (cores of one machine)"
	// +kubebuilder:validation:XValidation:rule="('memory' in self && string(self['memory']).matches('[eE][+-]?[0-9]{3}')) || (!('memory' in self) || quantity(string(self['memory'])).compareTo(quantity('64Ti')) <= 0)",message="kubeReserved.memory must be at most 64Ti (the memory of one machine)"
	// +kubebuilder:validation:XValidation:rule="('ephemeral-storage' in self && string(self['ephemeral-storage']).matches('[eE][+-]?[0-9]{3}')) || (!('ephemeral-storage' in self) || quantity(string(self['ephemeral-storage'])).compareTo(quantity('1Pi')) <= 0)",message="kubeReserved.ephemeral-storage must be at most 1Pi"
	// +kubebuilder:validation:XValidation:rule="('pid' in self && string(self['pid']).matches('[eE][+-]?[0-9]{3}')) || (!('pid' in self) || quantity(string(self['pid'])).compareTo(quantity('4194304')) <= 0)",message="kubeReserved.pid must be at most 4194304 (the kernel's largest pid_max)"
	KubeReserved corev1.ResourceList `json:"kubeReserved,omitempty"`
	// SystemReserved resources, with the bounds of KubeReserved.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])",message="systemReserved takes cpu, memory, ephemeral-storage and pid"
	// +kubebuilder:validation:XValidation:rule="self.exists(k, string(self[k]).matches('[eE][+-]?[0-9]{3}')) || (self.all(k, !quantity(string(self[k])).isLessThan(quantity('0'))))",message="systemReserved: values must not be negative"
	// +kubebuilder:validation:XValidation:rule="('cpu' in self && string(self['cpu']).matches('[eE][+-]?[0-9]{3}')) || (!('cpu' in self) || quantity(string(self['cpu'])).compareTo(quantity('10000')) <= 0)",message="systemReserved.cpu must be at most 10000 (cores of one machine)"
	// +kubebuilder:validation:XValidation:rule="('memory' in self && string(self['memory']).matches('[eE][+-]?[0-9]{3}')) || (!('memory' in self) || quantity(string(self['memory'])).compareTo(quantity('64Ti')) <= 0)",message="systemReserved.memory must be at most 64Ti (the memory of one machine)"
	// +kubebuilder:validation:XValidation:rule="('ephemeral-storage' in self && string(self['ephemeral-storage']).matches('[eE][+-]?[0-9]{3}')) || (!('ephemeral-storage' in self) || quantity(string(self['ephemeral-storage'])).compareTo(quantity('1Pi')) <= 0)",message="systemReserved.ephemeral-storage must be at most 1Pi"
	// +kubebuilder:validation:XValidation:rule="('pid' in self && string(self['pid']).matches('[eE][+-]?[0-9]{3}')) || (!('pid' in self) || quantity(string(self['pid'])).compareTo(quantity('4194304')) <= 0)",message="systemReserved.pid must be at most 4194304 (the kernel's largest pid_max)"
	SystemReserved corev1.ResourceList `json:"systemReserved,omitempty"`
	// EvictionHard thresholds, e.g. memory.available: 100Mi,
	// nodefs.available: 10%.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",message="evictionHard takes memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree and pid.available"
	// +kubebuilder:validation:XValidation:rule="!('memory.available' in self) || !self['memory.available'].matches('^100([.]0*)?%$')",message="evictionHard: memory.available of 100% leaves the node no allocatable memory; use less than 100%"
	// +kubebuilder:validation:MaxProperties=6
	EvictionHard map[string]EvictionThreshold `json:"evictionHard,omitempty"`
}

// EvictionThreshold is a quantity (100Mi) of at most 1Pi, or a percentage
// (10%) of at most 100%.
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?%|[0-9]+(\.[0-9]+)?([KMGTPE]i?)?)$`
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?%$') || double(self.substring(0, size(self) - 1)) <= 100.0",message="evictionHard: a percentage must be at most 100%"
// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+([.][0-9]+)?([KMGTPE]i?)?$') || quantity(self).compareTo(quantity('1Pi')) <= 0",message="evictionHard: a quantity must be at most 1Pi"
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
// +kubebuilder:validation:XValidation:rule="(has(self.cpu) && string(self.cpu).matches('[eE][+-]?[0-9]{3}')) || (!has(self.cpu) || quantity(string(self.cpu)).isGreaterThan(quantity('0')))",message="shape cpu must be greater than zero"
// +kubebuilder:validation:XValidation:rule="(has(self.memory) && string(self.memory).matches('[eE][+-]?[0-9]{3}')) || (!has(self.memory) || quantity(string(self.memory)).isGreaterThan(quantity('0')))",message="shape memory must be greater than zero"
type Shape struct {
	// Name of the shape: the provider's flavor name, or a name of your own.
	// It becomes the node's node.kubernetes.io/instance-type label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`
	Name string `json:"name"`
	// CPU of the machine, at most 10000 cores.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="shape cpu must be at most 10000 (cores of one machine)"
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory of the machine, at most 64Ti.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="shape memory must be at most 64Ti (the memory of one machine)"
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Price per hour in any currency, used to pick the cheapest shape that
	// fits. Unset means the provider's price, else one derived from size.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price,omitempty"`
	// ExtendedResources the machine has besides cpu and memory, in whole
	// units: the devices a device plugin on it advertises
	// (nvidia.com/gpu: 1). Its template node has them in capacity and
	// allocatable, so a pod that asks for one is packed onto this shape
	// and its node is bought for it; the claim carries them to the
	// provider, which attaches the devices where it can (Proxmox PCI
	// passthrough) or only reports them.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) <= 8",message="extendedResources: at most 8 kinds of device"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.contains('/') && !k.contains('kubernetes.io/') && !k.startsWith('requests.') && !format.qualifiedName().validate(k).hasValue())",message="extendedResources: every name must be an extended resource: a domain-prefixed name (example.com/device) outside kubernetes.io"
	// +kubebuilder:validation:XValidation:rule="self.all(k, string(self[k]).matches('^[1-9][0-9]{0,3}$'))",message="extendedResources: every count must be a whole number from 1 to 9999"
	ExtendedResources corev1.ResourceList `json:"extendedResources,omitempty"`
	// ResourceSlices are the devices a DRA driver on the machine publishes
	// (resource.k8s.io/v1 ResourceSlices of the node): the template of
	// what a node of this shape will have, so that a pod whose
	// ResourceClaims no node can satisfy now gets a node of a shape whose
	// devices can. Provisioning gives each new and booting node its own
	// copy of these slices, and the kube-scheduler's DynamicResources
	// plugin allocates from them as it will once the driver publishes the
	// real ones.
	// +optional
	// +listType=map
	// +listMapKey=driver
	// +kubebuilder:validation:MaxItems=8
	ResourceSlices []TemplateResourceSlice `json:"resourceSlices,omitempty"`
}

// TemplateResourceSlice is one driver's devices on a node of a shape, as
// the driver publishes them in a ResourceSlice of that node.
type TemplateResourceSlice struct {
	// Driver that publishes the devices, a DNS subdomain
	// (gpu.example.com).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Driver string `json:"driver"`
	// Pool the driver puts the devices in. Empty means the node's name,
	// which is what node-local drivers use; a name given here is taken as
	// it is on every node.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[a-z0-9]([-a-z0-9.]*[a-z0-9])?)*$`
	Pool string `json:"pool,omitempty"`
	// Devices of the node, each named uniquely.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	Devices []TemplateDevice `json:"devices"`
}

// TemplateDevice is one device, with the attributes and capacity a
// DeviceClass's or a claim's CEL selector reads (device.attributes,
// device.capacity).
type TemplateDevice struct {
	// Name of the device, a DNS label (gpu-0).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Attributes by qualified name: a C identifier (model), or a DNS
	// subdomain, a slash and a C identifier (gpu.example.com/model); a
	// name without domain is in the driver's. (Checked where the pool's
	// shapes are read, not here: a CEL rule over every key of up to 30
	// shapes' 8 slices' 128 devices costs more than the API server
	// allows a CRD.)
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Attributes map[string]TemplateDeviceAttribute `json:"attributes,omitempty"`
	// Capacity by qualified name (memory: 80Gi), named as attributes are.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Capacity map[string]resource.Quantity `json:"capacity,omitempty"`
}

// TemplateDeviceAttribute is one attribute's value: exactly one of int,
// bool, string and version.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=1
type TemplateDeviceAttribute struct {
	// +optional
	Int *int64 `json:"int,omitempty"`
	// +optional
	Bool *bool `json:"bool,omitempty"`
	// String of at most 64 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	String *string `json:"string,omitempty"`
	// Version, a semantic version (1.2.3) of at most 64 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`
	Version *string `json:"version,omitempty"`
}

// FlexibleShape is a range of sizes: CPU and memory from min to max, in steps.
// The grid of each axis is its minimum and every multiple of the step above
// it up to the maximum. Each axis has at most 1024 sizes and the grid at
// most 65536, so that listing it stays cheap: 1 to 64 cores by 1 and 1Gi to
// 1Ti by 1Gi are both fine.
// +kubebuilder:validation:XValidation:rule="(has(self.minCPU) && string(self.minCPU).matches('[eE][+-]?[0-9]{3}')) || (has(self.maxCPU) && string(self.maxCPU).matches('[eE][+-]?[0-9]{3}')) || (quantity(string(self.minCPU)).compareTo(quantity(string(self.maxCPU))) <= 0)",message="flexible minCPU must not exceed maxCPU"
// +kubebuilder:validation:XValidation:rule="(has(self.minMemory) && string(self.minMemory).matches('[eE][+-]?[0-9]{3}')) || (has(self.maxMemory) && string(self.maxMemory).matches('[eE][+-]?[0-9]{3}')) || (quantity(string(self.minMemory)).compareTo(quantity(string(self.maxMemory))) <= 0)",message="flexible minMemory must not exceed maxMemory"
// +kubebuilder:validation:XValidation:rule="(has(self.minCPU) && string(self.minCPU).matches('[eE][+-]?[0-9]{3}')) || (has(self.minMemory) && string(self.minMemory).matches('[eE][+-]?[0-9]{3}')) || (quantity(string(self.minCPU)).isGreaterThan(quantity('0')) && quantity(string(self.minMemory)).isGreaterThan(quantity('0')))",message="flexible minCPU and minMemory must be greater than zero"
// +kubebuilder:validation:XValidation:rule="(has(self.cpuStep) && string(self.cpuStep).matches('[eE][+-]?[0-9]{3}')) || (!has(self.cpuStep) || quantity(string(self.cpuStep)).compareTo(quantity('1m')) >= 0)",message="flexible cpuStep must be at least 1m"
// +kubebuilder:validation:XValidation:rule="(has(self.memoryStep) && string(self.memoryStep).matches('[eE][+-]?[0-9]{3}')) || (!has(self.memoryStep) || quantity(string(self.memoryStep)).compareTo(quantity('1Mi')) >= 0)",message="flexible memoryStep must be at least 1Mi"
// +kubebuilder:validation:XValidation:rule="(has(self.cpuStep) && string(self.cpuStep).matches('[eE][+-]?[0-9]{3}')) || (has(self.maxCPU) && string(self.maxCPU).matches('[eE][+-]?[0-9]{3}')) || (has(self.minCPU) && string(self.minCPU).matches('[eE][+-]?[0-9]{3}')) || (!has(self.cpuStep) || !quantity(string(self.cpuStep)).isGreaterThan(quantity('0')) || (quantity(string(self.maxCPU)).asApproximateFloat() - quantity(string(self.minCPU)).asApproximateFloat()) / quantity(string(self.cpuStep)).asApproximateFloat() <= 1023.0)",message="flexible cpu has more than 1024 sizes: (maxCPU - minCPU) / cpuStep must be at most 1023"
// +kubebuilder:validation:XValidation:rule="(has(self.memoryStep) && string(self.memoryStep).matches('[eE][+-]?[0-9]{3}')) || (has(self.maxMemory) && string(self.maxMemory).matches('[eE][+-]?[0-9]{3}')) || (has(self.minMemory) && string(self.minMemory).matches('[eE][+-]?[0-9]{3}')) || (!has(self.memoryStep) || !quantity(string(self.memoryStep)).isGreaterThan(quantity('0')) || (quantity(string(self.maxMemory)).asApproximateFloat() - quantity(string(self.minMemory)).asApproximateFloat()) / quantity(string(self.memoryStep)).asApproximateFloat() <= 1023.0)",message="flexible memory has more than 1024 sizes: (maxMemory - minMemory) / memoryStep must be at most 1023"
// +kubebuilder:validation:XValidation:rule="(has(self.cpuStep) && string(self.cpuStep).matches('[eE][+-]?[0-9]{3}')) || (has(self.memoryStep) && string(self.memoryStep).matches('[eE][+-]?[0-9]{3}')) || (has(self.maxCPU) && string(self.maxCPU).matches('[eE][+-]?[0-9]{3}')) || (has(self.minCPU) && string(self.minCPU).matches('[eE][+-]?[0-9]{3}')) || (has(self.maxMemory) && string(self.maxMemory).matches('[eE][+-]?[0-9]{3}')) || (has(self.minMemory) && string(self.minMemory).matches('[eE][+-]?[0-9]{3}')) || (!has(self.cpuStep) || !has(self.memoryStep) || !quantity(string(self.cpuStep)).isGreaterThan(quantity('0')) || !quantity(string(self.memoryStep)).isGreaterThan(quantity('0')) || ((quantity(string(self.maxCPU)).asApproximateFloat() - quantity(string(self.minCPU)).asApproximateFloat()) / quantity(string(self.cpuStep)).asApproximateFloat() + 1.0) * ((quantity(string(self.maxMemory)).asApproximateFloat() - quantity(string(self.minMemory)).asApproximateFloat()) / quantity(string(self.memoryStep)).asApproximateFloat() + 1.0) <= 65536.0)",message="flexible shapes has more than 65536 sizes: use a larger cpuStep or memoryStep, or a narrower range"
type FlexibleShape struct {
	// MinCPU is the smallest CPU size.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="flexible minCPU must be at most 10000 (cores of one machine)"
	MinCPU resource.Quantity `json:"minCPU"`
	// MaxCPU is the largest CPU size, at most 10000 cores.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="flexible maxCPU must be at most 10000 (cores of one machine)"
	MaxCPU resource.Quantity `json:"maxCPU"`
	// CPUStep is the grid CPU sizes are rounded up to, at least 1m.
	// +optional
	// +kubebuilder:default="1"
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="flexible cpuStep must be at most 10000"
	CPUStep *resource.Quantity `json:"cpuStep,omitempty"`
	// MinMemory is the smallest memory size.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="flexible minMemory must be at most 64Ti (the memory of one machine)"
	MinMemory resource.Quantity `json:"minMemory"`
	// MaxMemory is the largest memory size, at most 64Ti.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="flexible maxMemory must be at most 64Ti (the memory of one machine)"
	MaxMemory resource.Quantity `json:"maxMemory"`
	// MemoryStep is the grid memory sizes are rounded up to, at least 1Mi.
	// +optional
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="flexible memoryStep must be at most 64Ti"
	MemoryStep *resource.Quantity `json:"memoryStep,omitempty"`
	// PricePerCPU per hour, to rank sizes; unset counts one unit per core.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	PricePerCPU string `json:"pricePerCPU,omitempty"`
	// PricePerGiB of memory per hour; unset counts a quarter unit per GiB.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	PricePerGiB string `json:"pricePerGiB,omitempty"`
}

// Limits cap what a pool may hold.
// +kubebuilder:validation:XValidation:rule="(has(self.cpu) && string(self.cpu).matches('[eE][+-]?[0-9]{3}')) || (!has(self.cpu) || !quantity(string(self.cpu)).isLessThan(quantity('0')))",message="limits.cpu must not be negative"
// +kubebuilder:validation:XValidation:rule="(has(self.memory) && string(self.memory).matches('[eE][+-]?[0-9]{3}')) || (!has(self.memory) || !quantity(string(self.memory)).isLessThan(quantity('0')))",message="limits.memory must not be negative"
type Limits struct {
	// Nodes is the most nodes the pool may hold.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Nodes *int32 `json:"nodes,omitempty"`
	// CPU is the most CPU the pool's nodes may have in total, at most 1e9
	// cores (counted in millicores); leave it unset for no limit.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('1e9')) <= 0)",message="limits.cpu must be at most 1e9 cores; leave it unset for no limit"
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is the most memory the pool's nodes may have in total, at most
	// 1Ei; leave it unset for no limit.
	// +optional
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('1Ei')) <= 0)",message="limits.memory must be at most 1Ei; leave it unset for no limit"
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
	// it is removed. 0s removes it as soon as it is.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="consolidateAfter must be a duration of at most 2562047h"
	ConsolidateAfter *metav1.Duration `json:"consolidateAfter,omitempty"`
	// ExpireAfter replaces nodes older than this. Unset: never. At least
	// 10s: a node must live long enough to boot, join and run something
	// before it is replaced, or expiry only churns machines; on real
	// infrastructure that is hours or days.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="expireAfter must be at least 10s (and at most 2562047h); leave it unset to never expire nodes"
	ExpireAfter *metav1.Duration `json:"expireAfter,omitempty"`
	// Budgets cap how many nodes may be disrupted at once; the strictest
	// active budget wins.
	// +optional
	// +kubebuilder:default={{nodes: "10%"}}
	// +kubebuilder:validation:MaxItems=50
	Budgets []Budget `json:"budgets,omitempty"`
	// Sleep keeps machines stopped instead of deleting them when their
	// node is removed for emptiness or underuse, so that a later scale-up
	// starts them again (seconds) instead of making new ones (minutes).
	// It needs a NodeProvider that can stop and start machines; with any
	// other, nodes are deleted as without it. Drift, expiry and repair
	// always delete. Unset: machines are deleted.
	// +optional
	Sleep *Sleep `json:"sleep,omitempty"`
}

// Sleep says how many of a pool's machines may sleep, for how long, and
// which removals put them to sleep.
type Sleep struct {
	// Machines is how many of the pool's machines may sleep at once: a
	// count ("5", at most 9 digits) or a percentage of the pool's claims,
	// sleeping ones included ("50%", at most 100%).
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self.matches('^((100|[0-9]{1,2})%|[0-9]{1,9})$')",message="sleep.machines must be a count of at most 9 digits, such as 5, or a percentage of at most 100%, such as 50%"
	Machines string `json:"machines"`
	// DeleteAfter is how long a machine may sleep; then it is deleted. At
	// least 1m. A machine that slept longer than its kubelet's client
	// certificate is valid cannot join again (docs/concepts.md).
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="sleep.deleteAfter must be at least 1m (and at most 2562047h)"
	DeleteAfter *metav1.Duration `json:"deleteAfter,omitempty"`
	// Reasons whose removals suspend instead of delete: Empty and
	// Underutilized. Unset: both.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:rule="self.all(r, r in ['Empty', 'Underutilized'])",message="sleep.reasons may name only Empty and Underutilized: a drifted, expired or repaired node is always deleted, never put to sleep"
	Reasons []DisruptionReason `json:"reasons,omitempty"`
	// Price per hour of a sleeping machine (its disk, a kept address), for
	// the pool's cost as reported; what a machine costs once woken is its
	// shape's price. Unset: 0.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price,omitempty"`
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
	// Nodes is a count ("3", at most 9 digits) or a percentage of the
	// pool's nodes ("10%", at most 100%).
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self.matches('^((100|[0-9]{1,2})%|[0-9]{1,9})$')",message="budget nodes must be a count of at most 9 digits, such as 3, or a percentage of at most 100%, such as 10%"
	Nodes string `json:"nodes"`
	// Reasons the budget applies to; unset means all.
	// +optional
	// +listType=set
	Reasons []DisruptionReason `json:"reasons,omitempty"`
	// Schedule (cron syntax, UTC) at which the budget becomes active: a
	// descriptor (@daily, @hourly, ...) or the five fields minute, hour,
	// day of month, month and day of week, each a list of *, numbers or
	// names, ranges and steps in that field's bounds. A schedule that names
	// only days no month has (30 or 31 February, 31 April) never fires and
	// is refused.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]?)?(,([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]?)?)*[ ]+([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]?)?(,([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]?)?)*[ ]+([*]|[?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]?)?(,([*]|[?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]?)?)*[ ]+([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]?)?(,([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]?)?)*[ ]+([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]?)?(,([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]?)?)*)$')",message="schedule must be a descriptor (@yearly, @monthly, @weekly, @daily, @hourly) or five cron fields: minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat, each *, a value, a range a-b or a list, with an optional step /n of 1 to 99"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ ]+[ ]+[^ ]+[ ]+(30|31)(-(30|31))?(/[0-9]+)?(,(30|31)(-(30|31))?(/[0-9]+)?)*[ ]+(0?2|(?i:feb))(,(0?2|(?i:feb)))*[ ]+[*?]$')",message="schedule never fires: February has no day 30 or 31"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^ ]+[ ]+[^ ]+[ ]+31(/[0-9]+)?(,31(/[0-9]+)?)*[ ]+(0?[2469]|11|(?i:feb|apr|jun|sep|nov))(,(0?[2469]|11|(?i:feb|apr|jun|sep|nov)))*[ ]+[*?]$')",message="schedule never fires: none of its months has a day 31"
	Schedule *string `json:"schedule,omitempty"`
	// Duration the budget stays active after each scheduled start, at
	// least 1m (a schedule fires at most once a minute).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="budget duration must be at least 1m (and at most 2562047h)"
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

// NodePool says what nodes may exist. Its name is a DNS-1123 label of at
// most 57 characters: its claims are named <pool>-<5 characters>, and a
// claim's name is a node's host name and a label value, both at most 63.
//
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 57",message="metadata.name: a NodePool's name must be at most 57 characters, so its claims' names (<pool>-<5 characters>) fit in 63"
// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self.metadata.name).hasValue()",message="metadata.name: a NodePool's name must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit): it begins its nodes' host names"
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
