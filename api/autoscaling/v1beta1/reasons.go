package v1beta1

// Reasons of a CapacityBuffer's conditions.
const (
	// ReasonResolved (ReadyForProvisioning=True): the template and the
	// replicas are known.
	ReasonResolved = "Resolved"
	// ReasonPodTemplateNotFound, ReasonScalableNotFound and
	// ReasonScalableNotSupported (ReadyForProvisioning=False): what the
	// buffer names is not there, or not a kind claimscale reads; no room
	// is kept for it.
	ReasonPodTemplateNotFound  = "PodTemplateNotFound"
	ReasonScalableNotFound     = "ScalableNotFound"
	ReasonScalableNotSupported = "ScalableNotSupported"
	// ReasonInvalid (ReadyForProvisioning=False): the spec names neither
	// a template nor a workload, or its limits cannot be read.
	ReasonInvalid = "Invalid"
	// ReasonKeptAsHeadroom (Provisioning=True): the buffer's pods are
	// headroom of the pools they can use.
	ReasonKeptAsHeadroom = "KeptAsHeadroom"
	// ReasonNoPoolFits (Provisioning=False): no pool could hold one of
	// the buffer's pods, even empty.
	ReasonNoPoolFits = "NoPoolFits"
	// ReasonNotReady (Provisioning=False): nothing is kept until the
	// buffer is ReadyForProvisioning.
	ReasonNotReady = "NotReadyForProvisioning"
)
