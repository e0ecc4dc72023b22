package v1alpha1

// Condition reasons: every reason claimscale writes on a condition of its
// kinds, by the condition it explains. docs/troubleshooting.md has a row for
// each (a test holds the two together). Consolidatable's reasons are in
// conditions.go, Disrupting's are the DisruptionReason values.

// Reasons of a NodeClaim's Launched.
const (
	// ReasonLaunched: the provider made (or found) the machine.
	ReasonLaunched = "Launched"
	// ReasonLaunching: the provider is still making the machine.
	ReasonLaunching = "Launching"
	// ReasonLaunchFailed: the provider refused or failed to make it.
	ReasonLaunchFailed = "LaunchFailed"
	// ReasonBootstrapFailed: the machine's join (token, user data) could
	// not be prepared.
	ReasonBootstrapFailed = "BootstrapFailed"
	// ReasonInsufficientCapacity: the provider has no capacity or quota for
	// the shape. Also a reason of Failed.
	ReasonInsufficientCapacity = "InsufficientCapacity"
	// ReasonNodePoolNotFound: the claim's pool does not exist.
	ReasonNodePoolNotFound = "NodePoolNotFound"
	// ReasonNodeProviderNotFound: the pool's NodeProvider does not exist.
	ReasonNodeProviderNotFound = "NodeProviderNotFound"
	// ReasonProviderUnavailable: the NodeProvider cannot be built. Also a
	// reason of a NodePool's ProviderReady.
	ReasonProviderUnavailable = "ProviderUnavailable"
)

// Reasons of a NodeClaim's Registered.
const (
	ReasonRegistered     = "Registered"
	ReasonWaitingForNode = "WaitingForNode"
	ReasonNodeNotFound   = "NodeNotFound"
	// ReasonRegistrationTimeout: no Node joined in time. Also a reason of
	// Failed.
	ReasonRegistrationTimeout = "RegistrationTimeout"
)

// Reasons of a NodeClaim's Initialized and Ready.
const (
	ReasonInitialized            = "Initialized"
	ReasonNodeNotReady           = "NodeNotReady"
	ReasonStartupTaintsPresent   = "StartupTaintsPresent"
	ReasonReady                  = "Ready"
	ReasonAwaitingReconciliation = "AwaitingReconciliation"
)

// Reasons of a NodeClaim's Terminating.
const (
	ReasonDraining          = "Draining"
	ReasonDeprovisioning    = "Deprovisioning"
	ReasonDeprovisionFailed = "DeprovisionFailed"
	// ReasonWaitingForNodePool and ReasonWaitingForNodeProvider: the claim
	// has a machine whose pool or NodeProvider is gone, so it cannot be
	// deleted.
	ReasonWaitingForNodePool     = "WaitingForNodePool"
	ReasonWaitingForNodeProvider = "WaitingForNodeProvider"
)

// Reasons of a NodeClaim's Suspended.
const (
	// ReasonSuspending: the node is being drained and its machine stopped.
	ReasonSuspending = "Suspending"
	// ReasonSuspended: the machine is stopped and its Node deleted.
	ReasonSuspended = "Suspended"
	// ReasonSuspendFailed: the provider failed to stop the machine; it is
	// asked again with backoff.
	ReasonSuspendFailed = "SuspendFailed"
	// ReasonSuspendNotSupported: the provider cannot stop machines, so the
	// claim is deleted instead.
	ReasonSuspendNotSupported = "SuspendNotSupported"
	// ReasonWaking: the machine was started and its Node has not
	// registered again yet.
	ReasonWaking = "Waking"
	// ReasonAwake: the woken machine's Node registered again.
	ReasonAwake = "Awake"
)

// Reasons of a NodePool's SleepAllowed.
const (
	// ReasonWithinSleepBudget: fewer of the pool's machines sleep than
	// spec.disruption.sleep.machines allows.
	ReasonWithinSleepBudget = "WithinSleepBudget"
	// ReasonSleepBudgetUsedUp: as many sleep as allowed; further removals
	// delete.
	ReasonSleepBudgetUsedUp = "SleepBudgetUsedUp"
	// ReasonPowerNotSupported: the pool's NodeProvider cannot stop and
	// start machines, so its removals delete.
	ReasonPowerNotSupported = "PowerNotSupported"
)

// Reasons of a NodeClaim's Empty.
const (
	ReasonEmpty    = "Empty"
	ReasonNotEmpty = "NotEmpty"
	// ReasonReplacing: a replacement waiting for the pods of the nodes it
	// replaces.
	ReasonReplacing = "Replacing"
)

// Reasons of a NodeClaim's Drifted: what changed since the claim was made.
const (
	ReasonLabelsDrifted        = "LabelsDrifted"
	ReasonTaintsDrifted        = "TaintsDrifted"
	ReasonStartupTaintsDrifted = "StartupTaintsDrifted"
	ReasonKubeletDrifted       = "KubeletDrifted"
	ReasonShapeDrifted         = "ShapeDrifted"
	ReasonProviderDrifted      = "ProviderDrifted"
	ReasonNotDrifted           = "NotDrifted"
)

// Reasons of a NodeClaim's Disrupting besides the DisruptionReason values.
const (
	// DisruptionReasonExpired: past the pool's expireAfter. Not a budget
	// reason: expiration ignores budgets.
	DisruptionReasonExpired DisruptionReason = "Expired"
	// ReasonCancelled: the removal was abandoned.
	ReasonCancelled = "Cancelled"
)

// Reasons of a NodePool's ProviderReady and Ready (ReasonReady and
// ReasonProviderUnavailable above, too).
const (
	ReasonProviderNotFound  = "ProviderNotFound"
	ReasonUnreachable       = "Unreachable"
	ReasonShapesUnavailable = "ShapesUnavailable"
	ReasonNoShapes          = "NoShapes"
	ReasonTemplateInvalid   = "TemplateInvalid"
)

// ConditionExternalHeadroom on a pool with an external headroom: True while
// its scaler answers, False (ExternalScalerUnreachable) while it does not.
const ConditionExternalHeadroom = "ExternalHeadroom"

// Reasons of a NodePool's ExternalHeadroom.
const (
	ReasonScalerAnswering           = "ScalerAnswering"
	ReasonExternalScalerUnreachable = "ExternalScalerUnreachable"
)

// Reasons of a NodePool's RepairAllowed.
const (
	ReasonWithinThreshold  = "WithinThreshold"
	ReasonTooManyUnhealthy = "TooManyUnhealthy"
	ReasonInvalidSettings  = "InvalidSettings"
)

// Reasons of a NodeProvider's Ready (ReasonReady and ReasonUnreachable
// above, too).
const (
	ReasonInvalidConfiguration = "InvalidConfiguration"
	ReasonAPIError             = "APIError"
)
