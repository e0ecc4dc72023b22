// Package nodeclaim runs a NodeClaim's life: launch the machine, wait for its
// Node to register and initialize, give up on machines that never register,
// put the machine to sleep and wake it when asked, and, once the claim (or
// its Node) is deleted, cordon, drain and deprovision the node before the
// finalizer comes off. Each stage is a small
// sub-reconciler in its own file; the controller runs them in order and
// writes status once.
package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/statusapply"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Name of the controller in logs, metrics and events.
const Name = "nodeclaim.lifecycle"

// ProviderResolver finds the provider that makes a claim's machine.
type ProviderResolver interface {
	// ProviderNameOf names the NodeProvider of a claim's machine.
	ProviderNameOf(ctx context.Context, claim *v1alpha1.NodeClaim) (string, error)
	ForProviderName(ctx context.Context, name string) (provider.Provider, error)
}

// CapacityRecorder is told when a provider has no capacity for a pool's
// shape in a zone ("" for a claim without one), so provisioning backs off
// from it.
type CapacityRecorder interface {
	Record(pool, shape, zone string) time.Duration
}

// Controller reconciles NodeClaims.
type Controller struct {
	Kube      client.Client
	Providers ProviderResolver
	Capacity  CapacityRecorder
	Recorder  events.EventRecorder
	Clock     clock.Clock
	// Bootstrap renders user data and join tokens; nil renders none.
	Bootstrap Bootstrapper
	// Writes waits for the cache to show the controller's status writes;
	// nil looks at the cache again until it does.
	Writes *clusterstate.Writes
	// Nominations says which pods each claim's node was bought for, to
	// nominate there at registration; nil nominates none.
	Nominations *clusterstate.Nominations

	// DefaultRegistrationTimeout applies when the pool is gone or says
	// nothing.
	DefaultRegistrationTimeout time.Duration

	// KeepFailedClaims keeps a claim that failed for good (no capacity, no
	// registration) with its machine deleted and the condition Failed,
	// instead of deleting it: cluster-autoscaler must see the failure
	// (failure.go). The externalgrpc mode sets it.
	KeepFailedClaims bool

	retries sync.Map // claim UID → *backoff.ExponentialBackOff
	// launchesCounted holds the claims whose launch the metric counted: a
	// launch seen again through a stale cache adopts the same machine and
	// must not count it twice.
	launchesCounted sync.Map // claim UID → struct{}
}

// subReconciler is one stage of a claim's life. It updates the claim's
// status in memory; the controller writes it.
type subReconciler interface {
	Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error)
}

// SetupWithManager registers the controller; it also wakes on changes to
// the claim's Node.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.DefaultRegistrationTimeout == 0 {
		c.DefaultRegistrationTimeout = 15 * time.Minute
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&v1alpha1.NodeClaim{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if name := o.GetLabels()[v1alpha1.LabelNodeClaim]; name != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
			}
			return nil
		}), builder.WithPredicates(predicate.Funcs{
			// A thousand kubelets' heartbeats are no news to a claim.
			UpdateFunc: func(e event.UpdateEvent) bool { return clusterstate.NodeChanged(e.ObjectOld, e.ObjectNew) },
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: lifecycleWorkers}).
		Complete(c)
}

// lifecycleWorkers is how many claims are reconciled at once. A claim's
// termination is a handful of writes (cordon, the machine, the Node, the
// status, the finalizer) that each wait on the API server; after a
// scale-down to zero a budget of 20 % hands over two hundred claims of a
// thousand at once, and ten workers made termination, not the budget, the
// pace of scale-down (seven nodes a second).
const lifecycleWorkers = 50

// Reconcile dispatches to the normal or the deletion path.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	claim := &v1alpha1.NodeClaim{}
	if err := c.Kube.Get(ctx, req.NamespacedName, claim); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !claim.DeletionTimestamp.IsZero() {
		return requeueOnConflict(ctx)(c.reconcileDelete(ctx, claim))
	}
	return requeueOnConflict(ctx)(c.reconcileNormal(ctx, claim))
}

