package disruption

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/warmcapacity"
)

// whatIf asks the round's scheduling simulator what taking nodes away
// would do: where their pods would go (or what one new node would hold
// them), whether pending pods, minNodes and headroom keep their room, and
// whether the cluster has settled enough to move pods at all. It asks of
// the round's state, and keeps what it works out there (the simulators,
// free room, headroom, pending pods), so that every question of a round
// after the first costs little.
type whatIf struct{ *state }

// command is one decision: take the candidates away for a reason, after
// the replacements (if any) are Ready.
type command struct {
	reason       v1alpha1.DisruptionReason
	candidates   []*candidate
	replacements []scheduling.NewNode
	// message says why, for events and the Disrupting condition.
	message string
	// sleeps names the candidates put to sleep instead of deleted
	// (chooseSleepers); nil when all are deleted.
	sleeps map[string]bool
}

// action is the decision's action label: delete, or replace.
func (c *command) action() string {
	if len(c.replacements) > 0 {
		return "replace"
	}
	return "delete"
}

func (c *command) names() []string {
	names := make([]string, 0, len(c.candidates))
	for _, candidate := range c.candidates {
		names = append(names, candidate.claim.Name)
	}
	return names
}

// markedNodes are the nodes of live claims already chosen to go: their
// pods need a place as much as a candidate's do.
func (s whatIf) markedNodes() []string {
	var nodes []string
	for name := range s.disrupting {
		claim, ok := s.claims[name]
		if !ok || !claim.DeletionTimestamp.IsZero() || !s.inSnapshot[claim.Status.NodeName] {
			continue
		}
		nodes = append(nodes, claim.Status.NodeName)
	}
	sort.Strings(nodes)
	return nodes
}

// removed is the node names a decision about candidates takes out: theirs
// and those already chosen to go.
func (s whatIf) removed(candidates []*candidate) []string {
	seen := map[string]bool{}
	var nodes []string
	for _, name := range append(s.markedNodes(), nodeNames(candidates)...) {
		if !seen[name] {
			seen[name] = true
			nodes = append(nodes, name)
		}
	}
	return nodes
}

func nodeNames(candidates []*candidate) []string {
	names := make([]string, 0, len(candidates))
	for _, c := range candidates {
		names = append(names, c.node.Name)
	}
	return names
}

// simulateRemoval asks whether the candidates' pods (and those of nodes
// already going) fit on the remaining initialized nodes, with no new node
// and no booting one (settled.go); and with them the pending pods given
// whose room is on those nodes, which the removal must leave them.
func (s whatIf) simulateRemoval(ctx context.Context, candidates []*candidate, pending ...*corev1.Pod) (scheduling.RemovalResult, error) {
	s.simulations++
	sim, err := s.settledSimulator(ctx)
	if err != nil {
		return scheduling.RemovalResult{}, err
	}
	result, err := sim.SimulateRemoval(ctx, s.settledRemoved(candidates), nil, s.pendingOnSettled(pending)...)
	if err != nil {
		return scheduling.RemovalResult{}, fmt.Errorf("simulating the removal of %s: %w", strings.Join(nodeNames(candidates), ", "), err)
	}
	return result, nil
}

// leavesPendingPodsOut says, when the candidates' removal would fit but for
// the pending pods given (it takes room they have now), why it may not be.
func (s whatIf) leavesPendingPodsOut(ctx context.Context, candidates []*candidate, removal scheduling.RemovalResult, pending []*corev1.Pod) (string, error) {
	if removal.Fits() || len(s.pendingOnSettled(pending)) == 0 {
		return "", nil
	}
	alone, err := s.simulateRemoval(ctx, candidates)
	if err != nil || !alone.Fits() {
		return "", err
	}
	first := fmt.Sprintf("pod %s/%s first", pending[0].Namespace, pending[0].Name)
	for _, u := range removal.Unschedulable {
		if warmcapacity.IsBooked(u.Pod) {
			// The room a ProvisioningRequest booked: say whose.
			first = "among them the room booked for " + warmcapacity.Owner(u.Pod)
			break
		}
	}
	return fmt.Sprintf("%s: %d pending pods have room now (%s), and with the node gone %d pods would find none",
		pendingPodsNote, len(pending), first, len(removal.Unschedulable)), nil
}

// pendingPodsNote starts the note of a removal refused because it would
// take the room of pending pods.
const pendingPodsNote = "removing it would leave pending pods without the room they have now"

