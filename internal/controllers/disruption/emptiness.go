// Package disruption removes nodes nobody needs, voluntarily and within the
// pool's budgets: nodes that have carried nothing but DaemonSet pods for the
// pool's consolidateAfter. Never below the pool's minNodes, never a node or
// pod marked do-not-disrupt.
package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/controllers/index"
	"github.com/claimscale/claimscale/internal/metrics"
)

// EmptinessName names the emptiness controller.
const EmptinessName = "disruption.emptiness"

const (
	defaultConsolidateAfter = 30 * time.Second
	// How soon a node that could not go (budget, minNodes) is looked at again.
	blockedRecheck = 5 * time.Second
)

// Emptiness deletes the claims of nodes that stayed empty for their pool's
// consolidateAfter.
type Emptiness struct {
	Kube     client.Client
	Recorder events.EventRecorder
	Clock    clock.Clock
}

// SetupWithManager registers the controller. It reconciles one claim at a
// time: budgets and minNodes are counted across a pool, and two concurrent
// decisions could both see room for one more.
func (e *Emptiness) SetupWithManager(mgr ctrl.Manager) error {
	if e.Clock == nil {
		e.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(EmptinessName).
		For(&v1alpha1.NodeClaim{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(e.claimOfPod)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(e)
}

func (e *Emptiness) claimOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	nodeName := o.(*corev1.Pod).Spec.NodeName
	if nodeName == "" {
		return nil
	}
	var node corev1.Node
	if err := e.Kube.Get(ctx, client.ObjectKey{Name: nodeName}, &node); err != nil {
		return nil
	}
	if name := node.Labels[v1alpha1.LabelNodeClaim]; name != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	}
	return nil
}

// Reconcile tracks one claim's Empty condition and deletes the claim once
// it has been empty long enough and the pool allows it.
func (e *Emptiness) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	claim := &v1alpha1.NodeClaim{}
	if err := e.Kube.Get(ctx, req.NamespacedName, claim); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !claim.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
		return reconcile.Result{}, nil
	}
	pool := &v1alpha1.NodePool{}
	if err := e.Kube.Get(ctx, client.ObjectKey{Name: claim.Spec.NodePoolRef.Name}, pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	node := &corev1.Node{}
	if err := e.Kube.Get(ctx, client.ObjectKey{Name: claim.Status.NodeName}, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := claim.DeepCopy()
	result, remove, err := e.reconcile(ctx, pool, claim, node)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Status first, so the Disrupting reason is on the claim when
	// termination reads it.
	if !equality.Semantic.DeepEqual(stored.Status, claim.Status) {
		patch := client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})
		if err := e.Kube.Status().Patch(ctx, claim, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if remove {
		if err := e.Kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting empty claim %s: %w", claim.Name, err)
		}
		// The next decision counts disrupting claims from the cache; until
		// it has seen this deletion, it would count one too few and go over
		// the budget.
		if err := e.awaitDeletionInCache(ctx, claim); err != nil {
			return reconcile.Result{}, err
		}
	}
	return result, nil
}

func (e *Emptiness) awaitDeletionInCache(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var cached v1alpha1.NodeClaim
		err := e.Kube.Get(ctx, client.ObjectKeyFromObject(claim), &cached)
		return err != nil || !cached.DeletionTimestamp.IsZero(), client.IgnoreNotFound(err)
	})
}

