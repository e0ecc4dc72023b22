package disruption

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// createReplacement writes a claim for a new node the way provisioning
// writes one (labels, template hash, taints, the resources it was sized
// for), plus the names of the claims it replaces, and waits until the
// cache has it: the next round must see the replacement in flight, or it
// would release the claims it replaces.
func (c *Controller) createReplacement(ctx context.Context, pool *v1alpha1.NodePool, providerHash string, node scheduling.NewNode, olds string, reason v1alpha1.DisruptionReason) (*v1alpha1.NodeClaim, error) {
	claim := poolclaims.New(pool, node.Shape, node.TotalRequests(), node.Requirements)
	claim.Annotations[AnnotationReplaces] = olds
	claim.Annotations[AnnotationDisruptionReason] = string(reason)
	if providerHash != "" {
		claim.Annotations[AnnotationProviderHash] = providerHash
	}
	if err := c.Kube.Create(ctx, claim); err != nil {
		return nil, fmt.Errorf("creating a replacement for %s in pool %s (shape %s): %w", olds, pool.Name, node.Shape.Name, err)
	}
	metrics.NodeClaimsCreated.WithLabelValues(pool.Name, metrics.ReasonReplacement).Inc()
	c.Writes.Created(claim)
	err := c.Writes.Await(ctx, cacheWait, func(ctx context.Context) (bool, error) {
		var cached v1alpha1.NodeClaim
		err := c.Kube.Get(ctx, client.ObjectKeyFromObject(claim), &cached)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the cache to see replacement %s: %w", claim.Name, err)
	}
	return claim, nil
}

func incDecision(reason v1alpha1.DisruptionReason, action string, nodes int) {
	metrics.DisruptionDecisions.WithLabelValues(string(reason), action).Add(float64(nodes))
}

// setMetrics publishes, per pool, the nodes eligible for each reason, the
// nodes kept by each safety rule and budget, and what the budgets allow
// now.
func (c *Controller) setMetrics(s *state, r *round, budgets *ledger, total map[string]int) {
	blocked := r.blockedNodes()
	for name := range s.pools {
		metrics.ObserveDisruptionBlocked(name, blocked[name])
		for _, reason := range []v1alpha1.DisruptionReason{
			v1alpha1.DisruptionReasonEmpty, v1alpha1.DisruptionReasonUnderutilized, v1alpha1.DisruptionReasonDrifted, reasonExpired,
		} {
			metrics.DisruptionEligibleNodes.WithLabelValues(name, string(reason)).Set(float64(r.eligible[name][reason]))
		}
		for _, reason := range budgetReasons {
			metrics.DisruptionAllowedDisruptions.WithLabelValues(name, string(reason)).Set(float64(min(budgets.allowedNow(name, reason), total[name])))
		}
		c.metricPools[name] = true
	}
	for name := range c.metricPools {
		if _, ok := s.pools[name]; !ok {
			metrics.DisruptionEligibleNodes.DeletePartialMatch(prometheus.Labels{"nodepool": name})
			metrics.DisruptionAllowedDisruptions.DeletePartialMatch(prometheus.Labels{"nodepool": name})
			metrics.DisruptionBlockedNodes.DeletePartialMatch(prometheus.Labels{"nodepool": name})
			delete(c.metricPools, name)
		}
	}
}
