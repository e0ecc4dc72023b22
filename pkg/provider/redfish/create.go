package redfish

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
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
			return p.powerOnLeased(ctx, l, false, opts.UserData)
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
		return p.powerOnLeased(ctx, taken, true, opts.UserData)
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

// powerOnLeased powers the leased server on (its virtual media and boot
// override first), unless it is on already. userData, the claim's
// rendered bootstrap, becomes the claim's seed for a server that boots
// with userData VirtualMedia; a power-on without it (a wake) inserts the
// seed written at the claim's first. When the BMC refuses outright the power-on of a
// lease this call took (justTaken), the lease goes back: the server is
// off and was never ours. Any other lease stays, whatever the BMC says:
// a server we powered on earlier may be on, and must stay ours to power
// off; and a call whose outcome is unknown (a timeout) keeps it too, so
// the next call finds the server either way.
func (p *Provider) powerOnLeased(ctx context.Context, l *lease, justTaken bool, userData []byte) (*provider.Instance, error) {
	s := p.server(l.Server)
	if s == nil {
		return nil, provider.NewTerminal(fmt.Errorf("server %s of the lease for claim %s is no longer in NodeProvider %s", l.Server, l.Claim, p.nodeProvider))
	}
	claimSeed, err := p.seedFor(ctx, s, l, userData)
	if err != nil {
		return nil, p.giveBack(ctx, l, justTaken, fmt.Errorf("powering on server %s for claim %s: %w", l.Server, l.Claim, err))
	}
	var state provider.InstanceState
	err = s.bmc.do(ctx, func(_ context.Context, system *schemas.ComputerSystem) error {
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
		if err := s.setBoot(system, claimSeed); err != nil {
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
		return nil, p.giveBack(ctx, l, justTaken, fmt.Errorf("powering on server %s for claim %s: %w", l.Server, l.Claim, err))
	}
	if l.Asleep {
		l.Asleep, l.PoweredOnAt = false, p.clock.Now()
		if err := p.ledger.update(ctx, l); err != nil {
			return nil, err
		}
	}
	return p.instance(s, l, state), nil
}

// giveBack releases a lease this call took when the power-on failed for
// good before it was sent: the server is off and was never ours.
func (p *Provider) giveBack(ctx context.Context, l *lease, justTaken bool, err error) error {
	if !justTaken || !provider.IsTerminal(err) {
		return err
	}
	if releaseErr := p.release(ctx, l); releaseErr != nil {
		return errors.Join(err, releaseErr)
	}
	return err
}

// seedFor is the claim's seed for a server that boots with userData
// VirtualMedia, written from userData, or the one written before; nil
// when the server takes none or the pool renders no user data.
func (p *Provider) seedFor(ctx context.Context, s *server, l *lease, userData []byte) (*seed, error) {
	if s.boot == nil || s.boot.UserData != v1alpha1.RedfishUserDataVirtualMedia {
		return nil, nil
	}
	if len(userData) == 0 {
		written, ok, err := p.seeds.current(ctx, l)
		if !ok || err != nil {
			return nil, err
		}
		return &written, nil
	}
	written, err := p.seeds.put(ctx, l, s.spec.Name, userData)
	if err != nil {
		return nil, err
	}
	return &written, nil
}

// setBoot inserts the virtual media the server boots with (the boot
// image for Cd, the claim's seed), then sets its one-time boot override.
func (s *server) setBoot(system *schemas.ComputerSystem, claimSeed *seed) error {
	bootImage := s.boot != nil && s.boot.Source == v1alpha1.RedfishBootCd
	if bootImage || claimSeed != nil {
		media, err := system.VirtualMedia()
		if err != nil {
			return s.bmc.classify(err, "reading the virtual media")
		}
		bootDevice, seedDevice, err := pickDevices(media, bootImage, claimSeed != nil)
		if err != nil {
			return provider.NewTerminal(fmt.Errorf("the BMC %s: %w", s.bmc.endpoint, err))
		}
		if bootImage {
			if err := s.insert(bootDevice, s.boot.Image); err != nil {
				return err
			}
		}
		if claimSeed != nil {
			if err := s.insert(seedDevice, claimSeed.url, claimSeed.token); err != nil {
				return err
			}
		}
	}
	if s.boot == nil || s.boot.Source == v1alpha1.RedfishBootNone {
		return nil
	}
	err := system.SetBoot(&schemas.Boot{
		BootSourceOverrideTarget:  schemas.BootSource(s.boot.Source),
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
	})
	return s.bmc.classify(err, "setting the one-time boot")
}

// insert puts an image into a virtual media device, unless it holds it
// already. Redfish's VirtualMedia schema says a service should refuse
// InsertMedia while an image is inserted ("users are expected to eject
// media prior to inserting new media"), so another image is ejected
// first. secrets are redacted from the BMC's answers: a BMC that cannot
// fetch the image names its URL (sushy-tools' vmedia.py does).
func (s *server) insert(device *schemas.VirtualMedia, image string, secrets ...string) error {
	if device.Inserted != nil && *device.Inserted {
		if device.Image == image {
			return nil
		}
		if _, err := device.EjectMedia(); err != nil {
			return s.bmc.classify(err, "ejecting the virtual media "+device.ID, secrets...)
		}
	}
	inserted := true
	if _, err := device.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: image, Inserted: &inserted}); err != nil {
		return s.bmc.classify(err, "inserting the virtual media "+device.ID, secrets...)
	}
	return nil
}

// pickDevices chooses the virtual media devices: the boot image on the
// first that takes a CD, the seed on another that does, or else on one
// that takes a USB stick (a seed is an ISO 9660 image; Linux reads it from
// either). A BMC that lists no media types is taken to take CDs.
func pickDevices(media []*schemas.VirtualMedia, bootImage, seed bool) (bootDevice, seedDevice *schemas.VirtualMedia, err error) {
	takes := func(device *schemas.VirtualMedia, types ...schemas.VirtualMediaType) bool {
		if len(device.MediaTypes) == 0 {
			return slices.Contains(types, schemas.CDVirtualMediaType)
		}
		for _, have := range device.MediaTypes {
			if slices.Contains(types, have) {
				return true
			}
		}
		return false
	}
	free := slices.Clone(media)
	take := func(types ...schemas.VirtualMediaType) *schemas.VirtualMedia {
		for i, device := range free {
			if takes(device, types...) {
				free = slices.Delete(free, i, i+1)
				return device
			}
		}
		return nil
	}
	if bootImage {
		if bootDevice = take(schemas.CDVirtualMediaType, schemas.DVDVirtualMediaType); bootDevice == nil {
			return nil, nil, fmt.Errorf("offers no virtual CD for boot source Cd (%d virtual media devices)", len(media))
		}
	}
	if seed {
		seedDevice = take(schemas.CDVirtualMediaType, schemas.DVDVirtualMediaType)
		if seedDevice == nil {
			seedDevice = take(schemas.USBStickVirtualMediaType)
		}
		if seedDevice == nil {
			if bootImage {
				return nil, nil, fmt.Errorf("has no second virtual media device (a CD or USB stick) for the claim's seed beside the boot image (%d devices)", len(media))
			}
			return nil, nil, fmt.Errorf("offers no virtual CD or USB stick for the claim's seed (%d virtual media devices)", len(media))
		}
	}
	return bootDevice, seedDevice, nil
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
