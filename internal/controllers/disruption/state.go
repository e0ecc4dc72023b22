package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/warmcapacity"
	"github.com/claimscale/claimscale/pkg/provider"
)

const (
	// AnnotationReplaces on a replacement claim names the claims it
	// replaces, comma-separated. They are deleted once every claim naming
	// them is Ready; a restart resumes from here.
	AnnotationReplaces = v1alpha1.AnnotationReplaces
	// AnnotationDisruptionReason on a replacement claim says why the
	// claims it replaces go: Underutilized, Drifted or Expired.
	AnnotationDisruptionReason = v1alpha1.AnnotationDisruptionReason
)

// ProviderResolver finds a NodeProvider's provider.
type ProviderResolver interface {
	ForProviderName(ctx context.Context, name string) (provider.Provider, error)
}

// reasonExpired is expiration's reason. It is not a budget reason:
// expiration ignores budgets.
const reasonExpired = v1alpha1.DisruptionReasonExpired

// poolInfo is a pool with what a round knows of it.
type poolInfo struct {
	pool *v1alpha1.NodePool
	// sched is the pool as provisioning sees it; nil when the pool cannot
	// provision now (provider not ready, shapes unreadable).
	sched *scheduling.Pool
	// live counts the pool's claims not being deleted and not asleep,
	// deleting those being deleted (asleep ones aside), and marked the live ones
	// already chosen to go, suspending (live and marked) those whose
	// machine is being put to sleep. asleep counts the claims whose
	// machine sleeps, not being deleted: no node, so neither live nor
	// part of the pool's size for budgets and minNodes (sleep.go).
	live, deleting, marked, suspending, asleep int
	// power says whether the pool's provider can stop and start machines,
	// asked only of pools with a sleep policy (sleepObserver).
	power powerCapability
	// target is the pool's warm capacity now, after its schedules.
	target warmcapacity.Target
}

func (p *poolInfo) consolidateAfter() time.Duration {
	if p.pool.Spec.Disruption.ConsolidateAfter != nil {
		return p.pool.Spec.Disruption.ConsolidateAfter.Duration
	}
	return defaultConsolidateAfter
}

// replacementGroup is replacement claims made together for the same
// claims, in flight until they are Ready and the old claims are deleted.
type replacementGroup struct {
	// key is the annotation value the group shares.
	key          string
	reason       v1alpha1.DisruptionReason
	replacements []*v1alpha1.NodeClaim
	olds         []string
}

// state is everything one round of decisions looks at, read once from the
// caches at the start of the round.
type state struct {
	now            time.Time
	input          scheduling.Input
	pools          map[string]*poolInfo
	claims         map[string]*v1alpha1.NodeClaim
	nodes          map[string]*corev1.Node
	inSnapshot     map[string]bool
	podsByNode     map[string][]*corev1.Pod
	unbound        []*corev1.Pod
	budgets        []*policyv1.PodDisruptionBudget
	providerHashes map[string]string
	groups         []*replacementGroup
	// disrupting names the claims being deleted, chosen to go, or waiting
	// for their replacement.
	disrupting map[string]bool
	// fingerprint changes when anything a consolidation decision depends
	// on changes: where pods are bound, which nodes and claims exist,
	// pools' and providers' specs.
	fingerprint uint64

	sim *scheduling.Simulator
	// settledSim simulates the initialized nodes only (settled.go), and
	// bootingNodes names the others (both nil until first needed).
	settledSim   *scheduling.Simulator
	bootingNodes map[string]bool
	// awaitingNodes are the nodes going whose replacements all boot
	// (settled.go; nil until first needed).
	awaitingNodes map[string]bool
	// pendingBooting are the pending pods whose room is on a booting
	// node (see pendingWithRoom).
	pendingBooting map[*corev1.Pod]bool
	// pending is the unbound pods with a place now (nil until first
	// needed).
	pending *[]*corev1.Pod
	// headroom is every pool's headroom as placeholder pods, and
	// headroomMissing how many of each pool's fit on no node now (both
	// nil until first needed).
	headroom        []*corev1.Pod
	headroomMissing map[string]int
	// buffered are the CapacityBuffers' placeholders, headroom as a
	// pool's is (buildHeadroom adds them).
	buffered []*corev1.Pod
	// free is every node's free room (nil until first needed), and
	// freeTotal its sum.
	free      map[string]room
	freeTotal room
	// simulations counts the simulations the round ran.
	simulations int

	// owned holds the round's own copies of the claims it writes to (see
	// own), by name.
	ownedMu sync.Mutex
	owned   map[string]*v1alpha1.NodeClaim
	// unsent holds, by name, the claims whose status the round changed
	// without writing it yet (see Controller.deferStatus), as they were
	// before the first such change.
	unsent map[string]*v1alpha1.NodeClaim
}

