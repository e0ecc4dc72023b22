package clusterstate

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// ObjectSource gives every pod and node of the cluster, read only, and
// the nodes with their pods as the scheduling simulation starts from them
// (nil: built from the pods each time). Objects is one.
type ObjectSource interface {
	Pods() []*corev1.Pod
	Nodes() []*corev1.Node
	Existing() *scheduling.Existing
}

// PoolUsability says which pools can provision now. Open are the pools
// that get claims, as the scheduling simulation sees them; closed, pools
// that get none this round but whose booting machines must still count
// (their provider failed after a good answer). A pool in neither is not
// simulated, and its in-flight claims are left out.
type PoolUsability interface {
	UsablePools(ctx context.Context, pools []v1alpha1.NodePool, claimsByPool map[string][]*v1alpha1.NodeClaim) (open, closed map[string]scheduling.Pool)
}

// Cluster reads the picture of the cluster every decision starts from:
// provisioning, disruption and the kubectl plugin's what-if read the same
// one, so scale-down never disagrees with scale-up.
type Cluster struct {
	// Kube reads claims, pools and DaemonSets (the manager's cache, or
	// the kubectl plugin's read-only client), and pods and nodes when
	// Objects is nil.
	Kube client.Reader
	// Objects, when set, gives the pods and nodes without listing them.
	Objects ObjectSource
	// Writes, when set, are the controller's own writes the cache may not
	// show yet; the picture counts them.
	Writes *Writes
	// Nominations, when set, are the plans of earlier rounds: a pending
	// pod planned on a claim still booting counts on the claim's node
	// (scheduling.InFlight.Pods) and is not pending.
	Nominations *Nominations
}

// Picture is the cluster as a decision sees it. Everything in it is the
// cache's own, not copies: at ten thousand pods the copies were most of a
// round's cost. Nothing may write to it; a node that must look different
// is copied first (withClaimLabels, withoutStartupTaints), as is a claim
// the controller's own writes change.
type Picture struct {
	// Input is the scheduling input: nodes not leaving, the pods bound
	// to nodes, the pods provisioning should find room for (Pending),
	// claims not yet registered (and claims waking, until their Node is
	// back) as in-flight phantom nodes, the DaemonSets, and the pools open
	// or closed.
	scheduling.Input
	// Asleep are the sleeping machines provisioning may wake, for
	// Input.Sleeping when it solves for pending pods. They are not in
	// Input: the other decisions taken on the picture (disruption's
	// replacements, the externalgrpc shim) would take a wake for a new
	// node to create.
	Asleep []scheduling.Sleeping
	// Open are the pools that can get claims now, by name.
	Open map[string]*v1alpha1.NodePool
	// Pools and Claims are every pool and claim, the claims with the
	// controller's own writes the cache does not show yet.
	Pools  []v1alpha1.NodePool
	Claims []v1alpha1.NodeClaim
	// AllPods and AllNodes are every pod and node of the cache.
	AllPods  []*corev1.Pod
	AllNodes []*corev1.Node
}

