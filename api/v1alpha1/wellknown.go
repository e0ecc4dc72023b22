package v1alpha1

// Labels, annotations, taints and finalizers that claimscale puts on the
// objects and machines it manages.
const (
	// LabelNodePool names the pool on every node, claim and machine we make.
	LabelNodePool = "claimscale.io/nodepool"
	// LabelNodeClaim names the claim on every node and machine we make.
	LabelNodeClaim = "claimscale.io/nodeclaim"
	// LabelInitialized is set on a node once its claim is Initialized.
	LabelInitialized = "claimscale.io/initialized"
	// LabelNodeProvider on a NodeClaim and its Node names the NodeProvider
	// of its pool, for people and selectors. It is informational: the
	// controller finds a claim's machine through status.nodeProviderName,
	// which only it writes, so a label a user sets cannot point a claim at
	// another provider.
	LabelNodeProvider = "claimscale.io/nodeprovider"
	// LabelBootstrapToken marks a bootstrap token Secret as claimscale's:
	// only Secrets carrying it are ever deleted by claimscale.
	LabelBootstrapToken = "claimscale.io/bootstrap-token"

	// AnnotationDoNotDisrupt on a pod or node blocks voluntary scale-down.
	AnnotationDoNotDisrupt = "claimscale.io/do-not-disrupt"
	// AnnotationTemplateHash records the hash of the pool template and shape
	// a claim was made from, so drift can be detected.
	AnnotationTemplateHash = "claimscale.io/template-hash"
	// AnnotationProviderHash records the hash of the NodeProvider's
	// settings a claim's machine was made with, so drift can be detected.
	AnnotationProviderHash = "claimscale.io/provider-hash"
	// AnnotationReplaces on a replacement claim names the claims it
	// replaces, comma-separated. They are deleted once every claim naming
	// them is Ready; a restart resumes from here.
	AnnotationReplaces = "claimscale.io/replaces"
	// AnnotationDisruptionReason on a replacement claim says why the
	// claims it replaces go: Underutilized, Drifted or Expired.
	AnnotationDisruptionReason = "claimscale.io/disruption-reason"

	// AnnotationReleaseMachine: "true" on a deleted claim whose pool or
	// NodeProvider is gone lets its finalizer come off without deleting
	// the machine, which garbage collection removes once its NodeProvider
	// is back. An administrator's deliberate choice, for a claim that would
	// otherwise wait in Terminating.
	AnnotationReleaseMachine = "claimscale.io/release-machine"

	// AnnotationSuspend on a claim asks for its machine to sleep: its node
	// is drained, the machine stopped and the Node deleted, and the claim
	// kept with Suspended=True. The value is the disruption reason (Empty,
	// Underutilized). Provisioning wakes the machine by removing it.
	AnnotationSuspend = "claimscale.io/suspend"

	// AnnotationProvisioningRequest on a claim names the ProvisioningRequest
	// (namespace/name) it was bought for, all or nothing with the others
	// of the request; AnnotationProvisioningRequestUID is that request's
	// UID (a request deleted and made again under the same name is
	// another), and AnnotationProvisioningRequestClaims how many claims
	// were bought for it together.
	AnnotationProvisioningRequest       = "claimscale.io/provisioning-request"
	AnnotationProvisioningRequestUID    = "claimscale.io/provisioning-request-uid"
	AnnotationProvisioningRequestClaims = "claimscale.io/provisioning-request-claims"

	// TerminationFinalizer holds a claim (and its node) until the machine is
	// gone.
	TerminationFinalizer = "claimscale.io/termination"

	// TaintDisrupted is put on a node being drained so nothing new lands.
	TaintDisrupted = "claimscale.io/disrupted"
	// TaintUnregistered (NoSchedule) is what the nodes claimscale makes
	// register with, through the kubelet's --register-with-taints in the
	// rendered user data, and what registration removes once it has
	// nominated the pods the node was bought for: kube-scheduler sees the
	// node only with those pods' room kept for them.
	TaintUnregistered = "claimscale.io/unregistered"

	// TagCluster, TagNodePool and TagNodeClaim are the ownership tags every
	// machine carries from the call that creates it. A machine without the
	// cluster tag is never touched.
	TagCluster   = "claimscale.io/cluster"
	TagNodePool  = LabelNodePool
	TagNodeClaim = LabelNodeClaim
)
