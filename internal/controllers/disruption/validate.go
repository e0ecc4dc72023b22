package disruption

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/index"
)

// stillValid re-reads the candidates just before acting: a claim deleted
// or chosen by someone else meanwhile, pods that came or went, or a
// do-not-disrupt annotation that appeared, void the decision.
func (e *executor) stillValid(ctx context.Context, cmd *command) string {
	for _, candidate := range cmd.candidates {
		var claim v1alpha1.NodeClaim
		if err := e.kube.Get(ctx, client.ObjectKeyFromObject(candidate.claim), &claim); err != nil {
			return fmt.Sprintf("reading claim %s: %v", candidate.claim.Name, err)
		}
		if !claim.DeletionTimestamp.IsZero() || claim.SleepRequested() || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDisrupting) {
			return "claim " + claim.Name + " is already going"
		}
		var node corev1.Node
		if err := e.kube.Get(ctx, client.ObjectKeyFromObject(candidate.node), &node); err != nil {
			return fmt.Sprintf("reading node %s: %v", candidate.node.Name, err)
		}
		var pods corev1.PodList
		if err := e.kube.List(ctx, &pods, client.MatchingFields{index.PodNodeName: node.Name}); err != nil {
			return fmt.Sprintf("listing pods on node %s: %v", node.Name, err)
		}
		now := make([]*corev1.Pod, 0, len(pods.Items))
		for i := range pods.Items {
			now = append(now, &pods.Items[i])
		}
		if !sameWorkload(candidate.pods, workloadPods(now)) {
			return "the pods on node " + node.Name + " changed"
		}
		if why := blocker(&node, now, nil); why != "" {
			return why
		}
	}
	return ""
}

func sameWorkload(a, b []*corev1.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	uids := map[string]bool{}
	for _, pod := range a {
		uids[string(pod.UID)] = true
	}
	for _, pod := range b {
		if !uids[string(pod.UID)] {
			return false
		}
	}
	return true
}

// revalidate checks, just before the replaced claims are deleted, that it
// is still safe: nothing asked since to keep them, and (for consolidation,
// which is optional) their pods still fit with the replacement in place.
func (e *executor) revalidate(ctx context.Context, s *state, group *replacementGroup, live []*v1alpha1.NodeClaim) (string, error) {
	for _, old := range live {
		node, ok := s.nodes[old.Status.NodeName]
		if !ok {
			continue
		}
		if why := blocker(node, s.podsByNode[node.Name], nil); why != "" {
			return why, nil
		}
	}
	if group.reason != v1alpha1.DisruptionReasonUnderutilized {
		// Drifted and expired nodes go in any case; what does not fit
		// goes Pending and provisioning makes room.
		return "", nil
	}
	removal, err := whatIf{s}.simulateRemoval(ctx, nil)
	if err != nil {
		return "", err
	}
	if !removal.Fits() {
		return "the pods would no longer fit: " + describeUnschedulable(removal.Unschedulable), nil
	}
	return "", nil
}
