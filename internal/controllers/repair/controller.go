// Package repair replaces nodes that stopped working: a node whose Ready
// condition has been False or Unknown, or whose heartbeat Lease has not been
// renewed, for longer than its pool's repair.after gets a replacement claim,
// and then its own claim is deleted, which drains what a dead kubelet lets
// go and removes the machine. Repair pauses while more of a pool is
// unhealthy than its maxUnhealthy share allows (a partition is not cured by
// new machines), and never has more nodes under repair than its budget.
package repair

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/controllers/disruption"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/statusapply"
)

// Name of the controller in logs, metrics and events.
const Name = "repair"

// NodeLeaseNamespace holds the kubelets' heartbeat Leases, one per node,
// named after it.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// Reasons of a pool's RepairAllowed condition.
const (
	ReasonWithinThreshold  = v1alpha1.ReasonWithinThreshold
	ReasonTooManyUnhealthy = v1alpha1.ReasonTooManyUnhealthy
	ReasonInvalidSettings  = v1alpha1.ReasonInvalidSettings
)

const (
	defaultAfter        = 10 * time.Minute
	defaultMaxUnhealthy = "20%"
	defaultBudget       = "1"
	// A pool whose repair budget is spent is looked at again this often
	// at the latest (a claim's deletion finishing also wakes it).
	recheck = time.Minute
)

// Controller reconciles one NodePool at a time: it finds the pool's
// unhealthy nodes and repairs those overdue, within maxUnhealthy and the
// repair budget.
type Controller struct {
	Kube     client.Client
	Recorder events.EventRecorder
	Clock    clock.Clock
	// Writes records the claims repair creates and deletes until the
	// cache shows them, and its claims are read with them; nil records
	// none.
	Writes *clusterstate.Writes
}

// SetupWithManager registers the controller. Claims and Ready changes of
// their nodes wake the pool.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&v1alpha1.NodePool{}).
		Watches(&v1alpha1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*v1alpha1.NodeClaim).Spec.NodePoolRef.Name}}}
		})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if pool := o.GetLabels()[v1alpha1.LabelNodePool]; pool != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
			}
			return nil
		}), builder.WithPredicates(readinessChanged)).
		Complete(c)
}

// readinessChanged passes node updates that change the Ready condition's
// status, not the heartbeats that only move its timestamps.
var readinessChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, updated := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return readyStatus(old) != readyStatus(updated)
	},
}

func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status
		}
	}
	return ""
}

// unhealthy is a claim whose node is not working, since when, and why.
type unhealthy struct {
	claim *v1alpha1.NodeClaim
	node  *corev1.Node
	since time.Time
	why   string
}