// own returns the round's own copy of a claim, to write to. The claims a
// round starts from are the cache's, shared with every reader and never
// written: copying a thousand claims every round only for the few it
// writes was much of a round's garbage. The first write to a claim in a
// round copies it; every later one, whichever pointer it came through,
// gets the same copy, so writes build on each other (a mark after a
// status patch carries the resourceVersion the patch returned), and the
// round's claims map shows it from then on.
func (s *state) own(claim *v1alpha1.NodeClaim) *v1alpha1.NodeClaim {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	if owned, ok := s.owned[claim.Name]; ok {
		return owned
	}
	if s.owned == nil {
		s.owned = map[string]*v1alpha1.NodeClaim{}
	}
	owned := claim.DeepCopy()
	s.owned[claim.Name] = owned
	if _, ok := s.claims[claim.Name]; ok {
		s.claims[claim.Name] = owned
	}
	return owned
}

// takeUnsent returns the claim as it was before changes to its status the
// round has not written yet, if there are any, and forgets them: the write
// about to go carries them.
func (s *state) takeUnsent(name string) *v1alpha1.NodeClaim {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	stored := s.unsent[name]
	delete(s.unsent, name)
	return stored
}

// keepUnsent notes a status change not to be written yet.
func (s *state) keepUnsent(w statusWrite) {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	if s.unsent == nil {
		s.unsent = map[string]*v1alpha1.NodeClaim{}
	}
	s.unsent[w.claim.Name] = w.stored
}

// takeAllUnsent returns the status changes not written yet, by claim
// name, and forgets them.
func (s *state) takeAllUnsent() []statusWrite {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	writes := make([]statusWrite, 0, len(s.unsent))
	for _, name := range sortedNames(s.unsent) {
		writes = append(writes, statusWrite{stored: s.unsent[name], claim: s.owned[name]})
	}
	s.unsent = nil
	return writes
}

// current is the round's own copy of the claim if it has one, else the
// claim: what a change must start from.
func (s *state) current(claim *v1alpha1.NodeClaim) *v1alpha1.NodeClaim {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	if owned, ok := s.owned[claim.Name]; ok {
		return owned
	}
	return claim
}

// objects are the cache's contents a round starts from.
type objects struct {
	input     scheduling.Input
	pools     []v1alpha1.NodePool
	claims    []v1alpha1.NodeClaim
	nodes     []*corev1.Node
	pods      []*corev1.Pod
	budgets   []policyv1.PodDisruptionBudget
	providers []v1alpha1.NodeProvider
	// targets are the pools' warm capacity now; a pool missing here gets
	// its own values at the round's time.
	targets map[string]warmcapacity.Target
	// reserved are the placeholders of other objects' room
	// (warmcapacity.Reserved): a booking's pods wait for their place as
	// unbound pods do, and keep it; a buffer's are headroom.
	reserved []*corev1.Pod
}

