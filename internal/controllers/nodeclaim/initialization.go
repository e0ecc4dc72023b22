package nodeclaim

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// Taints the node lifecycle and cloud controllers put on nodes that are not
// ready for pods yet.
var notReadyTaints = []string{
	corev1.TaintNodeNotReady,
	corev1.TaintNodeUnreachable,
	"node.cloudprovider.kubernetes.io/uninitialized",
}

// initialization marks the claim Initialized once its node is Ready and
// every startup taint is gone.
type initialization struct{ *Controller }

func (i *initialization) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
		return reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := i.Kube.Get(ctx, client.ObjectKey{Name: claim.Status.NodeName}, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !nodeReady(node) {
		i.setCondition(claim, v1alpha1.ConditionInitialized, metav1.ConditionFalse, v1alpha1.ReasonNodeNotReady, "node "+node.Name+" is not Ready yet")
		return reconcile.Result{}, nil
	}
	if pending := pendingTaints(node, claim.Spec.StartupTaints); len(pending) > 0 {
		i.setCondition(claim, v1alpha1.ConditionInitialized, metav1.ConditionFalse, v1alpha1.ReasonStartupTaintsPresent,
			fmt.Sprintf("node %s still has taints %s", node.Name, strings.Join(pending, ", ")))
		return reconcile.Result{}, nil
	}
	if node.Labels[v1alpha1.LabelInitialized] != "true" {
		patch := client.MergeFrom(node.DeepCopy())
		node.Labels[v1alpha1.LabelInitialized] = "true"
		if err := i.Kube.Patch(ctx, node, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("labelling node %s initialized: %w", node.Name, err)
		}
	}
	claim.Status.Allocatable = node.Status.Allocatable
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
		if !slept(claim) {
			// A woken machine's time is the wake histogram's, not a launch's.
			metrics.LaunchToReadySeconds.WithLabelValues(poolName(claim)).Observe(i.Clock.Since(claim.CreationTimestamp.Time).Seconds())
		}
		i.eventf(ctx, claim, node, corev1.EventTypeNormal, "Initialized", "Initialize", "node %s is ready for pods", node.Name)
	}
	i.setCondition(claim, v1alpha1.ConditionInitialized, metav1.ConditionTrue, v1alpha1.ReasonInitialized, "node "+node.Name+" is Ready and has no startup taints")
	return reconcile.Result{}, nil
}

func nodeReady(node *corev1.Node) bool {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pendingTaints lists the startup and not-ready taints still on the node.
func pendingTaints(node *corev1.Node, startupTaints []corev1.Taint) []string {
	var pending []string
	for _, taint := range node.Spec.Taints {
		for _, startup := range startupTaints {
			if taint.Key == startup.Key && taint.Effect == startup.Effect {
				pending = append(pending, taint.ToString())
			}
		}
		for _, key := range notReadyTaints {
			if taint.Key == key {
				pending = append(pending, taint.ToString())
			}
		}
	}
	return pending
}