// displaced names the nodes the candidates (and the nodes already going)
// take away, and returns their workload pods unbound, pending again.
//
// The pods of the nodes in staying keep their place: they are not displaced
// though their nodes are left out.
func (s whatIf) displaced(candidates []*candidate, staying map[string]bool) (without map[string]bool, pods []*corev1.Pod) {
	without = map[string]bool{}
	for _, name := range s.removed(candidates) {
		without[name] = true
	}
	for _, pod := range s.input.Pods {
		if at := scheduling.CountedOn(pod); without[at] && !staying[at] && isWorkload(pod) {
			pods = append(pods, unbound(pod))
		}
	}
	return without, pods
}

// unbound is a copy of a pod that must find a place again, pending.
func unbound(pod *corev1.Pod) *corev1.Pod {
	copied := *pod
	copied.Spec.NodeName = ""
	copied.Status.NominatedNodeName = ""
	return &copied
}

// solveWithout asks which new nodes the candidates' pods (and those of
// nodes already going) would need with those nodes gone: provisioning's
// own decision on the cluster without them, so a replacement is what
// provisioning would have made. Nodes still booting are no room for them
// (settled.go).
//
// Pending pods given whose room is on an initialized node are placed with
// them, so the replacement leaves them the room they have now.
func (s whatIf) solveWithout(ctx context.Context, candidates []*candidate, pending ...*corev1.Pod) (scheduling.Result, error) {
	s.simulations++
	// The pods of nodes awaiting their booting replacements have their
	// room there (settled.go).
	without, displaced := s.displaced(candidates, s.awaitingReplacement())
	sim, err := scheduling.New(ctx, s.settledCluster(without))
	if err != nil {
		return scheduling.Result{}, fmt.Errorf("building the snapshot without %s: %w", strings.Join(nodeNames(candidates), ", "), err)
	}
	result, err := sim.Solve(ctx, append(displaced, s.pendingOnSettled(pending)...))
	if err != nil {
		return scheduling.Result{}, fmt.Errorf("placing the pods of %s elsewhere: %w", strings.Join(nodeNames(candidates), ", "), err)
	}
	return result, nil
}

// verdict is why a method does not take a candidate, with the decision
// reason (decisions.NodeReason…) it is recorded and counted under.
type verdict struct{ record, note string }

// replacement decides how a drifted or expired node goes without leaving
// its pods nowhere: deleted, when they fit on the other nodes (and the
// pool keeps its minNodes); else after new nodes that hold them are Ready.
func (s whatIf) replacement(ctx context.Context, reason v1alpha1.DisruptionReason, c *candidate, why string) (*command, verdict, error) {
	cmd := &command{reason: reason, candidates: []*candidate{c}}
	pending, err := s.pendingWithRoom(ctx)
	if err != nil {
		return nil, verdict{}, err
	}
	// Room a pending pod has now is not taken for the node's pods: they
	// go to a replacement instead.
	removal, err := s.simulateRemoval(ctx, cmd.candidates, pending...)
	if err != nil {
		return nil, verdict{}, err
	}
	if !removal.Fits() {
		result, err := s.solveWithout(ctx, cmd.candidates, pending...)
		if err != nil {
			return nil, verdict{}, err
		}
		if len(result.Unschedulable) > 0 {
			return nil, verdict{decisions.NodeReasonWouldNotFit, "its pods would not fit on any node: " + describeUnschedulable(result.Unschedulable)}, nil
		}
		cmd.replacements = result.NewNodes
	}
	if s.minNodesViolation(cmd) != "" {
		// Warm capacity is replaced like for like, with what the pool
		// would make for minNodes now.
		warm, ok := cheapestOf(c.pool)
		if !ok {
			return nil, verdict{decisions.NodeReasonMinNodes, fmt.Sprintf("pool %s would go below its minNodes and cannot make a node now", c.pool.pool.Name)}, nil
		}
		cmd.replacements = append(cmd.replacements, warm)
	}
	cmd.message = why
	if len(cmd.replacements) > 0 {
		cmd.message += fmt.Sprintf("; replacing it with %d new nodes first", len(cmd.replacements))
	}
	return cmd, verdict{}, nil
}