// Picture reads the cluster from the caches: nodes whose claim is going
// away or being suspended, nodes being deleted and nodes tainted for
// disruption are left out (they hold nothing new), every other node is
// matched to its claim by providerID (else by name) and simulated as that
// claim makes it, claims not yet registered and claims waking are in
// flight, asleep claims of simulated pools are sleeping machines unless
// their pool's template moved on since (disruption deletes those), and
// pods are bound or pending. An asleep claim counts against no pool's
// limits. pools says which pools can provision; nil: none can.
func (c *Cluster) Picture(ctx context.Context, pools PoolUsability) (*Picture, error) {
	picture := &Picture{}
	pods, nodes, err := PodsAndNodes(ctx, c.Objects, c.Kube)
	if err != nil {
		return nil, err
	}
	picture.AllPods, picture.AllNodes = pods, nodes
	input := &picture.Input
	if c.Objects != nil {
		input.Existing = c.Objects.Existing()
	}
	var claimList v1alpha1.NodeClaimList
	if err := c.Kube.List(ctx, &claimList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	var poolList v1alpha1.NodePoolList
	if err := c.Kube.List(ctx, &poolList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	var daemonSets appsv1.DaemonSetList
	if err := c.Kube.List(ctx, &daemonSets, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing DaemonSets: %w", err)
	}
	claims := c.Writes.overlay(claimList.Items)
	picture.Claims, picture.Pools = claims, poolList.Items

	// Nodes whose claim is going away or to sleep, and nodes being
	// drained, hold nothing new.
	leaving := map[string]bool{}
	claimOfNode := newClaimIndex(claims)
	for i := range claims {
		claim := &claims[i]
		if claim.Status.NodeName != "" && (!claim.DeletionTimestamp.IsZero() || claim.Suspending()) {
			leaving[claim.Status.NodeName] = true
		}
	}
	for _, node := range nodes {
		if leaving[node.Name] || !node.DeletionTimestamp.IsZero() || hasDisruptedTaint(node) {
			continue
		}
		if claim := claimOfNode.find(node); claim != nil {
			node = withoutStartupTaints(withClaimLabels(node, claim), claim)
		}
		input.Nodes = append(input.Nodes, node)
	}
	input.Pods = make([]*corev1.Pod, 0, len(pods))
	for _, pod := range pods {
		switch {
		case scheduling.CountedOn(pod) != "":
			input.Pods = append(input.Pods, pod)
		case Provisionable(pod):
			input.Pending = append(input.Pending, pod)
		}
	}
	for i := range daemonSets.Items {
		input.DaemonSets = append(input.DaemonSets, &daemonSets.Items[i])
	}
	if input.DRA, err = listDRA(ctx, c.Kube); err != nil {
		return nil, err
	}

	// By pointer: a claim is a kilobyte, and a round reads every one.
	// What the pools are given counts against their limits, which an
	// asleep machine does not.
	claimsByPool := map[string][]*v1alpha1.NodeClaim{}
	for i := range claims {
		claim := &claims[i]
		if claim.Asleep() {
			continue
		}
		claimsByPool[claim.Spec.NodePoolRef.Name] = append(claimsByPool[claim.Spec.NodePoolRef.Name], claim)
	}
	var open, closed map[string]scheduling.Pool
	if pools != nil {
		open, closed = pools.UsablePools(ctx, poolList.Items, claimsByPool)
	}
	simulated := map[string]bool{}
	for i := range poolList.Items {
		name := poolList.Items[i].Name
		if schedulingPool, ok := open[name]; ok {
			input.Pools = append(input.Pools, schedulingPool)
			simulated[name] = true
		} else if schedulingPool, ok := closed[name]; ok {
			input.Pools = append(input.Pools, schedulingPool)
			simulated[name] = true
		}
	}
	poolByName := make(map[string]*v1alpha1.NodePool, len(poolList.Items))
	for i := range poolList.Items {
		poolByName[poolList.Items[i].Name] = &poolList.Items[i]
	}
	withProviderID := make(map[string]bool, len(nodes))
	for _, node := range nodes {
		if node.Spec.ProviderID != "" {
			withProviderID[node.Spec.ProviderID] = true
		}
	}
	for i := range claims {
		claim := &claims[i]
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		if claim.Asleep() {
			if sleeping, ok := sleepingMachine(claim, poolByName[claim.Spec.NodePoolRef.Name]); ok && simulated[claim.Spec.NodePoolRef.Name] {
				picture.Asleep = append(picture.Asleep, sleeping)
			}
			continue
		}
		if claim.Suspending() {
			continue // its node is leaving, and it is no offering yet
		}
		if waking := claim.Waking(); waking && withProviderID[claim.Status.ProviderID] ||
			!waking && meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
			// Registered (a woken machine again once its Node, matched by
			// providerID only, is back): the real node counts.
			continue
		}
		if !simulated[claim.Spec.NodePoolRef.Name] {
			// Its pool is gone or skipped this round: the claim cannot be
			// simulated as a node of it, and must not stop the others.
			log.FromContext(ctx).V(1).Info("in-flight claim left out: its pool is not provisioning", "nodeClaim", claim.Name, "nodePool", claim.Spec.NodePoolRef.Name)
			continue
		}
		input.InFlight = append(input.InFlight, scheduling.InFlight{
			Name: claim.Name,
			Pool: claim.Spec.NodePoolRef.Name,
			Shape: scheduling.Shape{
				Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory,
				ExtendedResources: claim.Spec.Shape.ExtendedResources,
			},
			Zone: zoneOf(claim.Spec.Requirements.NodeSelector),
		})
	}
	c.keepPlans(input)
	// Only open pools get claims.
	picture.Open = make(map[string]*v1alpha1.NodePool, len(open))
	for name, schedulingPool := range open {
		picture.Open[name] = schedulingPool.NodePool
	}
	return picture, nil
}

// keepPlans moves the pending pods planned on a claim still in flight
// onto it. Packed again, a pod could be moved to another booting claim,
// and lose its room on both: the claim it was on may register (and
// nominate its pods) between this round's picture and its plan, and the
// moved pod is then nominated nowhere, or two pods that exclude each other
// are nominated to one node.
func (c *Cluster) keepPlans(input *scheduling.Input) {
	if c.Nominations == nil || len(input.InFlight) == 0 || len(input.Pending) == 0 {
		return
	}
	inFlight := make(map[string]int, len(input.InFlight))
	for i, claim := range input.InFlight {
		inFlight[claim.Name] = i
	}
	pending := make([]*corev1.Pod, 0, len(input.Pending))
	for _, pod := range input.Pending {
		if i, ok := inFlight[c.Nominations.ClaimOf(pod)]; ok {
			input.InFlight[i].Pods = append(input.InFlight[i].Pods, pod)
			continue
		}
		pending = append(pending, pod)
	}
	input.Pending = pending
}

// Claims lists every claim, copies the caller may write to, with the
// controller's own writes the cache does not show yet, as Picture counts
// them: a controller that reads claims without the rest of the picture
// (repair) sees its replacement before the cache does, and does not make
// a second one.
func (c *Cluster) Claims(ctx context.Context) ([]v1alpha1.NodeClaim, error) {
	var list v1alpha1.NodeClaimList
	if err := c.Kube.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	return c.Writes.overlay(list.Items), nil
}

// PodsAndNodes reads every pod and node from objects when set, else
// through reader without deep copies (the kubectl plugin's read-only
// client, tests). What it returns is read only either way.
func PodsAndNodes(ctx context.Context, objects ObjectSource, reader client.Reader) ([]*corev1.Pod, []*corev1.Node, error) {
	if objects != nil {
		return objects.Pods(), objects.Nodes(), nil
	}
	var podList corev1.PodList
	if err := reader.List(ctx, &podList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	var nodeList corev1.NodeList
	if err := reader.List(ctx, &nodeList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods := make([]*corev1.Pod, len(podList.Items))
	for i := range podList.Items {
		pods[i] = &podList.Items[i]
	}
	nodes := make([]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	return pods, nodes, nil
}

// Provisionable says whether a pod is one provisioning should find room
// for: the scheduler found no node for it, it is not a DaemonSet's (those
// follow nodes), and nothing is already arranged for it.
func Provisionable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.Status.NominatedNodeName != "" || !pod.DeletionTimestamp.IsZero() {
		return false
	}
	if scheduling.Terminated(pod) || scheduling.BelongsToNode(pod) {
		return false
	}
	for _, condition := range pod.Status.Conditions {
		if condition.Type == corev1.PodScheduled {
			return condition.Status == corev1.ConditionFalse && condition.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// sleepingMachine is an asleep claim as a machine provisioning may wake:
// not when its pool is gone, its template or shape changed since the claim
// was made, or disruption found it drifted (the provider's settings
// moved): such a machine is deleted, never woken.
func sleepingMachine(claim *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (scheduling.Sleeping, bool) {
	if pool == nil || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDrifted) {
		return scheduling.Sleeping{}, false
	}
	if recorded := claim.Annotations[v1alpha1.AnnotationTemplateHash]; recorded != "" && recorded != pool.TemplateHash(claim.Spec.Shape) {
		return scheduling.Sleeping{}, false
	}
	return scheduling.Sleeping{
		Name: claim.Name,
		Pool: claim.Spec.NodePoolRef.Name,
		Shape: scheduling.Shape{
			Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory, Price: priceOf(claim),
			ExtendedResources: claim.Spec.Shape.ExtendedResources,
		},
		Zone: zoneOf(claim.Spec.Requirements.NodeSelector),
	}, true
}

// priceOf is the price the claim recorded for its shape, zero when none.
func priceOf(claim *v1alpha1.NodeClaim) float64 {
	price, err := strconv.ParseFloat(claim.Spec.Shape.Price, 64)
	if err != nil {
		return 0
	}
	return price
}

// claimIndex finds the live claim a node belongs to, the way registration
// will match them: by providerID, else by name; a claim whose machine
// slept by providerID only (its old node name may be another's now).
type claimIndex struct {
	byProviderID map[string]*v1alpha1.NodeClaim
	byName       map[string]*v1alpha1.NodeClaim
}

func newClaimIndex(claims []v1alpha1.NodeClaim) claimIndex {
	index := claimIndex{byProviderID: make(map[string]*v1alpha1.NodeClaim, len(claims)), byName: make(map[string]*v1alpha1.NodeClaim, 2*len(claims))}
	for i := range claims {
		claim := &claims[i]
		if !claim.DeletionTimestamp.IsZero() {
			continue
		}
		if claim.Status.ProviderID != "" {
			index.byProviderID[claim.Status.ProviderID] = claim
		}
		if claim.SleepRequested() || claim.Waking() {
			continue
		}
		index.byName[claim.Name] = claim
		if claim.Status.NodeName != "" {
			index.byName[claim.Status.NodeName] = claim
		}
	}
	return index
}

func (c claimIndex) find(node *corev1.Node) *v1alpha1.NodeClaim {
	if claim, ok := c.byProviderID[node.Spec.ProviderID]; ok && node.Spec.ProviderID != "" {
		return claim
	}
	return c.byName[node.Name]
}

// withClaimLabels returns the node as it is once its claim has adopted it.
// A node that just registered may not carry the pool's labels yet (its
// kubelet does not set them; the lifecycle controller adds them), while its
// claim already counts as registered: simulated without them, the node
// would look unfit for the pods it was made for, and a second node would be
// bought.
func withClaimLabels(node *corev1.Node, claim *v1alpha1.NodeClaim) *corev1.Node {
	if node.Labels[v1alpha1.LabelNodeClaim] == claim.Name {
		return node
	}
	adopted := node.DeepCopy()
	if adopted.Labels == nil {
		adopted.Labels = map[string]string{}
	}
	for key, value := range claim.Labels {
		if key != v1alpha1.LabelNodeProvider {
			adopted.Labels[key] = value
		}
	}
	adopted.Labels[v1alpha1.LabelNodePool] = claim.Spec.NodePoolRef.Name
	adopted.Labels[v1alpha1.LabelNodeClaim] = claim.Name
	return adopted
}

// ephemeralTaints are put on every node while it starts and taken off
// once it is ready; pods do not tolerate them, and need not.
var ephemeralTaints = []corev1.Taint{
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
	// k8s.io/cloud-provider's TaintExternalCloudProvider.
	{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
	// Ours, until registration has nominated the node's pods.
	{Key: v1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoSchedule},
}

// withoutStartupTaints returns a node whose claim is not Initialized yet
// as it will be once it is: without its startup taints and the taints every
// starting node carries, as Karpenter simulates it. Simulated with them, a
// node still starting looks unfit for the pods it was made for, and every
// batch while it starts buys nodes again, which in a large scale-up is
// several per cent of nodes too many.
func withoutStartupTaints(node *corev1.Node, claim *v1alpha1.NodeClaim) *corev1.Node {
	if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) || len(node.Spec.Taints) == 0 {
		return node
	}
	starting := func(taint corev1.Taint) bool {
		for _, startup := range append(claim.Spec.StartupTaints, ephemeralTaints...) {
			if startup.MatchTaint(&taint) {
				return true
			}
		}
		return false
	}
	if !slices.ContainsFunc(node.Spec.Taints, starting) {
		return node
	}
	// A shallow copy with taints of its own: the node may be the cache's.
	started := *node
	started.Spec.Taints = slices.DeleteFunc(slices.Clone(node.Spec.Taints), starting)
	return &started
}

func hasDisruptedTaint(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == v1alpha1.TaintDisrupted {
			return true
		}
	}
	return false
}

func zoneOf(requirements []corev1.NodeSelectorRequirement) string {
	for _, requirement := range requirements {
		if requirement.Key == corev1.LabelTopologyZone && requirement.Operator == corev1.NodeSelectorOpIn && len(requirement.Values) == 1 {
			return requirement.Values[0]
		}
	}
	return ""
}
