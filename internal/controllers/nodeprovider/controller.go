// Package nodeprovider reports whether each NodeProvider can be used: its
// settings parse, its credentials Secret is there and its API answers in
// time (condition Ready; reason Unreachable when it does not answer).
package nodeprovider

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/retry"
	"github.com/claimscale/claimscale/internal/statusapply"
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
	// Recorder tells, on the NodeProvider, when it stops being Ready.
	Recorder events.EventRecorder

	failures retry.Backoff
}

// SetupWithManager registers the controller.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(Name).For(&v1alpha1.NodeProvider{}).Complete(c)
}

// probeTimeout bounds building the provider and asking it for its
// machines: an API that accepts connections and never answers is
// Unreachable after this long.
const probeTimeout = 10 * time.Second

// Reconcile writes one NodeProvider's Ready condition: its settings and
// credentials build a provider, and its API answers a list of our machines.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nodeProvider := &v1alpha1.NodeProvider{}
	if err := c.Kube.Get(ctx, req.NamespacedName, nodeProvider); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := nodeProvider.DeepCopy()
	condition := metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady,
		Message: "settings and credentials read, API answers", ObservedGeneration: nodeProvider.Generation,
	}
	reason, err := c.probe(ctx, nodeProvider)
	if err != nil {
		condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, reason, err.Error()
	}
	was := meta.FindStatusCondition(stored.Status.Conditions, v1alpha1.ConditionReady)
	meta.SetStatusCondition(&nodeProvider.Status.Conditions, condition)
	degraded := c.degraded(ctx, nodeProvider)
	wasDegraded := meta.FindStatusCondition(stored.Status.Conditions, v1alpha1.ConditionDegraded)
	meta.SetStatusCondition(&nodeProvider.Status.Conditions, degraded)
	if !equality.Semantic.DeepEqual(stored.Status, nodeProvider.Status) {
		// Server-side apply of the two conditions this controller owns,
		// under its own field manager, as every status writer does.
		owned := v1alpha1.NodeProviderStatus{Conditions: []metav1.Condition{
			*meta.FindStatusCondition(nodeProvider.Status.Conditions, v1alpha1.ConditionReady),
			*meta.FindStatusCondition(nodeProvider.Status.Conditions, v1alpha1.ConditionDegraded),
		}}
		if _, err := statusapply.Apply(ctx, c.Kube, "NodeProvider", nodeProvider.Name, &owned, Name); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if c.Recorder != nil && condition.Status != metav1.ConditionTrue && (was == nil || was.Reason != condition.Reason) {
			c.Recorder.Eventf(nodeProvider, nil, corev1.EventTypeWarning, condition.Reason, "Check", "%s", condition.Message)
		}
		if c.Recorder != nil && degraded.Status == metav1.ConditionTrue && (wasDegraded == nil || wasDegraded.Message != degraded.Message) {
			c.Recorder.Eventf(nodeProvider, nil, corev1.EventTypeWarning, degraded.Reason, "Check", "%s", degraded.Message)
		}
	}
	if condition.Status != metav1.ConditionTrue {
		return reconcile.Result{RequeueAfter: min(c.failures.Failed(nodeProvider.Name, nodeProvider.Generation, nil), recheck)}, nil
	}
	c.failures.Succeeded(nodeProvider.Name)
	return reconcile.Result{RequeueAfter: recheck}, nil
}

// probe builds the provider and lists its machines, and says what is
// wrong when either fails.
func (c *Controller) probe(ctx context.Context, nodeProvider *v1alpha1.NodeProvider) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	machines, err := c.Providers.For(ctx, nodeProvider)
	switch {
	case providerresolver.IsUnreachable(err):
		return v1alpha1.ReasonUnreachable, err
	case err != nil:
		return v1alpha1.ReasonInvalidConfiguration, err
	}
	if _, err := machines.List(ctx); err != nil {
		err = fmt.Errorf("listing machines: %w", err)
		if providerresolver.IsUnreachable(err) {
			return v1alpha1.ReasonUnreachable, err
		}
		return v1alpha1.ReasonAPIError, err
	}
	return "", nil
}

// ReasonNoProblems is the Degraded=False reason.
const ReasonNoProblems = "NoProblems"

// degraded is the Degraded condition: True, with the problems the provider
// reports (a leftover VM locked mid-clone, a tag policy that refuses our
// tags, the last Create its API refused), when it reports any.
func (c *Controller) degraded(ctx context.Context, nodeProvider *v1alpha1.NodeProvider) metav1.Condition {
	condition := metav1.Condition{
		Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonNoProblems,
		Message: "the provider reports no problems", ObservedGeneration: nodeProvider.Generation,
	}
	machines, err := c.Providers.For(ctx, nodeProvider)
	if err != nil {
		return condition
	}
	reporter, ok := machines.(provider.ProblemReporter)
	if !ok {
		return condition
	}
	problems := reporter.Problems()
	if len(problems) == 0 {
		return condition
	}
	messages := make([]string, 0, len(problems))
	for _, problem := range problems {
		messages = append(messages, problem.Message)
	}
	condition.Status, condition.Reason = metav1.ConditionTrue, problems[0].Reason
	condition.Message = strings.Join(messages, "; ")
	if len(condition.Message) > maxMessage {
		condition.Message = condition.Message[:maxMessage-3] + "..."
	}
	return condition
}

// maxMessage keeps a condition message within the API's 32768 bytes.
const maxMessage = 4096