// Reconcile checks one pool.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pool := &v1alpha1.NodePool{}
	if err := c.Kube.Get(ctx, req.NamespacedName, pool); err != nil {
		if client.IgnoreNotFound(err) == nil {
			forgetMetrics(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pool.Spec.Repair == nil || !pool.DeletionTimestamp.IsZero() {
		forgetMetrics(pool.Name)
		return reconcile.Result{}, c.setAllowed(ctx, pool, nil)
	}
	settings, err := settingsOf(pool.Spec.Repair)
	if err != nil {
		return reconcile.Result{}, c.setAllowed(ctx, pool, &metav1.Condition{
			Status: metav1.ConditionFalse, Reason: ReasonInvalidSettings, Message: err.Error() + "; no node is repaired until it is fixed",
		})
	}
	now := c.Clock.Now()

	claims, err := (&clusterstate.Cluster{Kube: c.Kube, Writes: c.Writes}).Claims(ctx)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading the claims of pool %s: %w", pool.Name, err)
	}
	var live, inRepair []*v1alpha1.NodeClaim
	for i := range claims {
		claim := &claims[i]
		if claim.Spec.NodePoolRef.Name != pool.Name {
			continue
		}
		if underRepair(claim) {
			inRepair = append(inRepair, claim)
		}
		// A machine put to sleep is no sick node: its node goes NotReady
		// as it stops and is then deleted. Repair only ever deletes; it
		// never puts a machine to sleep.
		if claim.DeletionTimestamp.IsZero() && !claim.SleepRequested() {
			live = append(live, claim)
		}
	}

	// The pool is looked at again when the next node becomes due or the
	// next heartbeat lease expires: neither changes anything a watch sees.
	var sick []unhealthy
	var next time.Duration
	// The pool's size, for maxUnhealthy and the budget, is its nodes that
	// could be judged: a machine still booting can be neither healthy nor
	// not.
	judged := 0
	for _, claim := range live {
		found, err := c.health(ctx, claim, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		if found.judged {
			judged++
		}
		next = sooner(next, found.checkAgain)
		if found.unhealthy != nil {
			sick = append(sick, *found.unhealthy)
			next = sooner(next, found.unhealthy.since.Add(settings.after).Sub(now))
		}
	}
	metrics.RepairUnhealthyNodes.WithLabelValues(pool.Name).Set(float64(len(sick)))

	total := judged
	maxUnhealthy := scaled(settings.maxUnhealthy, total)
	if len(sick) > maxUnhealthy {
		metrics.RepairPaused.WithLabelValues(pool.Name).Set(1)
		message := fmt.Sprintf("%d of %d nodes are unhealthy, more than maxUnhealthy %s (%d) allows: repair is paused, as the cause is likely outside the nodes (a network partition, the control plane) and new machines would not cure it",
			len(sick), total, settings.maxUnhealthy.String(), maxUnhealthy)
		if err := c.setAllowed(ctx, pool, &metav1.Condition{Status: metav1.ConditionFalse, Reason: ReasonTooManyUnhealthy, Message: message}); err != nil {
			return reconcile.Result{}, err
		}
		return requeue(next), nil
	}
	metrics.RepairPaused.WithLabelValues(pool.Name).Set(0)
	if err := c.setAllowed(ctx, pool, &metav1.Condition{
		Status: metav1.ConditionTrue, Reason: ReasonWithinThreshold,
		Message: fmt.Sprintf("%d of %d nodes are unhealthy, at most %d (maxUnhealthy %s) may be for repair to go on", len(sick), total, maxUnhealthy, settings.maxUnhealthy.String()),
	}); err != nil {
		return reconcile.Result{}, err
	}

	allowed := scaled(settings.budget, total) - len(inRepair)
	sort.Slice(sick, func(i, j int) bool { return sick[i].since.Before(sick[j].since) })
	for _, node := range sick {
		// A claim marked but not deleted (a crash in between) is finished
		// on the budget it already holds.
		resuming := underRepair(node.claim)
		if now.Sub(node.since) < settings.after && !resuming {
			continue
		}
		if allowed <= 0 && !resuming {
			log.FromContext(ctx).V(1).Info("repair budget exhausted; the node waits", "nodeClaim", node.claim.Name, "budget", settings.budget.String())
			next = sooner(next, recheck)
			continue
		}
		if err := c.repair(ctx, pool, claims, node, settings.after); err != nil {
			return reconcile.Result{}, err
		}
		if !resuming {
			allowed--
		}
	}
	return requeue(next), nil
}

// forgetMetrics removes the gauges of a pool without repair.
func forgetMetrics(pool string) {
	metrics.RepairUnhealthyNodes.DeleteLabelValues(pool)
	metrics.RepairPaused.DeleteLabelValues(pool)
}

// sooner is the earlier of two waits, ignoring those not in the future.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return a
	case a <= 0:
		return b
	}
	return min(a, b)
}

func requeue(after time.Duration) reconcile.Result {
	if after <= 0 {
		return reconcile.Result{}
	}
	return reconcile.Result{RequeueAfter: after}
}

// health says whether a claim's node is unhealthy, and when to look again
// at a healthy one whose heartbeat could go stale.
type health struct {
	unhealthy  *unhealthy
	checkAgain time.Duration
	// judged: the claim has a node that was once initialized.
	judged bool
}

