package fake

import (
	"context"
	"fmt"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

var (
	_ provider.PowerManager    = (*Provider)(nil)
	_ provider.PowerCapability = (*Provider)(nil)
)

// DisablePower makes the providers of this infrastructure unable to
// manage power, as a plugin whose server lacks the power calls:
// CanManagePower is false and Suspend and Resume answer NotSupported
// (recorded like any call). EnablePower undoes it.
func (in *Infrastructure) DisablePower() { in.setPowerless(true) }

// EnablePower ends DisablePower.
func (in *Infrastructure) EnablePower() { in.setPowerless(false) }

func (in *Infrastructure) setPowerless(powerless bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.powerless = powerless
}

// CanManagePower reports whether the infrastructure manages power (true
// unless DisablePower).
func (p *Provider) CanManagePower(context.Context) bool {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	return !in.powerless
}

// Suspend stops a machine of this cluster: its state becomes Suspended,
// with its tags and providerID kept. One already stopped is success.
func (p *Provider) Suspend(_ context.Context, providerID string) error {
	return p.power(Suspend, providerID, provider.InstanceSuspended)
}

// Resume starts a stopped machine of this cluster: its state becomes
// Running. One running is success.
func (p *Provider) Resume(_ context.Context, providerID string) error {
	return p.power(Resume, providerID, provider.InstanceRunning)
}

func (p *Provider) power(method Method, providerID string, state provider.InstanceState) error {
	in := p.Infrastructure
	in.mu.Lock()
	defer in.mu.Unlock()
	call := Call{Method: method, Cluster: p.ClusterName, ProviderID: providerID}
	if in.powerless {
		return in.record(call, provider.NewNotSupported("%s of machine %s: this provider cannot manage power", method, providerID))
	}
	if err := in.injected(method); err != nil {
		return in.record(call, err)
	}
	machine, ok := in.machines[providerID]
	switch {
	case !ok:
		return in.record(call, provider.NewNotFound("machine %s", providerID))
	case machine.Tags[v1alpha1.TagCluster] != p.ClusterName:
		return in.record(call, provider.NewTerminal(fmt.Errorf("machine %s is not tagged %s=%s: refusing %s", providerID, v1alpha1.TagCluster, p.ClusterName, method)))
	}
	machine.State = state
	return in.record(call, nil)
}
