package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CapacityBuffer is the configuration an autoscaler uses to keep spare
// capacity in a cluster: placeholder pods of a template that the
// autoscaler keeps room for, so that pods like them start without waiting
// for a node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=capacitybuffers,scope=Namespaced,shortName=cb
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Strategy",type="string",JSONPath=".spec.provisioningStrategy",description="The strategy to be used."
// +kubebuilder:printcolumn:name="PodTemplate",type="string",JSONPath=".status.podTemplateRef.name",description="The name of the PodTemplate used."
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas",description="The actual number of buffer chunks."
// +kubebuilder:printcolumn:name="ConditionsType",type="string",JSONPath=".status.conditions[*].type",description="List of all condition types."
// +kubebuilder:printcolumn:name="ConditionsStatus",type="string",JSONPath=".status.conditions[*].status",description="List of all condition statuses."
// +kubebuilder:printcolumn:name="ConditionsReason",type="string",JSONPath=".status.conditions[*].reason",description="List of all condition reasons."
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="The age of the CapacityBuffer."
type CapacityBuffer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec defines the desired characteristics of the buffer.
	// +kubebuilder:validation:Required
	Spec CapacityBufferSpec `json:"spec"`

	// Status represents the current state of the buffer and its readiness
	// for provisioning.
	// +optional
	Status CapacityBufferStatus `json:"status,omitempty"`
}

// LocalObjectRef contains the name of the object being referred to.
type LocalObjectRef struct {
	// Name of the object.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ResourceName is the name identifying a resource, as core/v1's.
type ResourceName string

// ScalableRef contains name, kind and API group of an object that can be
// scaled.
type ScalableRef struct {
	// APIGroup of the scalable object; empty for the core API group.
	// +optional
	APIGroup string `json:"apiGroup,omitempty"`
	// Kind of the scalable object (e.g., "Deployment", "StatefulSet").
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name of the scalable object.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ResourceList is a set of (resource name, quantity) pairs, as core/v1's.
type ResourceList map[ResourceName]resource.Quantity

// CapacityBufferSpec defines the desired state of CapacityBuffer.
// +kubebuilder:validation:XValidation:rule="!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",message="If X is set, replicas or limits must also be set"
// +kubebuilder:validation:XValidation:rule="!(has(self.podTemplateRef) && has(self.scalableRef))",message="You must define either PodTemplateRef or ScalableRef, but not both"
type CapacityBufferSpec struct {
	// ProvisioningStrategy defines how the buffer is utilized.
	// "buffer.x-k8s.io/active-capacity" is the default: the autoscaler
	// keeps room for the buffer's placeholder pods.
	// +kubebuilder:default="buffer.x-k8s.io/active-capacity"
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`

	// PodTemplateRef is a reference to a PodTemplate in the same
	// namespace that declares the shape of a single chunk of the buffer.
	// Exactly one of podTemplateRef and scalableRef should be specified.
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`

	// ScalableRef is a reference to an object of a kind that has a scale
	// subresource; its pod template is a chunk of the buffer.
	// Exactly one of podTemplateRef and scalableRef should be specified.
	// +optional
	ScalableRef *ScalableRef `json:"scalableRef,omitempty"`

	// Replicas defines the desired number of buffer chunks. The desired
	// number is the larger of replicas and the replicas computed from
	// percentage (where set), capped by limits (where set). With neither
	// replicas nor percentage, as many chunks as fit within limits.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=false
	Replicas *int32 `json:"replicas,omitempty"`

	// Percentage defines the buffer as a percentage of the scalableRef's
	// current replicas, rounded up. Only with scalableRef.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=false
	Percentage *int32 `json:"percentage,omitempty"`

	// Limits, if specified, limit the number of chunks by their total
	// resource requests (e.g., cpu, memory).
	// +optional
	Limits *ResourceList `json:"limits,omitempty"`
}

// CapacityBufferStatus defines the observed state of CapacityBuffer.
type CapacityBufferStatus struct {
	// PodTemplateRef is the observed reference to the PodTemplate that
	// was used to provision the buffer.
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`

	// Replicas is the actual number of buffer chunks currently
	// provisioned.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// PodTemplateGeneration is the observed generation of the PodTemplate.
	// +optional
	PodTemplateGeneration *int64 `json:"podTemplateGeneration,omitempty"`

	// Conditions: ReadyForProvisioning (the buffer's pods are known),
	// Provisioning (the autoscaler keeps room for them) and
	// LimitedByQuotas.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ProvisioningStrategy defines how the buffer should be utilized.
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`
}

// CapacityBufferList contains a list of CapacityBuffer objects.
//
// +kubebuilder:object:root=true
type CapacityBufferList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapacityBuffer `json:"items"`
}

// ActiveCapacity is the provisioning strategy claimscale serves: room is
// kept for the buffer's pods as headroom of the pools they can use.
const ActiveCapacity = "buffer.x-k8s.io/active-capacity"

// The condition types of a CapacityBuffer, as the API defines them.
const (
	// ConditionReadyForProvisioning: the buffer's pod template and
	// replicas are resolved (status.podTemplateRef, status.replicas).
	ConditionReadyForProvisioning = "ReadyForProvisioning"
	// ConditionProvisioning: the autoscaler keeps room for the buffer;
	// False when it cannot (no pool can hold its pods).
	ConditionProvisioning = "Provisioning"
	// ConditionLimitedByQuotas: the buffer is smaller than asked because
	// of a ResourceQuota.
	ConditionLimitedByQuotas = "LimitedByQuotas"
)

func init() {
	SchemeBuilder.Register(&CapacityBuffer{}, &CapacityBufferList{})
}