// health reads a claim's node and its heartbeat Lease. Only nodes that
// were once initialized count (the label stays when the claim's
// Initialized condition follows the node to NotReady): a node that never
// became Ready is the registration timeout's to handle.
func (c *Controller) health(ctx context.Context, claim *v1alpha1.NodeClaim, now time.Time) (health, error) {
	if claim.Status.NodeName == "" {
		return health{}, nil
	}
	node := &corev1.Node{}
	if err := c.Kube.Get(ctx, types.NamespacedName{Name: claim.Status.NodeName}, node); err != nil {
		return health{}, client.IgnoreNotFound(fmt.Errorf("reading node %s of claim %s: %w", claim.Status.NodeName, claim.Name, err))
	}
	if node.Labels[v1alpha1.LabelInitialized] != "true" {
		return health{}, nil
	}
	var found *unhealthy
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady && condition.Status != corev1.ConditionTrue {
			found = &unhealthy{claim: claim, node: node, since: condition.LastTransitionTime.Time,
				why: fmt.Sprintf("node %s has been Ready=%s (%s) since %s", node.Name, condition.Status, condition.Reason, condition.LastTransitionTime.UTC().Format(time.RFC3339))}
		}
	}
	lease := &coordinationv1.Lease{}
	err := c.Kube.Get(ctx, types.NamespacedName{Namespace: NodeLeaseNamespace, Name: node.Name}, lease)
	if client.IgnoreNotFound(err) != nil {
		return health{}, fmt.Errorf("reading the heartbeat lease of node %s: %w", node.Name, err)
	}
	if err != nil || lease.Spec.RenewTime == nil {
		// No lease: a kubelet without heartbeat leases, or one that never
		// wrote one; the Ready condition alone tells.
		return health{unhealthy: found, judged: true}, nil
	}
	renewed := lease.Spec.RenewTime.Time
	duration := 40 * time.Second
	if lease.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	expires := renewed.Add(duration)
	if now.Before(expires) {
		return health{unhealthy: found, checkAgain: expires.Sub(now), judged: true}, nil
	}
	if found == nil || renewed.Before(found.since) {
		found = &unhealthy{claim: claim, node: node, since: renewed,
			why: fmt.Sprintf("node %s has not renewed its heartbeat lease since %s", node.Name, renewed.UTC().Format(time.RFC3339))}
	}
	return health{unhealthy: found, judged: true}, nil
}

// repair makes a replacement (unless one exists from an earlier attempt),
// marks the claim Disrupting with reason Unhealthy (termination and its
// metric read it) and deletes it.
func (c *Controller) repair(ctx context.Context, pool *v1alpha1.NodePool, claims []v1alpha1.NodeClaim, node unhealthy, after time.Duration) error {
	claim := node.claim
	replacement := replacementOf(claims, claim.Name)
	if replacement == "" {
		made, err := c.createReplacement(ctx, pool, claim)
		if err != nil {
			return err
		}
		replacement = made.Name
	}
	message := fmt.Sprintf("%s, longer than repair.after %s: replaced by %s", node.why, after, replacement)
	stored := claim.DeepCopy()
	claim.SetCondition(v1alpha1.ConditionDisrupting, metav1.ConditionTrue, string(v1alpha1.DisruptionReasonUnhealthy), message, c.Clock.Now())
	if !equality.Semantic.DeepEqual(stored.Status, claim.Status) {
		// The Disrupting condition alone is repair's; applied only over
		// the claim as judged, so a claim written since conflicts and is
		// judged again.
		owned := statusapply.Conditions{Conditions: []metav1.Condition{*meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)}}
		if err := statusapply.ApplyUnchanged(ctx, c.Kube, "NodeClaim", claim, &owned, Name); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("marking claim %s Unhealthy: %w", claim.Name, err))
		}
	}
	log.FromContext(ctx).Info("repairing node", "nodeClaim", claim.Name, "node", node.node.Name, "replacement", replacement, "why", node.why)
	c.Recorder.Eventf(claim, node.node, corev1.EventTypeWarning, string(v1alpha1.DisruptionReasonUnhealthy), "Repair", "%s", message)
	c.Recorder.Eventf(node.node, claim, corev1.EventTypeWarning, string(v1alpha1.DisruptionReasonUnhealthy), "Repair", "%s", message)
	if err := c.Kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting unhealthy claim %s: %w", claim.Name, err)
	}
	c.Writes.Deleted(claim)
	metrics.NodesRepaired.WithLabelValues(pool.Name).Inc()
	return nil
}

// createReplacement writes a claim of the same shape and requirements from
// the pool's current template, annotated as the disruption controller's
// replacements are, so it treats the replacement as in flight until the
// broken claim is gone.
func (c *Controller) createReplacement(ctx context.Context, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim) (*v1alpha1.NodeClaim, error) {
	shape := scheduling.Shape{Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory, ExtendedResources: claim.Spec.Shape.ExtendedResources}
	replacement := poolclaims.New(pool, shape, claim.Spec.Requirements.Resources, claim.Spec.Requirements.NodeSelector)
	replacement.Spec.Shape = claim.Spec.Shape
	replacement.Annotations[v1alpha1.AnnotationTemplateHash] = pool.TemplateHash(replacement.Spec.Shape)
	replacement.Annotations[disruption.AnnotationReplaces] = claim.Name
	replacement.Annotations[disruption.AnnotationDisruptionReason] = string(v1alpha1.DisruptionReasonUnhealthy)
	if err := c.Kube.Create(ctx, replacement); err != nil {
		return nil, fmt.Errorf("creating a replacement for unhealthy claim %s in pool %s: %w", claim.Name, pool.Name, err)
	}
	c.Writes.Created(replacement)
	metrics.NodeClaimsCreated.WithLabelValues(pool.Name, metrics.ReasonRepair).Inc()
	return replacement, nil
}