func newState(now time.Time, o objects) *state {
	s := &state{
		now:            now,
		input:          o.input,
		pools:          map[string]*poolInfo{},
		claims:         map[string]*v1alpha1.NodeClaim{},
		nodes:          map[string]*corev1.Node{},
		inSnapshot:     map[string]bool{},
		podsByNode:     map[string][]*corev1.Pod{},
		providerHashes: map[string]string{},
		disrupting:     map[string]bool{},
	}
	var keys []string
	for i := range o.providers {
		s.providerHashes[o.providers[i].Name] = ProviderHash(&o.providers[i])
		keys = append(keys, "provider "+o.providers[i].Name+"/"+strconv.FormatInt(o.providers[i].Generation, 10))
	}
	for i := range o.pools {
		pool := &o.pools[i]
		if !pool.DeletionTimestamp.IsZero() {
			continue
		}
		target, ok := o.targets[pool.Name]
		if !ok {
			// A schedule that cannot be read leaves the pool's own
			// values; provisioning says so.
			target, _ = warmcapacity.At(pool, now)
		}
		s.pools[pool.Name] = &poolInfo{pool: pool, target: target}
		keys = append(keys, "pool "+pool.Name+"/"+strconv.FormatInt(pool.Generation, 10))
		// Warm capacity follows schedules and external scalers, not
		// only the pool's spec.
		headroom, _ := json.Marshal(target.Headroom)
		keys = append(keys, fmt.Sprintf("target %s/%d/%d/%t/%s", pool.Name, target.MinNodes, target.Nodes, target.Unknown, headroom))
	}
	for i := range o.input.Pools {
		if info, ok := s.pools[o.input.Pools[i].NodePool.Name]; ok {
			info.sched = &o.input.Pools[i]
		}
	}
	for _, node := range o.nodes {
		s.nodes[node.Name] = node
	}
	for _, node := range o.input.Nodes {
		s.inSnapshot[node.Name] = true
		keys = append(keys, "node "+node.Name)
	}
	for _, pod := range o.pods {
		// A pod nominated to a node is that node's as a bound pod is, in
		// the simulation (scheduling.CountedOn) and here: the node is not
		// empty, its pods' annotations and budgets hold it, and the pod
		// waits for nothing else. Registration nominates the pods a new
		// node was bought for before the scheduler binds them; were the
		// node empty until then, emptiness would take it from under them.
		node := pod.Spec.NodeName
		if node == "" {
			node = scheduling.CountedOn(pod)
		}
		if node != "" {
			s.podsByNode[node] = append(s.podsByNode[node], pod)
			if isWorkload(pod) {
				keys = append(keys, "pod "+string(pod.UID)+"@"+node)
			}
			continue
		}
		if waitsForScheduler(pod) {
			s.unbound = append(s.unbound, pod)
		}
	}
	for _, pod := range o.reserved {
		if warmcapacity.IsBooked(pod) {
			s.unbound = append(s.unbound, pod)
		} else {
			s.buffered = append(s.buffered, pod)
		}
		keys = append(keys, "reserved "+pod.Name+"/"+warmcapacity.Owner(pod)+"@"+pinnedNode(pod))
	}
	keys = append(keys, fmt.Sprintf("unbound %d", len(s.unbound)))
	for i := range o.budgets {
		s.budgets = append(s.budgets, &o.budgets[i])
	}

	groups := map[string]*replacementGroup{}
	for i := range o.claims {
		claim := &o.claims[i]
		s.claims[claim.Name] = claim
		// Whether a claim is initialized decides whether its node is room
		// for moved pods (settled.go).
		keys = append(keys, "claim "+claim.Name+"/"+strconv.FormatBool(claim.DeletionTimestamp.IsZero())+
			"/"+strconv.FormatBool(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized)))
		if value := claim.Annotations[AnnotationReplaces]; value != "" {
			group, ok := groups[value]
			if !ok {
				group = &replacementGroup{key: value, reason: v1alpha1.DisruptionReason(claim.Annotations[AnnotationDisruptionReason]), olds: splitNames(value)}
				groups[value] = group
				s.groups = append(s.groups, group)
			}
			group.replacements = append(group.replacements, claim)
		}
	}
	sort.Slice(s.groups, func(i, j int) bool { return s.groups[i].key < s.groups[j].key })
	for _, group := range s.groups {
		for _, old := range group.olds {
			s.disrupting[old] = true
		}
	}
	for name, claim := range s.claims {
		// An asleep claim's Disrupting mark is its removed node's, until
		// the observer says it sleeps (observeSleeper); a suspending
		// claim is going even where the cache lacks its mark.
		asleep := claim.Asleep()
		if !claim.DeletionTimestamp.IsZero() || claim.Suspending() ||
			(!asleep && meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDisrupting)) {
			s.disrupting[name] = true
		}
		info, ok := s.pools[claim.Spec.NodePoolRef.Name]
		if !ok {
			continue
		}
		switch {
		case asleep && claim.DeletionTimestamp.IsZero():
			info.asleep++
		case asleep:
			// A sleeping machine being deleted takes no node away.
		case !claim.DeletionTimestamp.IsZero():
			info.deleting++
		case s.disrupting[name]:
			info.live++
			info.marked++
			if claim.Suspending() {
				info.suspending++
			}
		default:
			info.live++
		}
	}
	sort.Strings(keys)
	hasher := fnv.New64a()
	for _, key := range keys {
		_, _ = hasher.Write([]byte(key))
		_, _ = hasher.Write([]byte{0})
	}
	s.fingerprint = hasher.Sum64()
	return s
}

// waitsForScheduler says whether an unbound pod is one the kube-scheduler
// is about to place or provisioning to find room for: not a DaemonSet's,
// not finished or leaving, not gated, and for the default scheduler.
func waitsForScheduler(pod *corev1.Pod) bool {
	if !isWorkload(pod) || len(pod.Spec.SchedulingGates) > 0 {
		return false
	}
	return pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName
}

