package nodeclaim

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Bootstrapper renders a claim's user data with a join token of its own,
// and deletes that token.
type Bootstrapper interface {
	Prepare(ctx context.Context, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim, expiresAt time.Time) (*bootstrap.Prepared, error)
	Revoke(ctx context.Context, claimName string) error
}

// createOptions prepares what the provider delivers to the claim's machine:
// the pool's rendered user data, carrying the claim's token, which expires
// when the registration timeout does (counted, as liveness counts it, from
// the claim's creation). A claim whose pool has no bootstrap section, or is
// gone, gets none.
func (l *launch) createOptions(ctx context.Context, claim *v1alpha1.NodeClaim) (provider.CreateOptions, error) {
	if l.Bootstrap == nil {
		return provider.CreateOptions{}, nil
	}
	var pool v1alpha1.NodePool
	if err := l.Kube.Get(ctx, client.ObjectKey{Name: poolName(claim)}, &pool); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return provider.CreateOptions{}, nil
		}
		return provider.CreateOptions{}, fmt.Errorf("getting pool %s: %w", poolName(claim), err)
	}
	if pool.Spec.Template.Bootstrap == nil {
		return provider.CreateOptions{}, nil
	}
	timeout := l.DefaultRegistrationTimeout
	if pool.Spec.RegistrationTimeout != nil && pool.Spec.RegistrationTimeout.Duration > 0 {
		timeout = pool.Spec.RegistrationTimeout.Duration
	}
	expiresAt := claim.CreationTimestamp.Add(timeout)
	if !l.Clock.Now().Before(expiresAt) {
		return provider.CreateOptions{}, fmt.Errorf("the registration timeout of %s has passed: no join token is made for a claim about to time out", timeout)
	}
	prepared, err := l.Bootstrap.Prepare(ctx, &pool, claim, expiresAt)
	if err != nil {
		return provider.CreateOptions{}, fmt.Errorf("preparing the bootstrap user data: %w", err)
	}
	if prepared == nil {
		return provider.CreateOptions{}, nil
	}
	if prepared.Token != nil {
		claim.Status.BootstrapToken = &v1alpha1.BootstrapTokenStatus{ID: prepared.Token.ID, ExpiresAt: metav1.NewTime(prepared.Token.ExpiresAt)}
	}
	return provider.CreateOptions{UserData: prepared.UserData}, nil
}

// tokenRevocation deletes a claim's bootstrap token once its Node has
// registered: from then on the kubelet authenticates with its own
// certificate, and a leaked token is worth nothing.
type tokenRevocation struct{ *Controller }

func (r *tokenRevocation) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, r.revokeBootstrapToken(ctx, claim)
}

// revokeBootstrapToken deletes the claim's token, once.
func (c *Controller) revokeBootstrapToken(ctx context.Context, claim *v1alpha1.NodeClaim) error {
	token := claim.Status.BootstrapToken
	if c.Bootstrap == nil || token == nil || token.RevokedAt != nil {
		return nil
	}
	if err := c.Bootstrap.Revoke(ctx, claim.Name); err != nil {
		return fmt.Errorf("revoking the bootstrap token of claim %s: %w", claim.Name, err)
	}
	now := metav1.NewTime(c.Clock.Now())
	token.RevokedAt = &now
	return nil
}