// cheapestOf is a new node of the pool's cheapest shape, as provisioning
// makes for minNodes.
// cheapestNewNode is the cheapest node any pool could make now: no
// replacement costs less.
func (s whatIf) cheapestNewNode() (scheduling.NewNode, bool) {
	var floor scheduling.NewNode
	found := false
	for _, name := range sortedNames(s.pools) {
		if node, ok := cheapestOf(s.pools[name]); ok && (!found || node.Shape.Price < floor.Shape.Price) {
			floor, found = node, true
		}
	}
	return floor, found
}

func cheapestOf(pool *poolInfo) (scheduling.NewNode, bool) {
	if pool.sched == nil {
		return scheduling.NewNode{}, false
	}
	shapes := pool.sched.Shapes.Fixed
	if pool.sched.Shapes.Flexible != nil {
		smallest, ok := pool.sched.Shapes.Flexible.Smallest(pool.sched.Shapes.Flexible.MinCPU, pool.sched.Shapes.Flexible.MinMemory)
		if !ok {
			return scheduling.NewNode{}, false
		}
		shapes = []scheduling.Shape{smallest}
	}
	if len(shapes) == 0 {
		return scheduling.NewNode{}, false
	}
	cheapest := shapes[0]
	for _, shape := range shapes[1:] {
		if shape.Price < cheapest.Price {
			cheapest = shape
		}
	}
	return scheduling.NewNode{Pool: pool.pool.Name, Shape: cheapest}, true
}

// minNodesViolation names the pool a command would take below its
// minNodes, if any.
func (s whatIf) minNodesViolation(cmd *command) string {
	delta := map[string]int{}
	for _, c := range cmd.candidates {
		delta[c.pool.pool.Name]--
	}
	for _, replacement := range cmd.replacements {
		delta[replacement.Pool]++
	}
	names := make([]string, 0, len(delta))
	for name := range delta {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		info, ok := s.pools[name]
		if !ok || delta[name] >= 0 {
			continue
		}
		if info.live-info.marked+delta[name] < int(info.target.MinNodes) {
			return fmt.Sprintf("pool %s would go below its minNodes of %d", name, info.target.MinNodes)
		}
	}
	return ""
}

// unsettled says why no pods should be moved now, if so: pods of nodes
// being drained still have to find a place, and moving more pods meanwhile
// would race them.
func (s whatIf) unsettled() string {
	if nodes := s.strandedNodes(); len(nodes) > 0 {
		return fmt.Sprintf("%d pods on node %s, which is going, still have to move",
			len(workloadPods(s.podsByNode[nodes[0]])), nodes[0])
	}
	return ""
}

// strandedNodes are the nodes that are going (a claim being deleted, a
// node being drained: no longer in the snapshot) with workload pods still
// on them, sorted.
func (s whatIf) strandedNodes() []string {
	var nodes []string
	for node, pods := range s.podsByNode {
		if !s.inSnapshot[node] && len(workloadPods(pods)) > 0 {
			nodes = append(nodes, node)
		}
	}
	sort.Strings(nodes)
	return nodes
}

// stranded returns, unbound, the workload pods of the stranded nodes: the
// drain is about to evict them, and they will look for the room the other
// nodes have.
func (s whatIf) stranded() []*corev1.Pod {
	var stranded []*corev1.Pod
	for _, node := range s.strandedNodes() {
		for _, pod := range workloadPods(s.podsByNode[node]) {
			stranded = append(stranded, unbound(pod))
		}
	}
	return stranded
}

// pendingWithRoom returns the pods waiting for a place that fit on a node
// there is (or one being made) now: the unbound pods, which the scheduler
// is about to place (in a large scale-up perhaps minutes from now), and
// the stranded pods of nodes being drained, which their eviction is about
// to make pending. A decision must leave them that room. Pods that only a
// new node would take are provisioning's; they hold nothing back. Those
// whose room is on a node still booting are noted (pendingBooting): that
// room is theirs, and no removal counts on it (settled.go). Worked out
// once per round.
func (s whatIf) pendingWithRoom(ctx context.Context) ([]*corev1.Pod, error) {
	if s.pending != nil {
		return *s.pending, nil
	}
	waiting := append(slices.Clip(s.unbound), s.stranded()...)
	if len(waiting) == 0 {
		return nil, nil
	}
	sim, err := s.simulator(ctx)
	if err != nil {
		return nil, err
	}
	result, err := sim.Solve(ctx, waiting)
	if err != nil {
		return nil, fmt.Errorf("placing %d pods waiting for a place: %w", len(waiting), err)
	}
	pending := make([]*corev1.Pod, 0, len(result.Placements))
	booting := s.booting()
	for _, placement := range result.Placements {
		pending = append(pending, placement.Pod)
		if booting[placement.Node] {
			if s.pendingBooting == nil {
				s.pendingBooting = map[*corev1.Pod]bool{}
			}
			s.pendingBooting[placement.Pod] = true
		}
	}
	s.pending = &pending
	return pending, nil
}

