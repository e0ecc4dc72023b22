package v1alpha1

// Condition types of NodeClaim.
const (
	// ConditionLaunched: the provider made (or adopted) the machine.
	ConditionLaunched = "Launched"
	// ConditionRegistered: a Node with the machine's providerID (or name) joined.
	ConditionRegistered = "Registered"
	// ConditionInitialized: the Node is Ready and its startup taints are gone.
	ConditionInitialized = "Initialized"
	// ConditionReady summarises Launched, Registered and Initialized.
	ConditionReady = "Ready"
	// ConditionDrifted: the pool's template or shapes changed since the
	// claim was made.
	ConditionDrifted = "Drifted"
	// ConditionEmpty: the node carries no pods but DaemonSet and mirror pods.
	ConditionEmpty = "Empty"
	// ConditionConsolidatable: the node's pods would fit elsewhere.
	ConditionConsolidatable = "Consolidatable"
	// ConditionDisrupting: the claim was chosen for voluntary removal.
	ConditionDisrupting = "Disrupting"
	// ConditionTerminating: the claim is being drained and deprovisioned.
	ConditionTerminating = "Terminating"
	// ConditionFailed: the claim gave up for good (its launch found no
	// capacity, or its machine never registered) and its machine is gone;
	// the claim stays until someone deletes it. Only where failed claims
	// are kept (the externalgrpc mode, so cluster-autoscaler sees the
	// failure); elsewhere a failed claim is deleted at once.
	ConditionFailed = "Failed"
	// ConditionSuspended: the claim's machine sleeps (True: stopped, kept
	// with its disk and identity, no Node), or is going to sleep or waking
	// (False, with the reason). Absent on a claim that never slept.
	ConditionSuspended = "Suspended"
)

// IsDisruptionCondition says whether a claim condition is one the
// disruption controller writes (Drifted, Empty, Consolidatable,
// Disrupting; repair and garbage collection set Disrupting too). The claim
// lifecycle applies every other condition, and server-side apply keeps
// each writer to its own, so the two lists are this one function.
func IsDisruptionCondition(conditionType string) bool {
	switch conditionType {
	case ConditionDrifted, ConditionEmpty, ConditionConsolidatable, ConditionDisrupting:
		return true
	}
	return false
}

// Reasons of a claim's Consolidatable condition: why its node is being
// consolidated, or (False) why it stays.
const (
	// ConsolidatableReasonConsolidating: chosen for consolidation.
	ConsolidatableReasonConsolidating = "Consolidating"
	// ConsolidatableReasonPodsDoNotFit: its pods fit nowhere cheaper.
	ConsolidatableReasonPodsDoNotFit = "PodsDoNotFit"
	// ConsolidatableReasonDoNotDisrupt: the node or one of its pods is
	// annotated claimscale.io/do-not-disrupt.
	ConsolidatableReasonDoNotDisrupt = "DoNotDisrupt"
	// ConsolidatableReasonPodDisruptionBudget: a PodDisruptionBudget of
	// one of its pods allows no eviction now.
	ConsolidatableReasonPodDisruptionBudget = "PodDisruptionBudget"
	// ConsolidatableReasonPodWithoutController: one of its pods has no
	// controller and would not come back.
	ConsolidatableReasonPodWithoutController = "PodWithoutController"
	// ConsolidatableReasonDisruptionBudget: the pool's disruption budget
	// allows no more nodes to go now; it goes when the budget allows.
	ConsolidatableReasonDisruptionBudget = "DisruptionBudget"
	// ConsolidatableReasonMinNodes: its pods fit elsewhere, but its pool
	// would go below minNodes.
	ConsolidatableReasonMinNodes = "MinNodes"
	// ConsolidatableReasonHeadroom: its pods fit elsewhere, but its pool's
	// headroom would no longer fit.
	ConsolidatableReasonHeadroom = "Headroom"
	// ConsolidatableReasonPendingPods: removing the node would leave pods
	// that are waiting to be placed, and have room now, without it.
	ConsolidatableReasonPendingPods = "PendingPods"
	// ConsolidatableReasonConsolidateAfter: its pods changed (or it
	// emptied) less than its pool's consolidateAfter ago. Set only over
	// an earlier reason that no longer holds.
	ConsolidatableReasonConsolidateAfter = "ConsolidateAfter"
)

// Condition types of NodePool and NodeProvider.
const (
	// ConditionProviderReady: the pool's provider exists, is Ready and
	// offers the pool's shapes.
	ConditionProviderReady = "ProviderReady"
	// ConditionValidated: the provider's settings and credentials were read.
	ConditionValidated = "Validated"
	// ConditionDegraded (NodeProvider): the provider works, and reports
	// problems a person must fix that fail no single call: a leftover VM
	// locked mid-clone, a tag policy that refuses our tags, the last
	// Create its API refused.
	ConditionDegraded = "Degraded"
)