func (c *Controller) reconcileNormal(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// The finalizer goes on, and is persisted, before the first provider
	// call: a machine must never exist without a claim whose deletion will
	// remove it.
	if !controllerutil.ContainsFinalizer(claim, v1alpha1.TerminationFinalizer) {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(claim, v1alpha1.TerminationFinalizer)
		if err := c.Kube.Patch(ctx, claim, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if failed(claim) {
		return c.reconcileFailed(ctx, claim)
	}
	stored := claim.DeepCopy()
	ctx, after := withAfterStatus(ctx)
	stages := c.stagesFor(claim)
	var result reconcile.Result
	var errs []error
	for _, stage := range stages {
		stageResult, err := stage.Reconcile(ctx, claim)
		errs = append(errs, err)
		result = earliest(result, stageResult)
	}
	c.summarizeReady(claim)
	if err := c.writeStatus(ctx, stored, claim); err != nil {
		errs = append(errs, err)
	} else if err := after.run(ctx, c.Kube, c.Recorder, claim); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	return result, nil
}

// stagesFor names the stages of a claim's life that apply to it now: a
// launched claim asked to sleep only goes to sleep (sleep.go); any other
// is launched, woken if it slept (wake.go), registered and initialized.
func (c *Controller) stagesFor(claim *v1alpha1.NodeClaim) []subReconciler {
	if claim.SleepRequested() && meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched) {
		return []subReconciler{&sleep{c}}
	}
	return []subReconciler{
		&launch{c},
		&wake{c},
		&registration{c},
		&awake{c},
		&tokenRevocation{c},
		&initialization{c},
		&liveness{c},
	}
}

// summarizeReady sets Ready from Launched, Registered and Initialized: True
// when all are, else the reason and message of the first that is not.
func (c *Controller) summarizeReady(claim *v1alpha1.NodeClaim) {
	for _, conditionType := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized} {
		condition := meta.FindStatusCondition(claim.Status.Conditions, conditionType)
		if condition == nil {
			c.setCondition(claim, v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingReconciliation, conditionType+" has not been evaluated yet")
			return
		}
		if condition.Status != metav1.ConditionTrue {
			c.setCondition(claim, v1alpha1.ConditionReady, metav1.ConditionFalse, condition.Reason, condition.Message)
			return
		}
	}
	c.setCondition(claim, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady, "node "+claim.Status.NodeName+" is ready")
}

// statusWriteSettle bounds how long a status write waits for the cache to
// show it.
const statusWriteSettle = 2 * time.Second

// writeStatus writes the status fields this controller owns when they
// changed, by server-side apply under its own field manager and without a
// resourceVersion: a concurrent write of other fields (disruption's
// conditions, which are list entries keyed by type) neither conflicts with
// it nor is erased by it. It then waits, briefly, until the cache shows the
// write, so the claim's next reconcile never starts from a copy older than
// its own last write: an applied status omitting a condition this
// controller set before would remove it.
func (c *Controller) writeStatus(ctx context.Context, stored, claim *v1alpha1.NodeClaim) error {
	if equality.Semantic.DeepEqual(stored.Status, claim.Status) {
		return nil
	}
	owned := ownedStatus(claim)
	written, err := statusapply.Apply(ctx, c.Kube, "NodeClaim", claim.Name, &owned, Name)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	claim.ResourceVersion = written
	_ = c.Writes.Await(ctx, statusWriteSettle, func(ctx context.Context) (bool, error) {
		cached := &v1alpha1.NodeClaim{}
		if err := c.Kube.Get(ctx, client.ObjectKeyFromObject(claim), cached); err != nil {
			return apierrors.IsNotFound(err), nil
		}
		return cached.ResourceVersion == written || equality.Semantic.DeepEqual(ownedStatus(cached), owned), nil
	})
	return nil
}

// ownedStatus is the part of a claim's status the lifecycle applies: all of
// it but disruption's conditions.
func ownedStatus(claim *v1alpha1.NodeClaim) v1alpha1.NodeClaimStatus {
	owned := *claim.Status.DeepCopy()
	owned.Conditions = nil
	for _, condition := range claim.Status.Conditions {
		// Every status field and condition but disruption's is the
		// lifecycle's, so a field added to the status later is applied
		// without anyone having to remember a list.
		if !v1alpha1.IsDisruptionCondition(condition.Type) {
			owned.Conditions = append(owned.Conditions, condition)
		}
	}
	return owned
}

