// Package nodeprovider reports whether each NodeProvider can be built: its
// settings parse and its credentials Secret is there (condition Ready).
package nodeprovider

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Name of the controller in logs and metrics.
const Name = "nodeprovider.status"

// A Secret created after its NodeProvider is noticed within this time.
const recheck = time.Minute

// ProviderBuilder builds a NodeProvider's provider.
type ProviderBuilder interface {
	For(ctx context.Context, nodeProvider *v1alpha1.NodeProvider) (provider.Provider, error)
}

// Controller reconciles NodeProvider status.
type Controller struct {
	Kube      client.Client
	Providers ProviderBuilder
}

// SetupWithManager registers the controller.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(Name).For(&v1alpha1.NodeProvider{}).Complete(c)
}

// Reconcile writes one NodeProvider's Ready condition.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nodeProvider := &v1alpha1.NodeProvider{}
	if err := c.Kube.Get(ctx, req.NamespacedName, nodeProvider); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := nodeProvider.DeepCopy()
	condition := metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready",
		Message: "settings and credentials read", ObservedGeneration: nodeProvider.Generation,
	}
	if _, err := c.Providers.For(ctx, nodeProvider); err != nil {
		condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, "InvalidConfiguration", err.Error()
	}
	meta.SetStatusCondition(&nodeProvider.Status.Conditions, condition)
	if !equality.Semantic.DeepEqual(stored.Status, nodeProvider.Status) {
		if err := c.Kube.Status().Patch(ctx, nodeProvider, client.MergeFrom(stored)); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}
