// Package clusterapi is a provider.Provider that makes Cluster API
// Machines, so claimscale decides when and what (packing, consolidation,
// drift, cost) while any CAPI infrastructure provider (CAPMOX, CAPCS,
// vSphere, OpenStack, Metal3, …) makes the machines.
//
// # The contract with Cluster API (v1beta2)
//
// One claim is one Machine in the Cluster's namespace, named after the
// claim, labelled cluster.x-k8s.io/cluster-name and with claimscale's
// ownership tags (claimscale.io/cluster, /nodepool, /nodeclaim) as labels
// set in the create call. It belongs to no MachineSet or MachineDeployment,
// so nothing in CAPI scales it back; a MachineDeployment a shape names is
// only read for its templates (and its machine labels, but those its
// selector matches, which would let its MachineSets adopt the Machine). The Machine's infrastructure machine and
// bootstrap config are cloned from the shape's templates, as CAPI's
// MachineSet controller clones them (spec.template.spec and metadata, the
// cluster.x-k8s.io/cloned-from-* annotations), named after the claim and
// owned by the Machine from their create on, so deleting the Machine (or
// its garbage collection) takes them along. Create is idempotent by claim:
// every object has the claim's name, and one that exists is adopted when
// its tags say it is the claim's.
//
// CAPI's bootstrap provider renders the join (a KubeadmConfig from the
// KubeadmConfigTemplate): claimscale's pool bootstrap section does not
// apply to this provider, and CreateOptions.UserData is ignored. Node
// labels and taints of the pool must therefore be in the bootstrap
// template as well (kubeletExtraArgs / nodeRegistration), or claimscale
// adds them at registration.
//
// The provider ID is the Machine's spec.providerID, which the Machine
// controller copies from the infrastructure machine once it is
// provisioned. Create waits for it a short while (Config.ProvisionWait)
// and otherwise answers a retryable error that says what CAPI is waiting
// for; the claim's launch retries, and the registration timeout bounds the
// whole wait. Until then List and Get name the Machine by a placeholder,
// clusterapi:///<namespace>/<name>, that Delete accepts.
//
// Failures CAPI reports (the Machine's or the infrastructure machine's
// failureReason/failureMessage, in v1beta2 under
// status.deprecated.v1beta1, or the Machine in phase Failed) are errors of
// Create: capacity-like ones (quota, insufficient resources) are
// InsufficientCapacity, so the pool and shape back off as for any provider;
// the rest are Terminal and show in the claim's Launched condition.
//
// Delete deletes the Machine and returns: CAPI's Machine controller drains
// the node (claimscale has drained it already, under the pool's budgets and
// PodDisruptionBudgets), deletes the infrastructure machine and the Node.
// A Machine without this cluster's claimscale.io/cluster tag is refused.
//
// Shapes come from the pool's fixed shapes that the NodeProvider maps to
// templates. Their size is the infrastructure template's status.capacity
// (the CAPI contract for scale from zero), else the
// capacity.cluster-autoscaler.kubernetes.io/cpu and /memory annotations of
// the MachineDeployment or the template (what cluster-autoscaler's
// clusterapi provider reads), else the pool's own cpu and memory. CAPI has
// no prices: they come from the pool.
//
// The Machines may live in a management cluster other than the workload
// cluster claimscale runs in: the NodeProvider's credentials Secret then
// holds a kubeconfig for it (key "kubeconfig", else "value", the key of
// CAPI's <cluster>-kubeconfig Secrets).
//
// Cluster API objects are handled as unstructured objects: importing
// CAPI's Go types would move claimscale's module dependencies.
package clusterapi
