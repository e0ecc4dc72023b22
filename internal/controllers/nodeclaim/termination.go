package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/pkg/provider"
)

const (
	defaultTerminationGracePeriod = 5 * time.Minute
	// How often a drain looks at the pods still on the node.
	drainPoll = 2 * time.Second
)

// reconcileDelete takes a deleted claim's node out of service and its
// machine away, in an order that survives a crash at any step: cordon,
// drain through the Eviction API, delete the machine, delete the Node, and
// only then release the claim.
func (c *Controller) reconcileDelete(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(claim, v1alpha1.TerminationFinalizer) {
		return reconcile.Result{}, nil
	}
	stored := claim.DeepCopy()
	ctx, after := withAfterStatus(ctx)
	if err := c.revokeBootstrapToken(ctx, claim); err != nil {
		return reconcile.Result{}, err
	}
	result, err := c.terminate(ctx, claim)
	statusErr := c.writeStatus(ctx, stored, claim)
	if statusErr == nil || !controllerutil.ContainsFinalizer(claim, v1alpha1.TerminationFinalizer) {
		// Once the finalizer is off, the claim may be gone and its status
		// unwritable; the events still happened.
		_ = after.run(ctx, c.Kube, c.Recorder, claim)
	}
	if statusErr != nil && err == nil {
		err = statusErr
	}
	return result, err
}