// reconcile updates the claim's conditions and says whether to delete it.
func (e *Emptiness) reconcile(ctx context.Context, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim, node *corev1.Node) (reconcile.Result, bool, error) {
	var pods corev1.PodList
	if err := e.Kube.List(ctx, &pods, client.MatchingFields{index.PodNodeName: node.Name}); err != nil {
		return reconcile.Result{}, false, fmt.Errorf("listing pods on node %s: %w", node.Name, err)
	}
	if n := countWorkloadPods(pods.Items); n > 0 {
		e.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionFalse, "NotEmpty", fmt.Sprintf("node %s runs %d pods", node.Name, n))
		return reconcile.Result{}, false, nil
	}
	consolidateAfter := defaultConsolidateAfter
	if pool.Spec.Disruption.ConsolidateAfter != nil {
		consolidateAfter = pool.Spec.Disruption.ConsolidateAfter.Duration
	}
	e.setCondition(claim, v1alpha1.ConditionEmpty, metav1.ConditionTrue, "Empty", fmt.Sprintf("node %s runs no pods but DaemonSet pods", node.Name))
	emptySince := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionEmpty).LastTransitionTime.Time
	if waited := e.Clock.Since(emptySince); waited < consolidateAfter {
		return reconcile.Result{RequeueAfter: consolidateAfter - waited}, false, nil
	}

	if blocker := doNotDisrupt(node, pods.Items); blocker != "" {
		e.Recorder.Eventf(claim, node, corev1.EventTypeNormal, "DisruptionBlocked", "Disrupt", "empty, but %s", blocker)
		return reconcile.Result{RequeueAfter: blockedRecheck}, false, nil
	}
	var claims v1alpha1.NodeClaimList
	if err := e.Kube.List(ctx, &claims, client.MatchingFields{index.NodeClaimNodePool: pool.Name}); err != nil {
		return reconcile.Result{}, false, fmt.Errorf("listing claims of pool %s: %w", pool.Name, err)
	}
	active, disrupting := 0, 0
	for i := range claims.Items {
		if claims.Items[i].DeletionTimestamp.IsZero() {
			active++
		} else {
			disrupting++
		}
	}
	if active-1 < int(pool.Spec.MinNodes) {
		// Warm capacity stays; the pool may lower minNodes later.
		return reconcile.Result{RequeueAfter: time.Minute}, false, nil
	}
	allowed, err := AllowedDisruptions(pool, v1alpha1.DisruptionReasonEmpty, active+disrupting, e.Clock.Now())
	if err != nil {
		return reconcile.Result{}, false, err
	}
	if disrupting >= allowed {
		log.FromContext(ctx).V(1).Info("empty node waits for the disruption budget", "allowed", allowed, "disrupting", disrupting)
		return reconcile.Result{RequeueAfter: blockedRecheck}, false, nil
	}

	message := fmt.Sprintf("node %s has been empty for %s", node.Name, consolidateAfter)
	e.setCondition(claim, v1alpha1.ConditionDisrupting, metav1.ConditionTrue, string(v1alpha1.DisruptionReasonEmpty), message)
	e.Recorder.Eventf(claim, node, corev1.EventTypeNormal, "Disrupting", "Disrupt", "deleting: %s", message)
	metrics.DisruptionDecisions.WithLabelValues(string(v1alpha1.DisruptionReasonEmpty), "delete").Inc()
	log.FromContext(ctx).Info("deleting empty node", "node", node.Name)
	return reconcile.Result{}, true, nil
}

func (e *Emptiness) setCondition(claim *v1alpha1.NodeClaim, conditionType string, status metav1.ConditionStatus, reason, message string) {
	existing := meta.FindStatusCondition(claim.Status.Conditions, conditionType)
	if existing != nil && existing.Status == status && existing.Reason == reason && existing.Message == message {
		return
	}
	condition := metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: claim.Generation, LastTransitionTime: metav1.NewTime(e.Clock.Now()),
	}
	if existing != nil && existing.Status == status {
		condition.LastTransitionTime = existing.LastTransitionTime
	}
	meta.SetStatusCondition(&claim.Status.Conditions, condition)
}

// countWorkloadPods counts the pods that would have to move: not
// DaemonSet or mirror pods, not finished.
func countWorkloadPods(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if isWorkload(&pods[i]) {
			n++
		}
	}
	return n
}

func isWorkload(pod *corev1.Pod) bool {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, owner := range pod.OwnerReferences {
		if owner.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// doNotDisrupt names what forbids voluntary removal of the node, if anything.
func doNotDisrupt(node *corev1.Node, pods []corev1.Pod) string {
	if node.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
		return "node " + node.Name + " is annotated " + v1alpha1.AnnotationDoNotDisrupt
	}
	for i := range pods {
		if pods[i].Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
			return "pod " + pods[i].Namespace + "/" + pods[i].Name + " is annotated " + v1alpha1.AnnotationDoNotDisrupt
		}
	}
	return ""
}
