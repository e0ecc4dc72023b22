package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeClaimSpec is one node wanted: from which pool, of which shape, meeting
// which requirements. It never changes after creation.
type NodeClaimSpec struct {
	// NodePoolRef names the pool the claim belongs to.
	NodePoolRef NodePoolReference `json:"nodePoolRef"`

	// Shape of the machine.
	Shape ClaimShape `json:"shape"`

	// Requirements the node was sized for and must meet.
	// +optional
	Requirements NodeClaimRequirements `json:"requirements,omitempty"`

	// Taints the node registers with.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self.all(t, !format.qualifiedName().validate(t.key).hasValue())",message="spec.taints: every key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.value) || !format.labelValue().validate(t.value).hasValue())",message="spec.taints: every value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="spec.taints: effect must be NoSchedule, PreferNoSchedule or NoExecute"
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",message="spec.taints: a key may appear only once per effect"
	Taints []corev1.Taint `json:"taints,omitempty"`

	// StartupTaints the node registers with and that something else removes.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self.all(t, !format.qualifiedName().validate(t.key).hasValue())",message="spec.startupTaints: every key must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.value) || !format.labelValue().validate(t.value).hasValue())",message="spec.startupTaints: every value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="spec.startupTaints: effect must be NoSchedule, PreferNoSchedule or NoExecute"
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",message="spec.startupTaints: a key may appear only once per effect"
	StartupTaints []corev1.Taint `json:"startupTaints,omitempty"`

	// TerminationGracePeriod is how long draining may take before the
	// remaining pods are deleted without regard for disruption budgets.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="terminationGracePeriod must be a duration of at most 2562047h"
	TerminationGracePeriod *metav1.Duration `json:"terminationGracePeriod,omitempty"`
}

// NodePoolReference names a NodePool.
type NodePoolReference struct {
	// Name of the NodePool; a NodePool's name has at most 57 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=57
	Name string `json:"name"`
}

// ClaimShape is the machine size chosen for a claim.
// +kubebuilder:validation:XValidation:rule="(has(self.cpu) && string(self.cpu).matches('[eE][+-]?[0-9]{3}')) || (has(self.memory) && string(self.memory).matches('[eE][+-]?[0-9]{3}')) || (quantity(string(self.cpu)).isGreaterThan(quantity('0')) && quantity(string(self.memory)).isGreaterThan(quantity('0')))",message="shape cpu and memory must be greater than zero"
type ClaimShape struct {
	// Name of the shape (the instance type).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// CPU of the machine, at most 10000 cores.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('10000')) <= 0)",message="shape cpu must be at most 10000 (cores of one machine)"
	CPU resource.Quantity `json:"cpu"`
	// Memory of the machine, at most 64Ti.
	// +kubebuilder:validation:XValidation:rule="string(self).matches('[eE][+-]?[0-9]{3}') || (quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="shape memory must be at most 64Ti (the memory of one machine)"
	Memory resource.Quantity `json:"memory"`
	// Price per hour, when known.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price,omitempty"`
	// ExtendedResources of the machine, as its pool's shape names them
	// (nvidia.com/gpu: 1): what the provider attaches, and what the node
	// is expected to advertise.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) <= 8",message="extendedResources: at most 8 kinds of device"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.contains('/') && !k.contains('kubernetes.io/') && !k.startsWith('requests.') && !format.qualifiedName().validate(k).hasValue())",message="extendedResources: every name must be an extended resource: a domain-prefixed name (example.com/device) outside kubernetes.io"
	// +kubebuilder:validation:XValidation:rule="self.all(k, string(self[k]).matches('^[1-9][0-9]{0,3}$'))",message="extendedResources: every count must be a whole number from 1 to 9999"
	ExtendedResources corev1.ResourceList `json:"extendedResources,omitempty"`
}

// NodeClaimRequirements are what a claim was sized for.
type NodeClaimRequirements struct {
	// Resources requested by the pods the claim was made for, DaemonSet
	// overhead included.
	// +optional
	Resources corev1.ResourceList `json:"resources,omitempty"`
	// NodeSelector requirements the node must meet (zone, for example).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	NodeSelector []corev1.NodeSelectorRequirement `json:"nodeSelector,omitempty"`
}

// NodeClaimStatus is where the claim's node stands.
type NodeClaimStatus struct {
	// ProviderID of the machine, as the Node's spec.providerID will say.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// NodeProviderName names the NodeProvider that made the machine,
	// recorded by the controller when it launches it; the machine is
	// deleted through it even after the pool is gone.
	// +optional
	NodeProviderName string `json:"nodeProviderName,omitempty"`
	// NodeName of the Node that registered for the machine.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Capacity of the machine.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// Allocatable resources of the node.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// BootstrapToken is the join token the machine was given: its id and
	// expiry, never its secret.
	// +optional
	BootstrapToken *BootstrapTokenStatus `json:"bootstrapToken,omitempty"`
	// Conditions: Launched, Registered, Initialized, Ready, Drifted, Empty,
	// Consolidatable, Disrupting, Terminating.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BootstrapTokenStatus identifies a claim's bootstrap token without its
// secret.
type BootstrapTokenStatus struct {
	// ID of the token: the public half, also in the Secret's name
	// (kube-system/bootstrap-token-<id>) and in the user name the machine
	// authenticates as (system:bootstrap:<id>).
	// +kubebuilder:validation:Pattern=`^[a-z0-9]{6}$`
	ID string `json:"id"`
	// ExpiresAt is when the API server stops accepting the token: the
	// claim's creation plus the pool's registration timeout.
	ExpiresAt metav1.Time `json:"expiresAt"`
	// RevokedAt is when the token was deleted because the node registered.
	// +optional
	RevokedAt *metav1.Time `json:"revokedAt,omitempty"`
}

// NodeClaim is one node wanted. The controller writes them; a person may too.
// Its name is at most 63 characters: it is the node's host name and the
// value of the claimscale.io/nodeclaim label.
//
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name: a NodeClaim's name must be at most 63 characters, as it is its node's host name and a label value"
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.nodePoolRef.name`
// +kubebuilder:printcolumn:name="Shape",type=string,JSONPath=`.spec.shape.name`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.requirements.nodeSelector[?(@.key=="topology.kubernetes.io/zone")].values[0]`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.conditions[?(@.type=="Suspended")].reason`,description="Where the machine stands in its sleep: Suspending, Suspended (asleep, no Node), Waking, Awake; empty if it never slept"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.status.providerID`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type NodeClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	Spec   NodeClaimSpec   `json:"spec"`
	Status NodeClaimStatus `json:"status,omitempty"`
}

// NodeClaimList is a list of NodeClaims.
//
// +kubebuilder:object:root=true
type NodeClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeClaim `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodeClaim{}, &NodeClaimList{})
}