func (c *Controller) terminate(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// A sleeping machine has no Node, so nothing is drained: its machine
	// is deleted.
	node, err := c.nodeFor(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node != nil {
		left, err := c.cordonAndDrain(ctx, claim, node, claim.DeletionTimestamp.Time)
		if err != nil {
			return reconcile.Result{}, err
		}
		if left != "" {
			c.setCondition(claim, v1alpha1.ConditionTerminating, metav1.ConditionTrue, v1alpha1.ReasonDraining, left)
			return reconcile.Result{RequeueAfter: drainPoll}, nil
		}
	}

	c.setCondition(claim, v1alpha1.ConditionTerminating, metav1.ConditionTrue, v1alpha1.ReasonDeprovisioning, "deleting the machine")
	if err := c.deleteMachine(ctx, claim); err != nil {
		if !machineOwnerGone(err) {
			c.setCondition(claim, v1alpha1.ConditionTerminating, metav1.ConditionTrue, v1alpha1.ReasonDeprovisionFailed, err.Error())
			c.eventf(ctx, claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonDeprovisionFailed, "Terminate", "%v", err)
			return reconcile.Result{RequeueAfter: c.retryAfter(claim, err, maxRetryInterval)}, nil
		}
		if !releaseRequested(claim) && !neverLaunched(claim) {
			return c.waitForMachineOwner(ctx, claim, err), nil
		}
		if releaseRequested(claim) {
			c.eventf(ctx, claim, nil, corev1.EventTypeWarning, "MachineReleased", "Terminate",
				"%v; released by annotation %s: the machine, if any, is left to garbage collection", err, v1alpha1.AnnotationReleaseMachine)
		}
	}
	if node != nil {
		if err := c.releaseNode(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(claim, v1alpha1.TerminationFinalizer)
	if err := c.Kube.Patch(ctx, claim, patch); err != nil {
		// A conflict comes back here, and the claim terminates again:
		// counted and told only once the finalizer is off.
		controllerutil.AddFinalizer(claim, v1alpha1.TerminationFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	metrics.NodeClaimsTerminated.WithLabelValues(poolName(claim), terminationReason(claim)).Inc()
	c.eventf(ctx, claim, nil, corev1.EventTypeNormal, "Terminated", "Terminate", "machine %s deleted", claim.Status.ProviderID)
	c.forgetRetries(claim)
	c.launchesCounted.Delete(claim.UID)
	log.FromContext(ctx).Info("terminated", "providerID", claim.Status.ProviderID)
	return reconcile.Result{}, nil
}

// terminationReason is why a claim went, for the termination counter:
// that it slept too long, else the reason it was disrupted for, else why
// it failed (a registration timeout, no capacity), else Deleted (by a person, or with its node).
func terminationReason(claim *v1alpha1.NodeClaim) string {
	// First: the Disrupting mark that put the machine to sleep may still
	// be on the claim the sleep limit deletes.
	if sleptTooLong(claim) {
		return metrics.ReasonSleepLimit
	}
	if condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting); condition != nil && condition.Status == metav1.ConditionTrue {
		return condition.Reason
	}
	for _, conditionType := range []string{v1alpha1.ConditionFailed, v1alpha1.ConditionRegistered, v1alpha1.ConditionLaunched} {
		condition := meta.FindStatusCondition(claim.Status.Conditions, conditionType)
		if condition == nil {
			continue
		}
		switch {
		case condition.Reason == v1alpha1.ReasonRegistrationTimeout && (conditionType != v1alpha1.ConditionRegistered || condition.Status == metav1.ConditionFalse):
			return metrics.ReasonRegistrationTimeout
		case condition.Reason == v1alpha1.ReasonInsufficientCapacity && (conditionType != v1alpha1.ConditionLaunched || condition.Status == metav1.ConditionFalse):
			return metrics.ReasonInsufficientCapacity
		}
	}
	return metrics.ReasonDeleted
}

// cordonAndDrain takes the node out of service, as for its deletion or
// its machine's sleep: cordoned, its pods evicted, and deleted outright
// once the claim's termination grace period, counted from since, is over.
// It returns what is left to wait for ("" once drained).
func (c *Controller) cordonAndDrain(ctx context.Context, claim *v1alpha1.NodeClaim, node *corev1.Node, since time.Time) (string, error) {
	if err := c.cordon(ctx, node); err != nil {
		return "", err
	}
	remaining, blocked, err := c.drain(ctx, claim, node, since)
	if err != nil {
		return "", err
	}
	if remaining == 0 {
		return "", nil
	}
	message := fmt.Sprintf("draining node %s: %d pods left", node.Name, remaining)
	if blocked > 0 {
		message += fmt.Sprintf(", %d waiting for a PodDisruptionBudget", blocked)
	}
	return message, nil
}

// cordon taints the node so nothing new lands on it while it drains.
func (c *Controller) cordon(ctx context.Context, node *corev1.Node) error {
	disrupted := corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule}
	if hasTaint(node.Spec.Taints, disrupted) {
		return nil
	}
	patch := client.StrategicMergeFrom(node.DeepCopy())
	node.Spec.Taints = append(node.Spec.Taints, disrupted)
	if err := c.Kube.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("cordoning node %s: %w", node.Name, err)
	}
	return nil
}

// drain evicts the node's pods through the Eviction API, so
// PodDisruptionBudgets hold, and deletes them outright once the claim's
// termination grace period, counted from since, is over. DaemonSet and mirror pods stay. It
// returns how many pods are still to go and how many of those a budget
// held back.
func (c *Controller) drain(ctx context.Context, claim *v1alpha1.NodeClaim, node *corev1.Node, since time.Time) (remaining, blocked int, err error) {
	var pods corev1.PodList
	if err := c.Kube.List(ctx, &pods, client.MatchingFields{index.PodNodeName: node.Name}); err != nil {
		return 0, 0, fmt.Errorf("listing pods on node %s: %w", node.Name, err)
	}
	graceOver := c.Clock.Since(since) > terminationGracePeriod(claim)
	unreachable := kubeletGone(node)
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !drainable(pod) {
			continue
		}
		remaining++
		if !pod.DeletionTimestamp.IsZero() && !graceOver && !unreachable {
			continue // already on its way out
		}
		// A pod deleted on a node whose kubelet is gone stays Terminating
		// for ever: only the kubelet confirms that its containers stopped.
		// Once the eviction (and with it the PodDisruptionBudget) let it
		// go, it is removed outright, as the node lifecycle controller
		// does for nodes tainted out-of-service.
		if graceOver || (unreachable && !pod.DeletionTimestamp.IsZero()) {
			if err := c.Kube.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				return 0, 0, fmt.Errorf("deleting pod %s/%s after the termination grace period: %w", pod.Namespace, pod.Name, err)
			}
			continue
		}
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
		err := c.Kube.SubResource("eviction").Create(ctx, pod, eviction)
		switch {
		case err == nil && unreachable:
			if err := c.Kube.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				return 0, 0, fmt.Errorf("deleting evicted pod %s/%s of unreachable node %s: %w", pod.Namespace, pod.Name, node.Name, err)
			}
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			blocked++
		case busyAPIServer(err):
			// The next drain poll asks again; a busy API server is no
			// error anyone has to act on.
			log.FromContext(ctx).V(1).Info("eviction not answered in time, retrying", "pod", klog.KObj(pod), "error", err.Error())
		default:
			return 0, 0, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return remaining, blocked, nil
}

// busyAPIServer says whether err is an API server too busy to answer in
// time, which a retry alone fixes.
func busyAPIServer(err error) bool {
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		errors.Is(err, context.DeadlineExceeded)
}

// kubeletGone says whether nobody runs the node's pods any more: its Ready
// condition is False or Unknown, or it carries the out-of-service taint an
// administrator sets on a node known to be shut down.
func kubeletGone(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status != corev1.ConditionTrue
		}
	}
	return false
}

