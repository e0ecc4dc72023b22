package simulated

// The permissions the simulated provider needs besides the controller's
// own: its registrar creates the Nodes of simulated machines (and the
// ResourceSlices their simulated DRA drivers publish), and machines
// are kept as ConfigMaps in the controller's namespace, with the user data
// they boot with in Secrets beside them. `make manifests`
// generates config/rbac/simulated/role.yaml from these markers; the Helm
// chart grants it only with simulatedProvider.enabled.
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=create
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;create;patch;delete;deletecollection;list
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=claimscale-system,resources=secrets,verbs=get;list;watch;create;update;patch;delete
