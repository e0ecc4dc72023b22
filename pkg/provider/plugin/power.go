package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
)

// powerRecheck is how long the client keeps what a plugin said about
// managing power before it asks again: a plugin may be upgraded in place.
const powerRecheck = time.Minute

// powerSupport is what the plugin last said about managing power.
type powerSupport struct {
	mu        sync.Mutex
	known     bool
	can       bool
	checkedAt time.Time
}

func (p *powerSupport) remember(can bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known, p.can, p.checkedAt = true, can, time.Now()
}

func (p *powerSupport) recent() (can, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.can, p.known && time.Since(p.checkedAt) < powerRecheck
}

func (p *powerSupport) last() (can, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.can, p.known
}

// CanManagePower reports whether the plugin serves Suspend and Resume: its
// Capabilities say power in this protocol version. A plugin without the
// flag, or without Capabilities at all, cannot. While the plugin cannot be
// asked, the last answer stands (none yet: cannot), so an outage does not
// turn a pool's sleeping into deleting once it was known to work.
func (c *Client) CanManagePower(ctx context.Context) bool {
	can, err := c.powerSupported(ctx)
	return err == nil && can
}

// powerSupported asks the plugin's Capabilities whether it manages power,
// at most once per powerRecheck; an error only when it could not be asked
// and nothing is known.
func (c *Client) powerSupported(ctx context.Context) (bool, error) {
	if can, ok := c.power.recent(); ok {
		return can, nil
	}
	var unimplemented bool
	capabilities, err := call(ctx, c, "asking the plugin whether it can manage power", func(ctx context.Context) (*pluginpb.CapabilitiesResponse, error) {
		answer, err := c.rpc.Capabilities(ctx, &pluginpb.CapabilitiesRequest{})
		unimplemented = status.Code(err) == codes.Unimplemented
		return answer, err
	})
	switch {
	case unimplemented:
		c.power.remember(false)
		return false, nil
	case err != nil:
		if can, known := c.power.last(); known {
			return can, nil
		}
		return false, err
	}
	can := capabilities.GetPower() && capabilities.GetProtocolVersion() == ProtocolVersion
	c.power.remember(can)
	return can, nil
}

// Suspend asks the plugin to stop a machine. A plugin that cannot manage
// power (no power in its Capabilities, or UNIMPLEMENTED) is NotSupported,
// and is not asked.
func (c *Client) Suspend(ctx context.Context, providerID string) error {
	return c.powerCall(ctx, "suspending machine "+providerID, func(ctx context.Context) error {
		_, err := c.rpc.Suspend(ctx, &pluginpb.SuspendRequest{Cluster: c.cluster, ProviderId: providerID})
		return err
	})
}

// Resume asks the plugin to start a stopped machine; NotSupported as for
// Suspend.
func (c *Client) Resume(ctx context.Context, providerID string) error {
	return c.powerCall(ctx, "resuming machine "+providerID, func(ctx context.Context) error {
		_, err := c.rpc.Resume(ctx, &pluginpb.ResumeRequest{Cluster: c.cluster, ProviderId: providerID})
		return err
	})
}

func (c *Client) powerCall(ctx context.Context, what string, do func(ctx context.Context) error) error {
	can, err := c.powerSupported(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !can {
		return provider.NewNotSupported("%s: the plugin at %s does not say power in its Capabilities: it cannot manage power", what, c.endpoint)
	}
	_, err = callWith(ctx, c, what, powerErrorOf, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, do(ctx)
	})
	if provider.IsNotSupported(err) {
		// Its Capabilities said otherwise: believe the call.
		c.power.remember(false)
	}
	return err
}
