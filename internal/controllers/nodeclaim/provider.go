package nodeclaim

import (
	"context"
	"errors"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/pkg/provider"
)

// providerOf returns the provider that makes (or made) the claim's machine
// and records its NodeProvider in the claim's status, before the first
// call that could make a machine: from then on the machine is found and
// deleted through that NodeProvider, whatever becomes of the pool, and no
// label on the claim can point it elsewhere.
func (c *Controller) providerOf(ctx context.Context, claim *v1alpha1.NodeClaim) (provider.Provider, error) {
	name := claim.Status.NodeProviderName
	if name == "" {
		var err error
		if name, err = c.Providers.ProviderNameOf(ctx, claim); err != nil {
			return nil, err
		}
	}
	machines, err := c.Providers.ForProviderName(ctx, name)
	if err != nil {
		return nil, err
	}
	claim.Status.NodeProviderName = name
	return machines, nil
}

// unavailableReason names why a claim's provider could not be had.
func unavailableReason(err error) string {
	var poolGone *providerresolver.PoolNotFoundError
	var providerGone *providerresolver.ProviderNotFoundError
	switch {
	case errors.As(err, &poolGone):
		return v1alpha1.ReasonNodePoolNotFound
	case errors.As(err, &providerGone):
		return v1alpha1.ReasonNodeProviderNotFound
	}
	return v1alpha1.ReasonProviderUnavailable
}
