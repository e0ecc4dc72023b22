package redfish

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/stmcginnis/gofish/schemas"
	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Create powers on a free server of the claim's shape for it: the lease
// first (so a server we power on is always ours to power off), then the
// one-time boot, then the power-on. Called again for the same claim, it
// answers the server it leased.
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, _ provider.CreateOptions) (*provider.Instance, error) {
	// Two calls for one claim would lease two servers: the second must
	// see the first's lease.
	unlock := p.lockClaim(claim.Name)
	defer unlock()
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range leases {
		if l.Cluster == p.cluster && l.Claim == claim.Name {
			return p.powerOnLeased(ctx, l, false)
		}
	}
	if p.capped(leases) {
		return nil, provider.NewInsufficientCapacity(p.atCap())
	}
	if wait := p.stagger(leases); wait > 0 {
		return nil, provider.NewRetryable(fmt.Errorf("NodeProvider %s powered on %d servers in the last minute, its powerOnsPerMinute", p.nodeProvider, p.settings.powerOnsPerMinute), wait)
	}
	shape := provider.Shape{Name: claim.Spec.Shape.Name, Capacity: corev1.ResourceList{
		corev1.ResourceCPU: claim.Spec.Shape.CPU, corev1.ResourceMemory: claim.Spec.Shape.Memory,
	}}
	for _, s := range p.candidates(ctx, shape, leases, true) {
		seen := s.observation()
		taken := &lease{Cluster: p.cluster, Server: s.spec.Name, UUID: seen.uuid, Claim: claim.Name, Pool: claim.Spec.NodePoolRef.Name, PoweredOnAt: p.clock.Now()}
		if err := p.ledger.take(ctx, taken); err != nil {
			if errors.Is(err, errLeased) {
				continue
			}
			return nil, err
		}
		logf.FromContext(ctx).Info("leased server", "server", s.spec.Name, "nodeclaim", claim.Name)
		return p.powerOnLeased(ctx, taken, true)
	}
	return nil, provider.NewInsufficientCapacity(fmt.Errorf("no server of shape %s of NodeProvider %s is off and free", shape.Name, p.nodeProvider))
}

func (p *Provider) lockClaim(name string) (unlock func()) {
	lock, _ := p.claimLocks.LoadOrStore(name, &sync.Mutex{})
	mu := lock.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// stagger is how long until another power-on keeps within
// powerOnsPerMinute.
func (p *Provider) stagger(leases map[string]*lease) time.Duration {
	if p.settings.powerOnsPerMinute == 0 {
		return 0
	}
	now := p.clock.Now()
	var recent []time.Time
	for _, l := range leases {
		if now.Sub(l.PoweredOnAt) < time.Minute {
			recent = append(recent, l.PoweredOnAt)
		}
	}
	if len(recent) < p.settings.powerOnsPerMinute {
		return 0
	}
	sort.Slice(recent, func(i, j int) bool { return recent[i].Before(recent[j]) })
	return recent[len(recent)-p.settings.powerOnsPerMinute].Add(time.Minute).Sub(now)
}

func (s *server) observation() *observation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observed
}

// powerOnLeased powers the leased server on (the boot override first),
// unless it is on already. When the BMC refuses outright the power-on of a
// lease this call took (justTaken), the lease goes back: the server is
// off and was never ours. Any other lease stays, whatever the BMC says:
// a server we powered on earlier may be on, and must stay ours to power
// off; and a call whose outcome is unknown (a timeout) keeps it too, so
// the next call finds the server either way.
func (p *Provider) powerOnLeased(ctx context.Context, l *lease, justTaken bool) (*provider.Instance, error) {
	s := p.server(l.Server)
	if s == nil {
		return nil, provider.NewTerminal(fmt.Errorf("server %s of the lease for claim %s is no longer in NodeProvider %s", l.Server, l.Claim, p.nodeProvider))
	}
	var state provider.InstanceState
	err := s.bmc.do(ctx, func(_ context.Context, system *schemas.ComputerSystem) error {
		seen := observationOf(system, p.clock.Now())
		if seen.uuid != l.UUID {
			return provider.NewTerminal(fmt.Errorf("server %s now answers with system UUID %s, not %s: another machine is at its BMC address", l.Server, seen.uuid, l.UUID))
		}
		switch seen.power {
		case schemas.OnPowerState, schemas.PoweringOnPowerState:
			state = provider.InstanceRunning
			if seen.power == schemas.PoweringOnPowerState {
				state = provider.InstanceCreating
			}
			return nil
		case schemas.PoweringOffPowerState:
			return provider.NewRetryable(fmt.Errorf("server %s is still powering off", l.Server), p.cfg.PollInterval)
		}
		if err := s.setBoot(system); err != nil {
			return err
		}
		resetType := pickReset(seen.resetTypes, schemas.OnResetType, schemas.ForceOnResetType)
		if _, err := system.Reset(resetType); err != nil {
			return s.bmc.classify(err, "powering on")
		}
		state = provider.InstanceCreating
		return nil
	})
	if err != nil {
		if justTaken && provider.IsTerminal(err) {
			if releaseErr := p.ledger.release(ctx, l); releaseErr != nil {
				return nil, errors.Join(err, releaseErr)
			}
		}
		return nil, fmt.Errorf("powering on server %s for claim %s: %w", l.Server, l.Claim, err)
	}
	if l.Asleep {
		l.Asleep, l.PoweredOnAt = false, p.clock.Now()
		if err := p.ledger.update(ctx, l); err != nil {
			return nil, err
		}
	}
	return p.instance(s, l, state), nil
}

// setBoot sets the server's one-time boot override, the virtual media
// inserted first for Cd.
func (s *server) setBoot(system *schemas.ComputerSystem) error {
	if s.boot == nil || s.boot.Source == v1alpha1.RedfishBootNone {
		return nil
	}
	if s.boot.Source == v1alpha1.RedfishBootCd {
		media, err := system.VirtualMedia()
		if err != nil {
			return s.bmc.classify(err, "reading the virtual media")
		}
		if len(media) == 0 {
			return provider.NewTerminal(fmt.Errorf("the BMC %s offers no virtual media for boot source Cd", s.bmc.endpoint))
		}
		inserted := true
		if _, err := media[0].InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: s.boot.Image, Inserted: &inserted}); err != nil {
			return s.bmc.classify(err, "inserting the virtual media")
		}
	}
	err := system.SetBoot(&schemas.Boot{
		BootSourceOverrideTarget:  schemas.BootSource(s.boot.Source),
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
	})
	return s.bmc.classify(err, "setting the one-time boot")
}

// pickReset is the first of the wanted reset types the system allows; a
// system that lists none allows any.
func pickReset(allowed []schemas.ResetType, wanted ...schemas.ResetType) schemas.ResetType {
	if len(allowed) == 0 {
		return wanted[0]
	}
	for _, want := range wanted {
		for _, have := range allowed {
			if have == want {
				return want
			}
		}
	}
	return wanted[len(wanted)-1]
}
