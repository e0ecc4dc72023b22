package clusterapi

// The permissions the clusterapi provider needs in the cluster that holds
// the Machines when it is the one claimscale runs in (with a management
// kubeconfig, that kubeconfig's identity needs them there instead): read
// the Cluster and MachineDeployments, make and delete Machines, read the
// templates and create their clones. Infrastructure and bootstrap kinds
// are any provider's, so their groups are granted whole. `make manifests`
// generates config/rbac/clusterapi/role.yaml from these markers; the Helm
// chart grants it only with clusterAPIProvider.enabled.
//
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machinedeployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io;bootstrap.cluster.x-k8s.io,resources=*,verbs=get;list;watch;create
