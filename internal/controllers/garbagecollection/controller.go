// Package garbagecollection removes what a crash or a person left behind:
// machines tagged for this cluster that no claim owns (after a grace
// period), running or sleeping; claims whose machine is gone while their
// node is not Ready (a sleeping machine's claim has no node); and
// claimscale's bootstrap tokens that expired or lost their claim.
// It lists each provider's machines once per pass, never per claim.
package garbagecollection

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/statusapply"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Name of the controller in logs and events.
const Name = "garbagecollection"

// ProviderLister returns every NodeProvider's provider.
type ProviderLister interface {
	All(ctx context.Context) (map[string]provider.Provider, map[string]error, error)
}

// Controller runs garbage collection passes on an interval.
type Controller struct {
	// Kube is the cached client; APIReader reads claims uncached before a
	// machine is deleted, so a claim the cache has not seen yet is safe.
	Kube      client.Client
	APIReader client.Reader
	Providers ProviderLister
	Recorder  events.EventRecorder
	Clock     clock.WithTicker
	// Interval between passes (default 30s).
	Interval time.Duration
	// GracePeriod a machine without a claim is left alone (default 2m):
	// Create runs after the claim is written, so a young machine's claim
	// may just not be visible yet.
	GracePeriod time.Duration
	// Tokens deletes claimscale's bootstrap tokens that expired or whose
	// claim is gone; nil skips that.
	Tokens TokenCollector
}

// TokenCollector deletes claimscale's bootstrap tokens (only those, by
// label) that expired or whose claim live says is gone.
type TokenCollector interface {
	Collect(ctx context.Context, live func(claimName string) bool) (int, error)
}

