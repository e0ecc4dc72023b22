package providerresolver

import (
	"context"

	"github.com/claimscale/claimscale/pkg/provider"
)

var (
	_ provider.PowerManager    = (*safeProvider)(nil)
	_ provider.PowerCapability = (*safeProvider)(nil)
)

// CanManagePower asks the provider inside (provider.CanManagePower). It
// is not held back by the breaker: the answer is what the provider is,
// known without a call (or, for a plugin, remembered from its last
// Capabilities), and answering "cannot" while an API is down would turn a
// pool's sleeping machines into deleted ones.
func (p *safeProvider) CanManagePower(ctx context.Context) bool {
	return provider.CanManagePower(ctx, p.next)
}

// Suspend stops a machine through the provider inside, with its error
// redacted and seen by the breaker like every call's. A provider that
// cannot manage power answers NotSupported.
func (p *safeProvider) Suspend(ctx context.Context, providerID string) error {
	return p.power(ctx, providerID, "suspend", func(power provider.PowerManager) error {
		return power.Suspend(ctx, providerID)
	})
}

// Resume starts a stopped machine through the provider inside, as Suspend.
func (p *safeProvider) Resume(ctx context.Context, providerID string) error {
	return p.power(ctx, providerID, "resume", func(power provider.PowerManager) error {
		return power.Resume(ctx, providerID)
	})
}

func (p *safeProvider) power(ctx context.Context, providerID, verb string, call func(provider.PowerManager) error) error {
	power, ok := p.next.(provider.PowerManager)
	if !ok {
		return provider.NewNotSupported("cannot %s machine %s: the provider cannot manage power", verb, providerID)
	}
	if err := p.breaker.open(); err != nil {
		return err
	}
	return p.done(call(power))
}