// setCondition sets a claim condition on the controller's clock.
func (c *Controller) setCondition(claim *v1alpha1.NodeClaim, conditionType string, status metav1.ConditionStatus, reason, message string) {
	claim.SetCondition(conditionType, status, reason, message, c.Clock.Now())
}

// nodeFor finds the claim's Node by the providerID of the machine the claim
// launched, and by nothing else: a Node that merely shares the claim's name
// (a hand-made claim named after an existing node) is not the claim's to
// adopt, drain or delete. Nodes must register with their machine's
// providerID (the kubelet's --provider-id, or a cloud controller manager).
func (c *Controller) nodeFor(ctx context.Context, claim *v1alpha1.NodeClaim) (*corev1.Node, error) {
	if claim.Status.ProviderID == "" {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := c.Kube.List(ctx, &nodes, client.MatchingFields{index.NodeProviderID: claim.Status.ProviderID}); err != nil {
		return nil, fmt.Errorf("listing nodes with providerID %s: %w", claim.Status.ProviderID, err)
	}
	if len(nodes.Items) > 0 {
		return &nodes.Items[0], nil
	}
	return c.nodeBySystemUUID(ctx, claim)
}

// nodeBySystemUUID finds the Node of a machine that registers without a
// providerID (a bare-metal server: no cloud controller sets one) by the
// system UUID its kubelet reports, and writes the claim's providerID onto
// it, which the API server allows once, from empty. Two such Nodes are
// both left alone: the UUID does not say which one is the machine.
func (c *Controller) nodeBySystemUUID(ctx context.Context, claim *v1alpha1.NodeClaim) (*corev1.Node, error) {
	uuid, ok := v1alpha1.SystemUUIDOf(claim.Status.ProviderID)
	if !ok {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := c.Kube.List(ctx, &nodes, client.MatchingFields{index.UnclaimedNodeSystemUUID: uuid}); err != nil {
		return nil, fmt.Errorf("listing nodes with system UUID %s: %w", uuid, err)
	}
	if len(nodes.Items) != 1 {
		if len(nodes.Items) > 1 {
			log.FromContext(ctx).Info("nodes without a providerID report the same system UUID; adopting neither", "systemUUID", uuid, "nodes", len(nodes.Items))
		}
		return nil, nil
	}
	node := &nodes.Items[0]
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.ProviderID = claim.Status.ProviderID
	if err := c.Kube.Patch(ctx, node, patch); err != nil {
		return nil, fmt.Errorf("writing providerID %s onto node %s (system UUID %s): %w", claim.Status.ProviderID, node.Name, uuid, err)
	}
	log.FromContext(ctx).Info("matched node by its system UUID", "node", node.Name, "providerID", claim.Status.ProviderID)
	return node, nil
}

// retryAfter returns the next wait of the claim's retry backoff, at least
// what the provider asked for.
func (c *Controller) retryAfter(claim *v1alpha1.NodeClaim, err error, maxInterval time.Duration) time.Duration {
	value, _ := c.retries.LoadOrStore(claim.UID, newRetryBackoff(c.Clock))
	retry := value.(*backoff.ExponentialBackOff)
	retry.MaxInterval = maxInterval
	wait := retry.NextBackOff()
	return max(wait, provider.RetryAfter(err))
}

func (c *Controller) forgetRetries(claim *v1alpha1.NodeClaim) { c.retries.Delete(claim.UID) }

func newRetryBackoff(clk clock.Clock) *backoff.ExponentialBackOff {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = time.Second
	retry.Multiplier = 2
	retry.RandomizationFactor = 0.1
	retry.MaxElapsedTime = 0 // a claim keeps trying until it is deleted
	retry.Clock = clk
	retry.Reset()
	return retry
}

func earliest(a, b reconcile.Result) reconcile.Result {
	switch {
	case a.RequeueAfter == 0:
		return b
	case b.RequeueAfter == 0:
		return a
	case b.RequeueAfter < a.RequeueAfter:
		return b
	}
	return a
}

func poolName(claim *v1alpha1.NodeClaim) string { return claim.Spec.NodePoolRef.Name }