func totalPrice(candidates []*candidate) float64 {
	total := 0.0
	for _, c := range candidates {
		total += c.price
	}
	return total
}

func describeUnschedulable(unschedulable []scheduling.Unschedulable) string {
	first := unschedulable[0]
	text := fmt.Sprintf("pod %s/%s: %s", first.Pod.Namespace, first.Pod.Name, first.Reason)
	if len(unschedulable) > 1 {
		text += fmt.Sprintf(" (and %d more)", len(unschedulable)-1)
	}
	return text
}

// abbreviate lists at most n names, then how many more there are.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// headroomViolation names the pool (or the CapacityBuffer) whose headroom the candidates' removal
// would break, if any: with them (and the nodes already going) gone, their
// pods placed first and every pool's headroom after them, at the lowest
// priority, more of a pool's headroom fits on no node than fits on none
// now. A replacement is not counted: the headroom must fit on what stays.
func (s whatIf) headroomViolation(ctx context.Context, candidates []*candidate) (string, error) {
	for _, c := range candidates {
		if c.pool.target.Unknown {
			return fmt.Sprintf("pool %s's external headroom is not known yet", c.pool.pool.Name), nil
		}
	}
	if s.headroomMissing == nil {
		if err := s.buildHeadroom(ctx); err != nil {
			return "", err
		}
	}
	if len(s.headroom) == 0 {
		return "", nil
	}
	if s.headroomMissing == nil {
		missing, err := s.missingHeadroom(ctx, nil)
		if err != nil {
			return "", err
		}
		s.headroomMissing = missing
	}
	missing, err := s.missingHeadroom(ctx, candidates)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(missing))
	for name := range missing {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if missing[name] > s.headroomMissing[name] {
			return fmt.Sprintf("%s would lose headroom: %d of its headroom pods would fit on no node", name, missing[name]), nil
		}
	}
	return "", nil
}

// buildHeadroom makes every pool's headroom placeholders, as provisioning
// does. A pool that cannot provision now has its nodes of headroom left
// out: without its shapes they have no size.
func (s whatIf) buildHeadroom(ctx context.Context) error {
	for _, name := range sortedNames(s.pools) {
		info := s.pools[name]
		s.headroom = append(s.headroom, warmcapacity.Pods(info.pool, info.target.Headroom)...)
		if info.sched == nil {
			continue
		}
		nodes, err := warmcapacity.NodePods(ctx, info.pool, info.target.Nodes, info.sched.Shapes, s.input.DaemonSets)
		if err != nil {
			return err
		}
		s.headroom = append(s.headroom, nodes...)
	}
	s.headroom = append(s.headroom, s.buffered...)
	if len(s.headroom) == 0 {
		s.headroomMissing = map[string]int{}
	}
	return nil
}

// missingHeadroom counts, per pool, the headroom pods that fit on no
// remaining node with the candidates (and the nodes already going) gone
// and their pods placed first.
func (s whatIf) missingHeadroom(ctx context.Context, candidates []*candidate) (map[string]int, error) {
	without, pods := s.displaced(candidates, nil)
	pods = append(pods, s.headroom...)
	sim, err := scheduling.New(ctx, s.simCluster(without))
	if err != nil {
		return nil, fmt.Errorf("building the snapshot without %s: %w", strings.Join(nodeNames(candidates), ", "), err)
	}
	result, err := sim.Solve(ctx, pods)
	if err != nil {
		return nil, fmt.Errorf("placing headroom without %s: %w", strings.Join(nodeNames(candidates), ", "), err)
	}
	missing := map[string]int{}
	count := func(pod *corev1.Pod) {
		if warmcapacity.IsPlaceholder(pod) {
			missing[warmcapacity.Owner(pod)]++
		}
	}
	for _, node := range result.NewNodes {
		for _, pod := range node.Pods {
			count(pod)
		}
	}
	for _, u := range result.Unschedulable {
		count(u.Pod)
	}
	return missing, nil
}
