package provisioning

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/retry"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// Controller wires the batcher to pod and pool events and runs the
// provisioner whenever a batch closes.
type Controller struct {
	Provisioner *Provisioner
	Batcher     *Batcher
	// Periodic opens a batch on its own this often (default 30s).
	Periodic time.Duration
}

// SetupWithManager registers the pod watch and the provisioning loop.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Periodic == 0 {
		c.Periodic = 30 * time.Second
	}
	trigger := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		c.Batcher.Trigger()
		return reconcile.Result{}, nil
	})
	provisionable := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && Provisionable(pod)
	})
	// A pod bound to a node may have taken a pool's headroom: the next
	// round buys it again, without waiting for the periodic one.
	bound := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*corev1.Pod)
			pod, okNew := e.ObjectNew.(*corev1.Pod)
			return okOld && okNew && old.Spec.NodeName == "" && pod.Spec.NodeName != "" && !scheduling.BelongsToNode(pod)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(Name+".pods").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.Or[client.Object](provisionable, bound))).
		Complete(trigger); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(Name+".nodepools").
		For(&v1alpha1.NodePool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(trigger); err != nil {
		return err
	}
	return mgr.Add(c)
}

// NeedLeaderElection: only the leader writes claims.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs provisioning rounds until the context ends.
func (c *Controller) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName(Name)
	ctx = log.IntoContext(ctx, logger)
	var failures retry.Backoff
	for c.Batcher.Wait(ctx, c.Periodic) {
		if err := c.Provisioner.Provision(ctx); err != nil {
			// Try again soon rather than at the next periodic round, but
			// on a backoff: a round that fails the same way every time
			// must not become a hot loop.
			wait := failures.Failed("round", 0, err)
			if apierrors.IsConflict(err) {
				// A write raced another's; the retry reads the newer
				// object. Nobody has to act on it.
				logger.V(1).Info("provisioning round conflicted, retrying", "error", err.Error(), "retryIn", wait)
			} else {
				logger.Error(err, "provisioning round failed", "retryIn", wait)
			}
			time.AfterFunc(wait, c.Batcher.Trigger)
			continue
		}
		failures.Succeeded("round")
		metrics.ProvisioningLastSuccess.SetToCurrentTime()
	}
	return nil
}
