package disruption

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// Room only on initialized nodes.
//
// A disruption moves pods only onto capacity that is there: nodes that are
// registered and initialized. A claim still booting (launched, not yet a
// node) and a node registered but not initialized yet are room only for
// the pending pods they were bought for, never for the pods a disruption
// would evict: a machine that boots for minutes, or never registers,
// would leave those pods waiting all that time for a place they had. As
// Karpenter refuses a consolidation that would schedule pods onto
// uninitialized nodes.
//
// So a removal is simulated on the settled cluster: the initialized nodes
// only, with the pending pods that have their room there (pendingWithRoom);
// the pending pods whose room is a booting claim keep it without a say.

// booting names the nodes of the round's snapshot that are no room for
// displaced pods: the phantom nodes of in-flight claims, and the nodes
// whose claim is not Initialized, including a node that registered before
// the round saw its claim Registered (the snapshot takes the node for the
// claim's phantom then). Worked out once per round.
func (s whatIf) booting() map[string]bool {
	if s.bootingNodes != nil {
		return s.bootingNodes
	}
	s.bootingNodes = map[string]bool{}
	for _, inFlight := range s.simCluster(nil).InFlight {
		if !s.inSnapshot[inFlight.Name] {
			s.bootingNodes[inFlight.Name] = true
		}
	}
	byNode := make(map[string]*v1alpha1.NodeClaim, len(s.claims))
	for _, claim := range s.claims {
		if claim.Status.NodeName != "" {
			byNode[claim.Status.NodeName] = claim
		}
	}
	for _, node := range s.input.Nodes {
		// By the claim label the snapshot gives a node its claim adopts
		// (provisioning's withClaimLabels), else by the claim's node name.
		claim, ok := s.claims[node.Labels[v1alpha1.LabelNodeClaim]]
		if !ok {
			claim, ok = byNode[node.Name]
		}
		if ok && !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
			s.bootingNodes[node.Name] = true
		}
	}
	return s.bootingNodes
}

// settledCluster is the round's cluster without the named nodes, without
// in-flight claims and without nodes not initialized yet: where displaced
// pods may go.
func (s whatIf) settledCluster(without map[string]bool) scheduling.Cluster {
	booting, awaiting := s.booting(), s.awaitingReplacement()
	skip := make(map[string]bool, len(without)+len(booting)+len(awaiting))
	for name := range without {
		skip[name] = true
	}
	for name := range booting {
		skip[name] = true
	}
	for name := range awaiting {
		skip[name] = true
	}
	cluster := s.simCluster(skip)
	cluster.InFlight = nil
	return cluster
}

// settledSimulator is the round's simulator of the settled cluster, built
// on first use; the round's own simulator when nothing is booting.
func (s whatIf) settledSimulator(ctx context.Context) (*scheduling.Simulator, error) {
	if len(s.booting()) == 0 {
		return s.simulator(ctx)
	}
	if s.settledSim != nil {
		return s.settledSim, nil
	}
	sim, err := scheduling.New(ctx, s.settledCluster(nil))
	if err != nil {
		return nil, fmt.Errorf("building the snapshot of initialized nodes: %w", err)
	}
	s.settledSim = sim
	return sim, nil
}

// awaitingReplacement names the nodes already going whose replacements
// are all still booting. Their pods have their room on those replacements,
// which the settled cluster leaves out, as a booting claim keeps the room
// of the pending pods it was bought for: such a node is no room, and its
// pods are not displaced a second time (else a later decision would buy
// them another node, as a second replacement of the same claim).
func (s whatIf) awaitingReplacement() map[string]bool {
	if s.awaitingNodes != nil {
		return s.awaitingNodes
	}
	s.awaitingNodes = map[string]bool{}
	for _, group := range s.groups {
		if len(group.replacements) == 0 {
			continue
		}
		booting := true
		for _, replacement := range group.replacements {
			if meta.IsStatusConditionTrue(replacement.Status.Conditions, v1alpha1.ConditionInitialized) {
				booting = false
				break
			}
		}
		if !booting {
			continue
		}
		for _, old := range group.olds {
			if claim, ok := s.claims[old]; ok && claim.Status.NodeName != "" {
				s.awaitingNodes[claim.Status.NodeName] = true
			}
		}
	}
	return s.awaitingNodes
}

// settledRemoved is what removed names that the settled cluster has.
func (s whatIf) settledRemoved(candidates []*candidate) []string {
	booting, awaiting := s.booting(), s.awaitingReplacement()
	var nodes []string
	for _, name := range s.removed(candidates) {
		if !booting[name] && !awaiting[name] {
			nodes = append(nodes, name)
		}
	}
	return nodes
}

// pendingOnSettled is of the pending pods given those whose room is on an
// initialized node (see pendingWithRoom): the others have theirs on a
// booting claim, which a removal on the settled cluster does not take.
func (s whatIf) pendingOnSettled(pending []*corev1.Pod) []*corev1.Pod {
	if len(s.pendingBooting) == 0 {
		return pending
	}
	var settled []*corev1.Pod
	for _, pod := range pending {
		if !s.pendingBooting[pod] {
			settled = append(settled, pod)
		}
	}
	return settled
}

// fitsOnlyWhileBooting says, when the candidates' pods fit on no
// initialized node, whether they would fit with the booting claims
// counted as room, naming those: the refusal says that the move waits
// for them, not that there is no room at all.
func (s whatIf) fitsOnlyWhileBooting(ctx context.Context, candidates []*candidate, pending []*corev1.Pod) (string, error) {
	if len(s.booting()) == 0 {
		return "", nil
	}
	sim, err := s.simulator(ctx)
	if err != nil {
		return "", err
	}
	s.simulations++
	result, err := sim.SimulateRemoval(ctx, s.removed(candidates), nil, pending...)
	if err != nil {
		return "", fmt.Errorf("simulating the removal of %s with booting claims: %w", strings.Join(nodeNames(candidates), ", "), err)
	}
	if !result.Fits() {
		return "", nil
	}
	booting := s.booting()
	var on []string
	seen := map[string]bool{}
	for _, placement := range result.Placements {
		if booting[placement.Node] && !seen[placement.Node] {
			seen[placement.Node] = true
			on = append(on, placement.Node)
		}
	}
	if len(on) == 0 {
		return "", nil
	}
	sort.Strings(on)
	return fmt.Sprintf("%s %s, not initialized yet: a node still booting is room only for the pending pods it was made for",
		bootingNote, abbreviate(on, 3)), nil
}

// bootingNote starts the note of a move refused because its pods would
// fit only on nodes still booting.
const bootingNote = "its pods would fit only on"
