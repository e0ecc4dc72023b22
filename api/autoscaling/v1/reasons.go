package v1

// Reasons of a ProvisioningRequest's conditions. Those cluster-autoscaler
// also writes have its names, so that tools reading either agree;
// docs/troubleshooting.md says what to do about each.
const (
	// ReasonAccepted (Accepted=True): claimscale serves the request.
	ReasonAccepted = "Accepted"
	// ReasonPodTemplateNotFound (Accepted=False, Provisioned=False): a pod
	// set names a PodTemplate that does not exist; the request is looked
	// at again when it does.
	ReasonPodTemplateNotFound = "PodTemplateNotFound"
	// ReasonQuotaExceeded (Provisioned=False): a ResourceQuota of the
	// namespace has no room for the request's pods, so they could not be
	// made; nothing is bought until it has.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonCapacityIsNotFound (Provisioned=False, or Failed=True when it
	// cannot fit even in empty pools or the request says noRetry): the
	// pods fit nowhere now.
	ReasonCapacityIsNotFound = "CapacityIsNotFound"
	// ReasonCapacityIsFound (check-capacity, Provisioned=True): the pods
	// fit on the nodes there are and those booting.
	ReasonCapacityIsFound = "CapacityIsFound"
	// ReasonCapacityIsBeingProvisioned (atomic, Provisioned=False): the
	// claims are bought, their nodes are not all Ready yet.
	ReasonCapacityIsBeingProvisioned = "CapacityIsBeingProvisioned"
	// ReasonCapacityIsProvisioned (atomic, Provisioned=True): every node
	// bought for the request is Ready.
	ReasonCapacityIsProvisioned = "CapacityIsProvisioned"
	// ReasonLaunchFailed (Failed=True): a claim of the request could not
	// be launched or its node did not register; every claim of the
	// request was removed.
	ReasonLaunchFailed = "LaunchFailed"
	// ReasonCapacityBookingConsumed (BookingExpired=True): all the
	// request's pods are bound; the booking ends.
	ReasonCapacityBookingConsumed = "CapacityBookingConsumed"
	// ReasonCapacityReservationTimeExpired (BookingExpired=True): the
	// booking time passed before the pods arrived.
	ReasonCapacityReservationTimeExpired = "CapacityReservationTimeExpired"
	// ReasonNodeRemoved (CapacityRevoked=True): a node bought for the
	// request went away before its pods arrived.
	ReasonNodeRemoved = "NodeRemoved"
)