// replacementOf names a live claim that replaces the named one.
func replacementOf(claims []v1alpha1.NodeClaim, name string) string {
	for i := range claims {
		if claims[i].DeletionTimestamp.IsZero() && slices.Contains(strings.Split(claims[i].Annotations[disruption.AnnotationReplaces], ","), name) {
			return claims[i].Name
		}
	}
	return ""
}

// underRepair: the claim is marked for deletion as Unhealthy.
func underRepair(claim *v1alpha1.NodeClaim) bool {
	condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)
	return condition != nil && condition.Status == metav1.ConditionTrue && condition.Reason == string(v1alpha1.DisruptionReasonUnhealthy)
}

// setAllowed writes the pool's RepairAllowed condition, or removes it
// (nil).
func (c *Controller) setAllowed(ctx context.Context, pool *v1alpha1.NodePool, condition *metav1.Condition) error {
	stored := pool.DeepCopy()
	if condition == nil {
		meta.RemoveStatusCondition(&pool.Status.Conditions, v1alpha1.ConditionRepairAllowed)
	} else {
		condition.Type = v1alpha1.ConditionRepairAllowed
		condition.ObservedGeneration = pool.Generation
		condition.LastTransitionTime = metav1.NewTime(c.Clock.Now())
		was := meta.FindStatusCondition(stored.Status.Conditions, v1alpha1.ConditionRepairAllowed)
		meta.SetStatusCondition(&pool.Status.Conditions, *condition)
		if condition.Status == metav1.ConditionFalse && (was == nil || was.Status != metav1.ConditionFalse || was.Reason != condition.Reason) {
			c.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, condition.Reason, "Repair", "%s", condition.Message)
		}
	}
	if equality.Semantic.DeepEqual(stored.Status, pool.Status) {
		return nil
	}
	if was := meta.FindStatusCondition(stored.Status.Conditions, v1alpha1.ConditionRepairAllowed); condition == nil && was != nil {
		// Applying the condition first takes it over from whoever wrote
		// it last (a version that patched it), so that applying none
		// removes it.
		if err := c.applyAllowed(ctx, pool, was); err != nil {
			return err
		}
	}
	return c.applyAllowed(ctx, pool, meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionRepairAllowed))
}

// applyAllowed writes the pool's RepairAllowed condition by server-side
// apply under the controller's own field manager, the one pool status
// field it owns; nil removes it. The pool's other conditions are the
// nodepool controller's and the external scaler's, which apply them under
// theirs, and are left alone.
func (c *Controller) applyAllowed(ctx context.Context, pool *v1alpha1.NodePool, condition *metav1.Condition) error {
	var owned statusapply.Conditions
	if condition != nil {
		owned.Conditions = []metav1.Condition{*condition}
	}
	if _, err := statusapply.Apply(ctx, c.Kube, "NodePool", pool.Name, &owned, Name); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("writing RepairAllowed of pool %s: %w", pool.Name, err))
	}
	return nil
}

// settings are a pool's repair settings with defaults filled in.
type settings struct {
	after        time.Duration
	maxUnhealthy intstr.IntOrString
	budget       intstr.IntOrString
}

func settingsOf(repair *v1alpha1.Repair) (settings, error) {
	s := settings{after: defaultAfter, maxUnhealthy: intstr.Parse(defaultMaxUnhealthy), budget: intstr.Parse(defaultBudget)}
	if repair.After != nil {
		s.after = repair.After.Duration
	}
	if repair.MaxUnhealthy != "" {
		s.maxUnhealthy = intstr.Parse(repair.MaxUnhealthy)
	}
	if repair.Budget != "" {
		s.budget = intstr.Parse(repair.Budget)
	}
	for field, value := range map[string]intstr.IntOrString{"maxUnhealthy": s.maxUnhealthy, "budget": s.budget} {
		if _, err := intstr.GetScaledValueFromIntOrPercent(&value, 100, true); err != nil {
			return s, fmt.Errorf("repair.%s %q: %w", field, value.String(), err)
		}
	}
	return s, nil
}

// scaled is a count, or a percentage of total rounded up: any share above
// 0% of a pool lets one node through.
func scaled(value intstr.IntOrString, total int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&value, total, true)
	if err != nil {
		return 0
	}
	return n
}
