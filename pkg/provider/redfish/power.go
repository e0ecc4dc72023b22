package redfish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stmcginnis/gofish/schemas"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Delete powers the server off and returns it to the off pool. A server
// that has no lease of ours is gone as far as claimscale goes; one that
// does is powered off and its lease released.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	l, err := p.leaseOf(ctx, providerID)
	if provider.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s := p.server(l.Server)
	if s == nil {
		return p.release(ctx, l)
	}
	if err := p.powerOff(ctx, s, l); err != nil {
		return fmt.Errorf("powering off server %s of claim %s: %w", l.Server, l.Claim, err)
	}
	if err := p.ejectMedia(ctx, s); err != nil {
		logf.FromContext(ctx).Info("could not eject the virtual media", "server", s.spec.Name, "error", err.Error())
	}
	logf.FromContext(ctx).Info("powered off server", "server", s.spec.Name, "nodeclaim", l.Claim)
	return p.release(ctx, l)
}

// release gives a server that is off back to the off pool: its seed
// first, so that no claim's user data outlives its lease.
func (p *Provider) release(ctx context.Context, l *lease) error {
	if err := p.seeds.remove(ctx, l.Server); err != nil {
		return err
	}
	return p.ledger.release(ctx, l)
}

// powerOff shuts the server down cleanly when it allows GracefulShutdown,
// gives it shutdownTimeout, then forces it off, and returns once the BMC
// says Off. A transition running (PoweringOn right after a create, a 409)
// is waited out, not fought.
func (p *Provider) powerOff(ctx context.Context, s *server, l *lease) error {
	log := logf.FromContext(ctx).WithValues("server", s.spec.Name)
	gracefulUntil := p.clock.Now().Add(p.settings.shutdownTimeout)
	var forcedUntil time.Time
	var sent schemas.ResetType
	forced := false
	ticker := p.clock.NewTicker(p.cfg.PollInterval)
	defer ticker.Stop()
	for {
		var off bool
		err := s.bmc.do(ctx, func(_ context.Context, system *schemas.ComputerSystem) error {
			seen := observationOf(system, p.clock.Now())
			if seen.uuid != l.UUID {
				return provider.NewTerminal(fmt.Errorf("server %s now answers with system UUID %s, not %s of our lease: refusing to power it off", l.Server, seen.uuid, l.UUID))
			}
			switch seen.power {
			case schemas.OffPowerState:
				off = true
				return nil
			case schemas.PoweringOnPowerState, schemas.PoweringOffPowerState:
				return nil
			}
			want := pickReset(seen.resetTypes, schemas.GracefulShutdownResetType, schemas.ForceOffResetType)
			if forced {
				want = schemas.ForceOffResetType
			}
			if sent == want {
				return nil // asked already; the server is taking its time
			}
			if _, err := system.Reset(want); err != nil {
				return s.bmc.classify(err, "powering off")
			}
			sent = want
			if want == schemas.ForceOffResetType {
				forcedUntil = p.clock.Now().Add(p.cfg.CallTimeout)
			}
			return nil
		})
		switch {
		case off:
			return nil
		case err != nil && !errors.Is(err, errTransition):
			return err
		}
		now := p.clock.Now()
		if !forced && !now.Before(gracefulUntil) {
			log.Info("server did not shut down cleanly; forcing it off", "shutdownTimeout", p.settings.shutdownTimeout)
			forced = true
		}
		if sent == schemas.ForceOffResetType && !now.Before(forcedUntil) {
			return provider.NewRetryable(fmt.Errorf("server %s is not off %s after ForceOff", s.spec.Name, p.cfg.CallTimeout), p.cfg.PollInterval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C():
		}
	}
}

// ejectMedia ejects what this provider inserted: the boot image and the
// claim's seed; any other image is someone else's.
func (p *Provider) ejectMedia(ctx context.Context, s *server) error {
	if s.boot == nil || (s.boot.Source != v1alpha1.RedfishBootCd && s.boot.UserData != v1alpha1.RedfishUserDataVirtualMedia) {
		return nil
	}
	return s.bmc.do(ctx, func(_ context.Context, system *schemas.ComputerSystem) error {
		media, err := system.VirtualMedia()
		if err != nil {
			return s.bmc.classify(err, "reading the virtual media")
		}
		for _, device := range media {
			if device.Inserted == nil || !*device.Inserted || (device.Image != s.boot.Image && !p.seeds.ours(device.Image)) {
				continue
			}
			if _, err := device.EjectMedia(); err != nil {
				return s.bmc.classify(err, "ejecting the virtual media "+device.ID)
			}
		}
		return nil
	})
}

// Suspend powers the server off and keeps it leased: the claim's machine
// sleeps and wakes on the same server.
func (p *Provider) Suspend(ctx context.Context, providerID string) error {
	l, err := p.leaseOf(ctx, providerID)
	if err != nil {
		return err
	}
	s := p.server(l.Server)
	if s == nil {
		return provider.NewNotFound("server %s is no longer in NodeProvider %s", l.Server, p.nodeProvider)
	}
	if !l.Asleep {
		l.Asleep = true
		if err := p.ledger.update(ctx, l); err != nil {
			return err
		}
	}
	if err := p.powerOff(ctx, s, l); err != nil {
		return fmt.Errorf("powering off server %s to sleep: %w", l.Server, err)
	}
	return nil
}

// Resume powers a sleeping server on again, within the cap.
func (p *Provider) Resume(ctx context.Context, providerID string) error {
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return err
	}
	l, err := p.leaseIn(leases, providerID)
	if err != nil {
		return err
	}
	if l.Asleep && p.capped(leases) {
		return provider.NewInsufficientCapacity(p.atCap())
	}
	_, err = p.powerOnLeased(ctx, l, false, nil)
	return err
}