func splitNames(value string) []string {
	var names []string
	for _, name := range strings.Split(value, ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// candidate returns the claim as a candidate for any method, or nil: its
// node is Initialized and in service, its pool exists, and nothing is
// already taking it away or waiting for it to be Ready. A claim whose
// machine sleeps or is being put to sleep is none: it has, or soon has,
// no node.
func (s *state) candidate(claim *v1alpha1.NodeClaim) *candidate {
	if !claim.DeletionTimestamp.IsZero() || s.disrupting[claim.Name] || claim.SleepRequested() || claim.Annotations[AnnotationReplaces] != "" ||
		!meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
		return nil
	}
	node, ok := s.nodes[claim.Status.NodeName]
	if !ok || !s.inSnapshot[node.Name] {
		return nil
	}
	pool, ok := s.pools[claim.Spec.NodePoolRef.Name]
	if !ok {
		return nil
	}
	all := s.podsByNode[node.Name]
	pods := workloadPods(all)
	return &candidate{
		claim: claim, node: node, pool: pool, pods: pods, all: all,
		price: claimPrice(claim, pool.sched), cost: disruptionCost(pods),
	}
}

// candidates returns every claim that is a candidate, in name order.
func (s *state) candidates() []*candidate {
	names := make([]string, 0, len(s.claims))
	for name := range s.claims {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []*candidate
	for _, name := range names {
		if c := s.candidate(s.claims[name]); c != nil {
			out = append(out, c)
		}
	}
	return out
}

func (s *state) blocker(c *candidate) (reason, why string) {
	return blockingRule(c.node, c.all, s.budgets)
}

// poolTotals counts, per pool, every claim and the disrupting ones, for
// budgets.
func (s *state) poolTotals() (pools []*v1alpha1.NodePool, total, disrupting map[string]int) {
	total, disrupting = map[string]int{}, map[string]int{}
	for _, name := range sortedNames(s.pools) {
		info := s.pools[name]
		pools = append(pools, info.pool)
		total[name] = info.live + info.deleting
		disrupting[name] = info.deleting + info.marked
	}
	return pools, total, disrupting
}

// claimPrice is what the claim's node costs per hour, by the pool's
// catalog where it still lists the shape (so it compares with what a
// replacement would cost), else as recorded on the claim, else derived
// from its size.
func claimPrice(claim *v1alpha1.NodeClaim, pool *scheduling.Pool) float64 {
	shape := claim.Spec.Shape
	if pool != nil {
		if f := pool.Shapes.Flexible; f != nil {
			return sizePrice(shape, f.PricePerCPU, f.PricePerGiB)
		}
		for _, offered := range pool.Shapes.Fixed {
			if offered.Name == shape.Name && offered.CPU.Cmp(shape.CPU) == 0 && offered.Memory.Cmp(shape.Memory) == 0 {
				return offered.Price
			}
		}
	}
	if shape.Price != "" {
		if price, err := strconv.ParseFloat(shape.Price, 64); err == nil {
			return price
		}
	}
	return sizePrice(shape, shapecatalog.DefaultPricePerCPU, shapecatalog.DefaultPricePerGiB)
}

func sizePrice(shape v1alpha1.ClaimShape, perCPU, perGiB float64) float64 {
	return shapecatalog.SizePrice(shape.CPU, shape.Memory, perCPU, perGiB)
}

// simulator is the round's scheduling simulator, built on first use.
func (s *state) simulator(ctx context.Context) (*scheduling.Simulator, error) {
	if s.sim != nil {
		return s.sim, nil
	}
	sim, err := scheduling.New(ctx, s.simCluster(nil))
	if err != nil {
		return nil, fmt.Errorf("building the scheduling snapshot: %w", err)
	}
	s.sim = sim
	return sim, nil
}

// simCluster is the round's cluster without the named nodes and their
// pods. In-flight claims of pools that cannot provision now are left out:
// the simulator cannot build their phantom nodes.
func (s *state) simCluster(without map[string]bool) scheduling.Cluster {
	cluster := s.input.Cluster
	cluster.Nodes = nil
	for _, node := range s.input.Nodes {
		if !without[node.Name] {
			cluster.Nodes = append(cluster.Nodes, node)
		}
	}
	cluster.Pods = nil
	for _, pod := range s.input.Pods {
		if !without[scheduling.CountedOn(pod)] {
			cluster.Pods = append(cluster.Pods, pod)
		}
	}
	cluster.InFlight = nil
	for _, inFlight := range s.input.InFlight {
		if info, ok := s.pools[inFlight.Pool]; ok && info.sched != nil {
			cluster.InFlight = append(cluster.InFlight, inFlight)
		}
	}
	return cluster
}

// pinnedNode is the node a booked placeholder is pinned to, "" for none.
func pinnedNode(pod *corev1.Pod) string {
	affinity := pod.Spec.Affinity
	if affinity == nil || affinity.NodeAffinity == nil || affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, field := range term.MatchFields {
			if field.Key == "metadata.name" && len(field.Values) == 1 {
				return field.Values[0]
			}
		}
	}
	return ""
}
