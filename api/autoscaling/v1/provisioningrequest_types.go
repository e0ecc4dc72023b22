package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProvisioningRequest is a way to express additional capacity that we
// would like to provision in the cluster. The autoscaler uses it in its
// calculations and says whether the capacity is available or actively
// adds capacity if needed.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=provreq;provreqs
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ProvisioningRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec contains specification of the ProvisioningRequest object. The
	// spec is immutable: to change a request, delete it and create a new
	// one.
	//
	// +kubebuilder:validation:Required
	Spec ProvisioningRequestSpec `json:"spec"`
	// Status of the ProvisioningRequest, reconciled by the autoscaler.
	//
	// +optional
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestList is a list of ProvisioningRequests.
//
// +kubebuilder:object:root=true
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata"`
	// +optional
	Items []ProvisioningRequest `json:"items"`
}

// ProvisioningRequestSpec is a specification of additional pods for which
// we would like to provision additional resources in the cluster.
type ProvisioningRequestSpec struct {
	// PodSets lists groups of pods for which we would like to provision
	// resources.
	//
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	PodSets []PodSet `json:"podSets"`

	// ProvisioningClassName describes the mode of provisioning the
	// resources: check-capacity.autoscaling.x-k8s.io (does the request fit
	// the cluster as it is) or best-effort-atomic-scale-up.autoscaling.x-k8s.io
	// (provision all of it or nothing). Classes ending in kubernetes.io are
	// reserved for the modes the Kubernetes projects define.
	//
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	ProvisioningClassName string `json:"provisioningClassName"`

	// Parameters contains all other parameters classes may require.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:MaxProperties=100
	Parameters map[string]Parameter `json:"parameters"`
}

// Parameter is limited to 255 characters.
// +kubebuilder:validation:MaxLength=255
type Parameter string

// PodSet represents one group of pods for Provisioning Request to
// provision capacity.
type PodSet struct {
	// PodTemplateRef is a reference to a PodTemplate object that is
	// representing pods that will consume this reservation (must be within
	// the same namespace). Users need to make sure that the fields relevant
	// to scheduler (e.g. node selector tolerations) are consistent between
	// this template and actual pods consuming the Provisioning Request.
	//
	// +kubebuilder:validation:Required
	PodTemplateRef Reference `json:"podTemplateRef"`
	// Count contains the number of pods that will be created with a given
	// template.
	//
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
}

// Reference represents reference to an object within the same namespace.
type Reference struct {
	// Name of the referenced object.
	//
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// ProvisioningRequestStatus represents the status of the resource
// reservation.
type ProvisioningRequestStatus struct {
	// Conditions represent the observations of a Provisioning Request's
	// current state: whether the capacity was found or created, or why
	// not.
	//
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions"`

	// ProvisioningClassDetails contains all other values custom
	// provisioning classes may want to pass to end users.
	//
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails"`
}

// Detail is limited to 32768 characters.
// +kubebuilder:validation:MaxLength=32768
type Detail string

// The condition types of a ProvisioningRequest, as the API defines them.
const (
	// ConditionAccepted: the autoscaler took the request and will try to
	// provision it.
	ConditionAccepted = "Accepted"
	// ConditionProvisioned: the capacity is there (check-capacity) or was
	// made and registered (atomic scale-up).
	ConditionProvisioned = "Provisioned"
	// ConditionFailed: the capacity cannot be obtained; the reason and
	// message say why. Terminal.
	ConditionFailed = "Failed"
	// ConditionBookingExpired: the request was provisioned and its booked
	// capacity is no longer kept, because its pods arrived or its time ran
	// out.
	ConditionBookingExpired = "BookingExpired"
	// ConditionCapacityRevoked: capacity provisioned for the request is
	// no longer there.
	ConditionCapacityRevoked = "CapacityRevoked"
)

// The provisioning classes the API defines.
const (
	// ClassCheckCapacity: does the request fit the cluster as it is and as
	// it is already growing, without adding anything.
	ClassCheckCapacity = "check-capacity.autoscaling.x-k8s.io"
	// ClassBestEffortAtomicScaleUp: add all the nodes the request needs,
	// or none.
	ClassBestEffortAtomicScaleUp = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
)

// Pod annotations that tie a pod to the request whose capacity it uses
// (Kueue sets both on the pods of a workload it admitted through a
// ProvisioningRequest admission check).
const (
	AnnotationConsumeProvisioningRequest = "autoscaling.x-k8s.io/consume-provisioning-request"
	AnnotationProvisioningClassName      = "autoscaling.x-k8s.io/provisioning-class-name"
	// AnnotationConsumeProvisioningRequestLegacy is the first proposal's
	// name for AnnotationConsumeProvisioningRequest, still honoured.
	AnnotationConsumeProvisioningRequestLegacy = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
)

// Parameters of a request claimscale reads.
const (
	// ParameterNoRetry "true": a request that does not fit now fails
	// (Failed=True) instead of waiting for capacity (Provisioned=False).
	ParameterNoRetry = "noRetry"
)

func init() {
	SchemeBuilder.Register(&ProvisioningRequest{}, &ProvisioningRequestList{})
}
