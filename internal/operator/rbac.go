package operator

// The permissions the controllers use, and no others. `make manifests`
// generates config/rbac/role.yaml from these markers; the Helm chart reads
// the same file.
//
// Cluster-wide:
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch;update
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices;resourceclaims;deviceclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=claimscale.io,resources=nodeproviders;nodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=claimscale.io,resources=nodeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=claimscale.io,resources=nodeproviders/status;nodepools/status;nodeclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=claimscale.io,resources=nodeclaims/finalizers,verbs=update
// ProvisioningRequests (and the PodTemplates their pod sets name, the
// ResourceQuotas their pods must fit) and CapacityBuffers (and the
// workloads a buffer's scalableRef names), served when their CRDs are
// installed:
// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests;capacitybuffers,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling.x-k8s.io,resources=provisioningrequests/status;capacitybuffers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=podtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;replicasets;statefulsets,verbs=get
// The metrics endpoint checks each scrape's token with the API server:
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
//
// In the controller's namespace: leader election, the credentials Secrets
// of NodeProviders (the chart adds a Role for each other namespace that
// holds such a Secret) and the pools' user-data templates (ConfigMaps or
// Secrets), all read uncached.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=claimscale-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=secrets,verbs=get
//
// Bootstrap: per-claim token Secrets in kube-system (listed by label, so
// list is needed; only Secrets labelled claimscale.io/bootstrap-token are
// ever deleted), and kubeadm's public cluster-info for the endpoint and CA.
// +kubebuilder:rbac:groups="",namespace=kube-system,resources=secrets,verbs=get;list;create;delete
// +kubebuilder:rbac:groups="",namespace=kube-public,resources=configmaps,verbs=get
//
// Kubelet client certificate requests made with the per-claim tokens are
// approved or denied by claimscale alone (internal/controllers/csrapproval):
// approving and denying both need approve on the signer, and claimscale
// holds it for the kubelet client signer only.
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,resourceNames=kubernetes.io/kube-apiserver-client-kubelet,verbs=approve
//
// Node repair reads the kubelets' heartbeat Leases.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-node-lease,resources=leases,verbs=get;list;watch
//
// The simulated provider's own permissions (creating Nodes, its machine
// records in ConfigMaps, its machines' user data in Secrets) are in
// pkg/provider/simulated/rbac.go, a role of their own that is granted only
// where that provider is enabled.