// drainable says whether a pod must leave before its node goes: not a pod
// that belongs to the node (DaemonSet, mirror), not finished.
func drainable(pod *corev1.Pod) bool {
	return !scheduling.BelongsToNode(pod) && !scheduling.Terminated(pod)
}

func terminationGracePeriod(claim *v1alpha1.NodeClaim) time.Duration {
	if claim.Spec.TerminationGracePeriod != nil {
		return claim.Spec.TerminationGracePeriod.Duration
	}
	return defaultTerminationGracePeriod
}

// deleteMachine removes the claim's machine. A claim that lost its
// providerID to a crash between Create and the status write still names its
// machine by tag, so that is looked up too.
func (c *Controller) deleteMachine(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	machines, err := c.providerOf(ctx, claim)
	if err != nil {
		return fmt.Errorf("finding the provider of claim %s: %w", claim.Name, err)
	}
	providerIDs := []string{}
	if claim.Status.ProviderID != "" {
		providerIDs = append(providerIDs, claim.Status.ProviderID)
	} else {
		started := time.Now()
		instances, err := machines.List(ctx)
		metrics.ObserveProviderCall(providerLabel(claim), "list", started, resultOf(err))
		if err != nil {
			return fmt.Errorf("listing machines for claim %s: %w", claim.Name, err)
		}
		for _, instance := range instances {
			if instance.ClaimName() == claim.Name {
				providerIDs = append(providerIDs, instance.ProviderID)
			}
		}
	}
	for _, providerID := range providerIDs {
		started := time.Now()
		err := machines.Delete(ctx, providerID)
		metrics.ObserveProviderCall(providerLabel(claim), "delete", started, resultOf(err))
		if err != nil && !provider.IsNotFound(err) {
			return fmt.Errorf("deleting machine %s: %w", providerID, err)
		}
	}
	return nil
}

// releaseNode removes our finalizer from the node and deletes it.
func (c *Controller) releaseNode(ctx context.Context, node *corev1.Node) error {
	if controllerutil.ContainsFinalizer(node, v1alpha1.TerminationFinalizer) {
		patch := client.StrategicMergeFrom(node.DeepCopy())
		controllerutil.RemoveFinalizer(node, v1alpha1.TerminationFinalizer)
		if err := c.Kube.Patch(ctx, node, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing node %s: %w", node.Name, err)
		}
	}
	if err := c.Kube.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting node %s: %w", node.Name, err)
	}
	return nil
}