// NeedLeaderElection: only the leader deletes machines.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs passes until the context ends.
func (c *Controller) Start(ctx context.Context) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = 2 * time.Minute
	}
	logger := log.FromContext(ctx).WithName(Name)
	ctx = log.IntoContext(ctx, logger)
	ticker := c.Clock.NewTicker(c.Interval)
	defer ticker.Stop()
	for {
		if err := c.Pass(ctx); err != nil {
			logger.Error(err, "garbage collection pass failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// providerCallTimeout bounds each provider call of a pass, so a provider
// whose API hangs delays the pass, not stops it.
const providerCallTimeout = 30 * time.Second

// Pass runs one garbage collection pass.
func (c *Controller) Pass(ctx context.Context) error {
	providers, failed, err := c.Providers.All(ctx)
	if err != nil {
		return err
	}
	// Claims are only read here: the cache's own objects, not copies. One
	// that looks orphaned is read again from the API server before it goes.
	var claims v1alpha1.NodeClaimList
	if err := c.Kube.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	claimsByName := map[string]*v1alpha1.NodeClaim{}
	for i := range claims.Items {
		claimsByName[claims.Items[i].Name] = &claims.Items[i]
	}
	machineIDs := map[string]bool{}
	listed := map[string]bool{}
	for providerName, machines := range providers {
		listCtx, cancel := context.WithTimeout(ctx, providerCallTimeout)
		instances, err := machines.List(listCtx)
		cancel()
		if err != nil {
			log.FromContext(ctx).Error(err, "listing machines", "nodeProvider", providerName)
			continue
		}
		listed[providerName] = true
		for _, instance := range instances {
			machineIDs[instance.ProviderID] = true
			if err := c.collectMachine(ctx, machines, instance, claimsByName); err != nil {
				log.FromContext(ctx).Error(err, "collecting machine", "providerID", instance.ProviderID)
			}
		}
	}
	if err := c.collectTokens(ctx, claimsByName); err != nil {
		log.FromContext(ctx).Error(err, "collecting bootstrap tokens")
	}
	// Claims can only be judged when every provider answered: a machine is
	// never "gone" just because its provider could not be asked.
	if len(failed) > 0 {
		return nil
	}
	for i := range claims.Items {
		// Nor when its own provider built but did not answer List (a
		// plugin that is down): its machines could not be seen.
		if name := claims.Items[i].Status.NodeProviderName; name != "" && !listed[name] {
			continue
		}
		if err := c.collectClaim(ctx, &claims.Items[i], machineIDs); apierrors.IsConflict(err) {
			// The next pass sees the newer claim.
			log.FromContext(ctx).V(1).Info("collecting claim conflicted, retrying next pass", "nodeClaim", claims.Items[i].Name, "error", err.Error())
		} else if err != nil {
			log.FromContext(ctx).Error(err, "collecting claim", "nodeClaim", claims.Items[i].Name)
		}
	}
	return nil
}

// collectMachine deletes a machine whose claim is gone, whatever its state:
// a sleeping machine (State Suspended) is ours like a running one, and
// costs its disk until it goes. A machine without our cluster and claim
// tags is never touched, even should a provider list it.
func (c *Controller) collectMachine(ctx context.Context, machines provider.Provider, instance *provider.Instance, claims map[string]*v1alpha1.NodeClaim) error {
	if instance.Tags[v1alpha1.TagCluster] == "" || instance.ClaimName() == "" {
		return nil
	}
	if _, ok := claims[instance.ClaimName()]; ok {
		return nil
	}
	if !instance.CreatedAt.IsZero() && c.Clock.Since(instance.CreatedAt) < c.GracePeriod {
		return nil
	}
	// The cache may lag; ask the API server before deleting anything.
	var claim v1alpha1.NodeClaim
	err := c.APIReader.Get(ctx, client.ObjectKey{Name: instance.ClaimName()}, &claim)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("checking claim %s: %w", instance.ClaimName(), err)
	}
	log.FromContext(ctx).Info("deleting machine without a claim", "providerID", instance.ProviderID, "claim", instance.ClaimName(), "state", instance.State)
	if err := machines.Delete(ctx, instance.ProviderID); err != nil && !provider.IsNotFound(err) {
		return fmt.Errorf("deleting machine %s without a claim: %w", instance.ProviderID, err)
	}
	metrics.NodeClaimsTerminated.WithLabelValues(instance.Tags[v1alpha1.TagNodePool], metrics.ReasonGarbageCollectedMachine).Inc()
	return nil
}

func (c *Controller) collectClaim(ctx context.Context, cached *v1alpha1.NodeClaim, machineIDs map[string]bool) error {
	if !orphanCandidate(cached, machineIDs) {
		return nil
	}
	// The cache may lag behind a claim that gave up: its Failed condition
	// is written before its machine is deleted, so only the API server's
	// copy, read after the machines were listed, tells a kept Failed claim
	// from an orphan.
	claim := &v1alpha1.NodeClaim{}
	err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), claim)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading claim %s from the API server: %w", cached.Name, err)
	}
	if claim.UID != cached.UID || claim.Status.ProviderID != cached.Status.ProviderID || !orphanCandidate(claim, machineIDs) {
		return nil
	}
	if claim.Status.NodeName != "" {
		var node corev1.Node
		err := c.Kube.Get(ctx, client.ObjectKey{Name: claim.Status.NodeName}, &node)
		if err == nil && nodeReady(&node) {
			return nil // a Ready node means the machine lives, whatever List said
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting node %s of claim %s: %w", claim.Status.NodeName, claim.Name, err)
		}
	}
	// Only the copy judged above is marked and deleted: a claim written
	// since (Failed after all) conflicts, and the next pass judges it
	// again. The mark tells termination why the claim goes, which counts
	// it once.
	message := fmt.Sprintf("machine %s no longer exists and the node is not Ready; deleting the claim", claim.Status.ProviderID)
	if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionSuspended) {
		// A sleeping machine has no node: its claim is all that is left.
		message = fmt.Sprintf("machine %s slept and no longer exists; deleting the claim", claim.Status.ProviderID)
	}
	claim.SetCondition(v1alpha1.ConditionDisrupting, metav1.ConditionTrue, metrics.ReasonMachineGone, message, c.Clock.Now())
	// The Disrupting condition alone is garbage collection's, applied
	// over the claim as judged (statusapply.ApplyUnchanged).
	owned := statusapply.Conditions{Conditions: []metav1.Condition{*meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)}}
	if err := statusapply.ApplyUnchanged(ctx, c.Kube, "NodeClaim", claim, &owned, Name); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("marking claim %s whose machine is gone: %w", claim.Name, err)
	}
	uid, resourceVersion := claim.UID, claim.ResourceVersion
	err = c.Kube.Delete(ctx, claim, client.Preconditions{UID: &uid, ResourceVersion: &resourceVersion})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting claim %s whose machine is gone: %w", claim.Name, err)
	}
	log.FromContext(ctx).Info(message, "nodeClaim", claim.Name)
	c.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, "MachineGone", "GarbageCollect", message)
	return nil
}

// orphanCandidate says whether a claim looks orphaned: launched, its
// machine not listed, and neither deleted nor Failed. A failed claim's
// machine was deleted on purpose; the claim waits for whoever decides
// (cluster-autoscaler) to delete it.
func orphanCandidate(claim *v1alpha1.NodeClaim, machineIDs map[string]bool) bool {
	return claim.DeletionTimestamp.IsZero() && claim.Status.ProviderID != "" && !machineIDs[claim.Status.ProviderID] &&
		meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched) &&
		!meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionFailed)
}

// collectTokens deletes expired and orphaned bootstrap tokens. A claim the
// cache does not know is looked up before its token goes, as for machines.
func (c *Controller) collectTokens(ctx context.Context, claims map[string]*v1alpha1.NodeClaim) error {
	if c.Tokens == nil {
		return nil
	}
	var lookupErr error
	deleted, err := c.Tokens.Collect(ctx, func(name string) bool {
		if _, ok := claims[name]; ok {
			return true
		}
		var claim v1alpha1.NodeClaim
		err := c.APIReader.Get(ctx, client.ObjectKey{Name: name}, &claim)
		if err != nil && !apierrors.IsNotFound(err) {
			lookupErr = err
			return true // keep it until the claim can be asked about
		}
		return err == nil
	})
	if deleted > 0 {
		log.FromContext(ctx).Info("deleted expired or orphaned bootstrap tokens", "count", deleted)
	}
	if err != nil {
		return err
	}
	return lookupErr
}

func nodeReady(node *corev1.Node) bool {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}
