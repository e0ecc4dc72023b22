package scheduling

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Cluster is what a decision is made on.
type Cluster struct {
	// Pools new nodes may come from.
	Pools []Pool
	// Nodes that exist. Nodes being deleted are left out of the simulation.
	Nodes []*corev1.Node
	// Pods bound to those nodes (spec.nodeName set). Terminated pods and
	// pods of unknown nodes are ignored.
	Pods []*corev1.Pod
	// Existing, when set and told of every object, gives the NodeInfos of
	// Nodes with their pods instead of Pods: kept up to date by the
	// informers' handlers, they are built again only where something
	// changed. Pods is then not read.
	Existing *Existing
	// InFlight claims: launched, not yet a Node. Each becomes a phantom
	// node built from its pool's template, so a booting machine absorbs
	// pods instead of being bought twice. A claim named like one of Nodes
	// is skipped: the real node counts.
	InFlight []InFlight
	// Sleeping claims: their machine is stopped and has no Node. Each is
	// an offering of its pool with the claim's shape and zone, opened
	// before any new node of the pool when a pod fits it; the NewNode
	// made of it names the claim to wake.
	Sleeping []Sleeping
	// DaemonSets whose pods go on every template and phantom node they
	// would run on.
	DaemonSets []*appsv1.DaemonSet
	// Namespaces, for pod affinity terms with namespace selectors.
	Namespaces []*corev1.Namespace
	// Storage objects, for pods with persistent volumes.
	Storage Storage
	// DRA objects, for pods with ResourceClaims: ResourceSlices of real
	// nodes, ResourceClaims and DeviceClasses. The devices of new and
	// booting nodes come from their shapes' template slices.
	DRA DRA
}

// Storage is what the volume plugins look up.
type Storage struct {
	PersistentVolumeClaims []*corev1.PersistentVolumeClaim
	PersistentVolumes      []*corev1.PersistentVolume
	StorageClasses         []*storagev1.StorageClass
	CSINodes               []*storagev1.CSINode
	CSIDrivers             []*storagev1.CSIDriver
}

// Pool is a NodePool with what the caller resolved for it.
type Pool struct {
	NodePool *v1alpha1.NodePool
	// Shapes the pool may make (see PoolShapes).
	Shapes Shapes
	// Zones new nodes may be put in; each becomes the node's
	// topology.kubernetes.io/zone. None means no zone label.
	Zones []string
	// InUse is what counts against the pool's limits already: every live
	// node and claim of the pool, booting ones included.
	InUse Usage
	// Unavailable names shapes in capacity backoff; no new node gets them.
	// For a flexible pool any entry takes the whole range out: a host that
	// cannot make one size rarely makes another.
	Unavailable []string
	// UnavailableIn names, by zone, fixed shapes in capacity backoff in
	// that zone only: no new node of the zone gets them, other zones do.
	UnavailableIn map[string][]string
	// NoneFree names shapes of a fixed inventory (bare-metal servers) with
	// no machine free now (every one is on, or the provider is at its cap
	// on machines powered on), each with what holds its machines as the
	// provider says. No new node gets them, as Unavailable, and a pod
	// refused for them is told so.
	NoneFree map[string]string
	// Free counts, for shapes of a fixed inventory with machines free, how
	// many new nodes of the shape the round may open (one per server
	// off). A shape not named has no such count.
	Free map[string]int
}

// Usage is what a pool holds.
type Usage struct {
	Nodes  int64
	CPU    resource.Quantity
	Memory resource.Quantity
}

// InFlight is a claim whose machine is launched but has not registered.
type InFlight struct {
	// Name of the claim, used as the phantom node's name.
	Name  string
	Pool  string
	Shape Shape
	Zone  string
	// Pods are pending pods an earlier decision planned on the claim's
	// node. They count there as if bound (its room, the spreads and
	// affinities that select them) and are not placed again: a later
	// decision that packed them anew could move a pod off the node it
	// was bought for while the node boots.
	Pods []*corev1.Pod
}

// Sleeping is a claim whose machine sleeps and may be woken: a machine of
// fixed shape and zone that is cheaper and quicker to start than a new one.
type Sleeping struct {
	// Name of the claim, which is what is woken.
	Name  string
	Pool  string
	Shape Shape
	Zone  string
}

// Input is one provisioning decision's question.
type Input struct {
	Cluster
	// Pending pods to place. Pods already bound (spec.nodeName set) and
	// terminated pods are ignored.
	Pending []*corev1.Pod
}

// Result is a provisioning decision.
type Result struct {
	// NewNodes to create, in the order they were opened.
	NewNodes []NewNode
	// Placements of pending pods onto existing and in-flight nodes.
	Placements []Placement
	// Unschedulable pods, with why no pool can take them.
	Unschedulable []Unschedulable
}

// NewNode is a node that should be created.
type NewNode struct {
	// Name the node had in the simulation; unique within the decision.
	Name string
	Pool string
	// Shape is the cheapest of the pool's shapes that holds Pods plus the
	// DaemonSet pods that would run there.
	Shape Shape
	Zone  string
	// Pods the node was opened for.
	Pods []*corev1.Pod
	// Requests of Pods, summed.
	Requests corev1.ResourceList
	// DaemonSetRequests of the DaemonSet pods that would run on the node.
	DaemonSetRequests corev1.ResourceList
	// Requirements the machine must meet, to record on the claim (the zone
	// the simulation put it in).
	Requirements []corev1.NodeSelectorRequirement
	// Wake names the sleeping claim (Cluster.Sleeping) whose machine is
	// woken for this node instead of a new claim; empty for a new machine.
	// Shape and Zone are then the claim's.
	Wake string
}

// Placement puts a pod on a node.
type Placement struct {
	Pod  *corev1.Pod
	Node string
}

// Unschedulable is a pod nothing can take.
type Unschedulable struct {
	Pod *corev1.Pod
	// Reason names each pool and what stopped it, e.g.
	// `pool "gpu": node(s) had untolerated taint {gpu: true}; pool "small": limit nodes=3 reached`.
	Reason string
	// Pools holds each pool's refusal, in pool order, when the pod failed
	// for want of a new node; empty when the reason concerns no pool (no
	// remaining node has room, a topology constraint no node can meet).
	Pools []PoolRefusal
}

// RemovalResult says where the pods of removed nodes would go.
type RemovalResult struct {
	// Placements of the displaced pods on the remaining nodes (and the
	// replacement, if any).
	Placements []Placement
	// Unschedulable displaced pods.
	Unschedulable []Unschedulable
}

// Fits reports whether every displaced pod found a place.
func (r RemovalResult) Fits() bool { return len(r.Unschedulable) == 0 }

// TotalRequests is what the node was sized for: its pods' requests and its
// DaemonSet pods' together.
func (n NewNode) TotalRequests() corev1.ResourceList {
	total := corev1.ResourceList{}
	for _, list := range []corev1.ResourceList{n.Requests, n.DaemonSetRequests} {
		for name, quantity := range list {
			sum := total[name]
			sum.Add(quantity)
			total[name] = sum
		}
	}
	return total
}
