package disruption

import (
	"fmt"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// candidate is a node that some method may take away: its claim, its
// node, its pool, and the pods that would have to move.
type candidate struct {
	claim *v1alpha1.NodeClaim
	node  *corev1.Node
	pool  *poolInfo
	// pods that would have to move: not DaemonSet or mirror pods, not
	// finished, not already leaving.
	pods []*corev1.Pod
	// all the node's pods, for do-not-disrupt.
	all []*corev1.Pod
	// price per hour of the node, to compare replacements with.
	price float64
	// cost of disrupting it: its pods weighted by priority.
	cost float64
}

func (c *candidate) String() string { return c.claim.Name }

// isWorkload says whether a pod has to move when its node goes: not a pod
// that belongs to the node (DaemonSet, mirror), not finished, not already
// being deleted.
func isWorkload(pod *corev1.Pod) bool {
	return !scheduling.BelongsToNode(pod) && !scheduling.Terminated(pod) && pod.DeletionTimestamp.IsZero()
}

func workloadPods(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range pods {
		if isWorkload(pod) {
			out = append(out, pod)
		}
	}
	return out
}

// blocker names what forbids taking the node away voluntarily now, if
// anything: a do-not-disrupt annotation on the node or one of its pods, a
// pod no controller would bring back, or a pod whose PodDisruptionBudget
// allows no eviction at the moment.
func blocker(node *corev1.Node, pods []*corev1.Pod, budgets []*policyv1.PodDisruptionBudget) string {
	_, why := blockingRule(node, pods, budgets)
	return why
}

// blockingRule is blocker with the reason of the claim's Consolidatable
// condition that says so.
func blockingRule(node *corev1.Node, pods []*corev1.Pod, budgets []*policyv1.PodDisruptionBudget) (reason, why string) {
	if node.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
		return v1alpha1.ConsolidatableReasonDoNotDisrupt, "node " + node.Name + " is annotated " + v1alpha1.AnnotationDoNotDisrupt
	}
	for _, pod := range pods {
		if pod.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
			return v1alpha1.ConsolidatableReasonDoNotDisrupt, "pod " + pod.Namespace + "/" + pod.Name + " is annotated " + v1alpha1.AnnotationDoNotDisrupt
		}
	}
	for _, pod := range pods {
		if !isWorkload(pod) {
			continue
		}
		if metav1.GetControllerOf(pod) == nil {
			return v1alpha1.ConsolidatableReasonPodWithoutController, "pod " + pod.Namespace + "/" + pod.Name + " has no controller and would not come back"
		}
		for _, budget := range budgets {
			if budget.Namespace != pod.Namespace || !selects(budget, pod) {
				continue
			}
			if budget.Status.DisruptionsAllowed <= 0 {
				return v1alpha1.ConsolidatableReasonPodDisruptionBudget,
					fmt.Sprintf("PodDisruptionBudget %s/%s of pod %s allows no disruption now", budget.Namespace, budget.Name, pod.Name)
			}
		}
	}
	return "", ""
}

// selects follows policy/v1: a null selector selects no pods, an empty one
// every pod of the namespace.
func selects(budget *policyv1.PodDisruptionBudget, pod *corev1.Pod) bool {
	if budget.Spec.Selector == nil {
		return false
	}
	selector, err := metav1.LabelSelectorAsSelector(budget.Spec.Selector)
	if err != nil {
		// The eviction API would not match it either.
		return false
	}
	return selector.Matches(labels.Set(pod.Labels))
}

// disruptionCost weighs what moving the pods costs: one per pod, more for
// higher priority (as Karpenter does, priority / 2^25, each pod between
// -10 and 10), so cheap nodes to empty go first.
func disruptionCost(pods []*corev1.Pod) float64 {
	cost := 0.0
	for _, pod := range pods {
		c := 1.0
		if pod.Spec.Priority != nil {
			c += float64(*pod.Spec.Priority) / math.Pow(2, 25)
		}
		cost += math.Max(-10, math.Min(10, c))
	}
	return cost
}

// sortByDisruptionCost orders candidates cheapest to disrupt first: by
// cost, then fewer pods, then the cheaper node is kept (the dearer goes
// first), then by name so every round decides the same way.
func sortByDisruptionCost(candidates []*candidate) {
	sort.SliceStable(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if a.cost != b.cost {
			return a.cost < b.cost
		}
		if len(a.pods) != len(b.pods) {
			return len(a.pods) < len(b.pods)
		}
		if a.price != b.price {
			return a.price > b.price
		}
		return a.claim.Name < b.claim.Name
	})
}
