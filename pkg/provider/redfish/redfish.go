package redfish

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish/schemas"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// ProviderIDPrefix starts every providerID of this type; the rest is the
// ComputerSystem's UUID, which the kubelet reports as the Node's
// status.nodeInfo.systemUUID.
const ProviderIDPrefix = v1alpha1.ProviderIDPrefixRedfish

// Defaults of the settings and the tuning.
const (
	DefaultShutdownTimeout = 5 * time.Minute
	DefaultInventoryTTL    = 30 * time.Second
	DefaultCallTimeout     = 30 * time.Second
	DefaultPollInterval    = 2 * time.Second
)

// Config is what the factory is built with.
type Config struct {
	// Kube keeps the leases (ConfigMaps in the controller's namespace).
	Kube client.Client
	// Clock times shutdowns, power-on staggers and the inventory cache;
	// the real clock when nil.
	Clock clock.WithTicker
	// InventoryTTL is how long a server's power state and inventory are
	// trusted for offering it; Create and Delete always read afresh.
	InventoryTTL time.Duration
	// CallTimeout bounds one call to a BMC.
	CallTimeout time.Duration
	// PollInterval is how often a power transition is read.
	PollInterval time.Duration
}

// NewFactory returns the factory of the redfish type.
func NewFactory(cfg Config) provider.Factory {
	return func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		return New(ctx, np, opts, cfg)
	}
}

// Provider powers a NodeProvider's inventory of servers on and off.
type Provider struct {
	nodeProvider string
	cluster      string
	settings     settings
	servers      []*server
	ledger       *ledger
	clock        clock.WithTicker
	cfg          Config

	claimLocks sync.Map
	mu         sync.Mutex
	problems   map[string]provider.Problem
}

type settings struct {
	maxPoweredOn      int
	powerOnsPerMinute int
	shutdownTimeout   time.Duration
}

// server is one server of the inventory with its BMC and what was last
// read of it.
type server struct {
	spec v1alpha1.RedfishServer
	boot *v1alpha1.RedfishBoot
	bmc  *bmc

	mu       sync.Mutex
	observed *observation
}

// observation is what a BMC said of its system.
type observation struct {
	uuid       string
	power      schemas.PowerState
	cpus       int64
	memoryGiB  float64
	resetTypes []schemas.ResetType
	at         time.Time
}

var (
	_ provider.Provider        = (*Provider)(nil)
	_ provider.PowerManager    = (*Provider)(nil)
	_ provider.ProblemReporter = (*Provider)(nil)
)

// New builds the provider of a redfish NodeProvider.
func New(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options, cfg Config) (*Provider, error) {
	spec := np.Spec.Redfish
	switch {
	case spec == nil:
		return nil, provider.NewTerminal(errors.New("spec.redfish is required for type redfish"))
	case cfg.Kube == nil:
		return nil, provider.NewTerminal(errors.New("the redfish provider needs a Kubernetes client for its leases"))
	case opts.Namespace == "":
		return nil, provider.NewTerminal(errors.New("the redfish provider needs the controller's namespace for its leases"))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	cfg.InventoryTTL = orDefault(cfg.InventoryTTL, DefaultInventoryTTL)
	cfg.CallTimeout = orDefault(cfg.CallTimeout, DefaultCallTimeout)
	cfg.PollInterval = orDefault(cfg.PollInterval, DefaultPollInterval)
	p := &Provider{
		nodeProvider: np.Name, cluster: opts.ClusterName, clock: cfg.Clock, cfg: cfg,
		settings: settings{shutdownTimeout: DefaultShutdownTimeout},
		ledger:   &ledger{kube: cfg.Kube, namespace: opts.Namespace, cluster: opts.ClusterName, nodeProvider: np.Name},
		problems: map[string]provider.Problem{},
	}
	if spec.MaxPoweredOn != nil {
		p.settings.maxPoweredOn = int(*spec.MaxPoweredOn)
	}
	if spec.PowerOnsPerMinute != nil {
		p.settings.powerOnsPerMinute = int(*spec.PowerOnsPerMinute)
	}
	if spec.ShutdownTimeout != nil {
		p.settings.shutdownTimeout = spec.ShutdownTimeout.Duration
	}
	shared := credentials{username: string(opts.Credentials["username"]), password: string(opts.Credentials["password"]), ca: opts.Credentials["ca.crt"]}
	for _, serverSpec := range spec.Servers {
		creds := shared
		if ref := serverSpec.CredentialsSecretRef; ref != nil {
			var err error
			if creds, err = readCredentials(ctx, opts.Secrets, *ref); err != nil {
				return nil, fmt.Errorf("reading the credentials of server %s: %w", serverSpec.Name, err)
			}
		}
		if creds.username == "" || creds.password == "" {
			return nil, provider.NewTerminal(fmt.Errorf("the credentials of server %s need keys username and password", serverSpec.Name))
		}
		tls, err := tlsConfig(creds.ca, spec.InsecureSkipTLSVerify)
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", serverSpec.Name, err)
		}
		boot := spec.Boot
		if serverSpec.Boot != nil {
			boot = serverSpec.Boot
		}
		p.servers = append(p.servers, &server{
			spec: serverSpec, boot: boot,
			bmc: newBMC(serverSpec.Endpoint, serverSpec.System, creds.username, creds.password, tls, cfg.CallTimeout, cfg.Clock.Now),
		})
	}
	return p, nil
}

type credentials struct {
	username, password string
	ca                 []byte
}

func readCredentials(ctx context.Context, secrets provider.SecretReader, ref v1alpha1.SecretReference) (credentials, error) {
	if secrets == nil {
		return credentials{}, provider.NewTerminal(errors.New("no Secret reader"))
	}
	var creds credentials
	for key, into := range map[string]*string{"username": &creds.username, "password": &creds.password} {
		value, err := secrets.ReadSecretKey(ctx, v1alpha1.SecretKeyReference{SecretReference: ref, Key: key})
		if err != nil {
			return credentials{}, err
		}
		*into = string(value)
	}
	if ca, err := secrets.ReadSecretKey(ctx, v1alpha1.SecretKeyReference{SecretReference: ref, Key: "ca.crt"}); err == nil {
		creds.ca = ca
	}
	return creds, nil
}

func orDefault(d, fallback time.Duration) time.Duration {
	if d <= 0 {
		return fallback
	}
	return d
}

// observe reads the server's system, from the cache when fresh is false
// and the last reading is younger than the inventory TTL.
func (p *Provider) observe(ctx context.Context, s *server, fresh bool) (*observation, error) {
	s.mu.Lock()
	cached := s.observed
	s.mu.Unlock()
	if !fresh && cached != nil && p.clock.Since(cached.at) < p.cfg.InventoryTTL {
		return cached, nil
	}
	var seen *observation
	err := s.bmc.do(ctx, func(_ context.Context, system *schemas.ComputerSystem) error {
		seen = observationOf(system, p.clock.Now())
		return nil
	})
	if err != nil {
		p.report(s.spec.Name, "ServerUnreachable", fmt.Sprintf("server %s: %v", s.spec.Name, err))
		return nil, fmt.Errorf("reading server %s: %w", s.spec.Name, err)
	}
	p.clear(s.spec.Name, "ServerUnreachable")
	s.mu.Lock()
	s.observed = seen
	s.mu.Unlock()
	return seen, nil
}

func observationOf(system *schemas.ComputerSystem, at time.Time) *observation {
	seen := &observation{uuid: strings.ToLower(system.UUID), power: system.PowerState, at: at}
	if count := system.ProcessorSummary.LogicalProcessorCount; count != nil {
		seen.cpus = int64(*count)
	}
	if memory := system.MemorySummary.TotalSystemMemoryGiB; memory != nil {
		seen.memoryGiB = *memory
	}
	seen.resetTypes, _ = system.GetSupportedResetTypes()
	return seen
}

// fits reports whether the server's own inventory holds the pool's shape;
// a BMC that reports no count is taken at the operator's word.
func fits(seen *observation, shape provider.Shape) bool {
	cpu, memory := shape.Capacity[corev1.ResourceCPU], shape.Capacity[corev1.ResourceMemory]
	if seen.cpus > 0 && cpu.MilliValue() > seen.cpus*1000 {
		return false
	}
	if seen.memoryGiB > 0 && float64(memory.Value()) > seen.memoryGiB*(1<<30) {
		return false
	}
	return true
}

// Shapes returns the pool's fixed shapes as an inventory: each with the
// number of its servers that are off and free to power on, within the cap
// on servers on (none at the cap), so that a round makes no more claims
// of a shape than it has servers.
func (p *Provider) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	if pool.Spec.Shapes.Flexible != nil {
		return nil, provider.NewTerminal(fmt.Errorf("NodePool %s asks for flexible shapes; a redfish inventory has only the fixed shapes its servers name", pool.Name))
	}
	poolShapes, err := fixedShapes(pool)
	if err != nil {
		return nil, err
	}
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return nil, err
	}
	room := p.room(leases)
	offered := make([]provider.Shape, 0, len(poolShapes))
	for _, shape := range poolShapes {
		shape.Inventory = true
		if room > 0 {
			shape.Available = min(len(p.candidates(ctx, shape, leases, false)), room)
		}
		offered = append(offered, shape)
	}
	return offered, nil
}

// room is how many more servers may be powered on under the cap.
func (p *Provider) room(leases map[string]*lease) int {
	if p.settings.maxPoweredOn == 0 {
		return len(p.servers)
	}
	on := 0
	for _, l := range leases {
		if !l.Asleep {
			on++
		}
	}
	return max(p.settings.maxPoweredOn-on, 0)
}

// capped reports whether powering on one more server would pass the cap.
func (p *Provider) capped(leases map[string]*lease) bool { return p.room(leases) == 0 }

// candidates are the servers of a shape that are off, unleased and large
// enough, in inventory order.
func (p *Provider) candidates(ctx context.Context, shape provider.Shape, leases map[string]*lease, fresh bool) []*server {
	var out []*server
	for _, s := range p.servers {
		if s.spec.Shape != shape.Name || leases[s.spec.Name] != nil {
			continue
		}
		seen, err := p.observe(ctx, s, fresh)
		if err != nil {
			continue
		}
		if !fits(seen, shape) {
			p.report(s.spec.Name, "InventoryMismatch", fmt.Sprintf("server %s has %d cpus and %.0f GiB of memory, less than its shape %s: not offered", s.spec.Name, seen.cpus, seen.memoryGiB, shape.Name))
			continue
		}
		p.clear(s.spec.Name, "InventoryMismatch")
		switch seen.power {
		case schemas.OffPowerState:
			p.clear(s.spec.Name, "PoweredOnWithoutClaim")
			out = append(out, s)
		case schemas.OnPowerState, schemas.PoweringOnPowerState:
			p.report(s.spec.Name, "PoweredOnWithoutClaim", fmt.Sprintf("server %s is on without a claim of this cluster: left alone and not offered", s.spec.Name))
		}
	}
	return out
}

func fixedShapes(pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	out := make([]provider.Shape, 0, len(pool.Spec.Shapes.Fixed))
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.CPU == nil || s.Memory == nil {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s needs cpu and memory: a server's size is what its pool says", s.Name, pool.Name))
		}
		capacity := corev1.ResourceList{corev1.ResourceCPU: *s.CPU, corev1.ResourceMemory: *s.Memory}
		price := shapecatalog.DefaultSizePrice(*s.CPU, *s.Memory)
		if s.Price != "" {
			var err error
			if price, err = strconv.ParseFloat(s.Price, 64); err != nil {
				return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s has price %q, which is not a number", s.Name, pool.Name, s.Price))
			}
		}
		out = append(out, provider.Shape{Name: s.Name, Capacity: capacity, Price: price})
	}
	return out, nil
}

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
			return p.powerOnLeased(ctx, l)
		}
	}
	if p.capped(leases) {
		return nil, provider.NewInsufficientCapacity(fmt.Errorf("NodeProvider %s has %d servers on, its maxPoweredOn", p.nodeProvider, p.settings.maxPoweredOn))
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
		return p.powerOnLeased(ctx, taken)
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
// unless it is on already. A call the BMC refused outright releases the
// lease; one whose outcome is unknown (a timeout) keeps it, so the next
// call finds the server either way.
func (p *Provider) powerOnLeased(ctx context.Context, l *lease) (*provider.Instance, error) {
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
		if provider.IsTerminal(err) || provider.IsNotFound(err) {
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

func (p *Provider) server(name string) *server {
	for _, s := range p.servers {
		if s.spec.Name == name {
			return s
		}
	}
	return nil
}

func (p *Provider) instance(s *server, l *lease, state provider.InstanceState) *provider.Instance {
	labels := map[string]string{}
	for key, value := range s.spec.Labels {
		labels[key] = value
	}
	if s.spec.Zone != "" {
		labels[corev1.LabelTopologyZone] = s.spec.Zone
	}
	return &provider.Instance{
		ProviderID: ProviderIDPrefix + l.UUID, Name: s.spec.Name, Labels: labels, State: state,
		Capacity: s.capacity(),
		Tags: map[string]string{
			v1alpha1.TagCluster: p.cluster, v1alpha1.TagNodePool: l.Pool, v1alpha1.TagNodeClaim: l.Claim,
		},
		CreatedAt: l.PoweredOnAt,
	}
}

// capacity is what the BMC last reported.
func (s *server) capacity() corev1.ResourceList {
	seen := s.observation()
	if seen == nil || seen.cpus == 0 {
		return nil
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(seen.cpus, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(seen.memoryGiB*(1<<30)), resource.BinarySI),
	}
}

// leaseOf finds this cluster's lease of a providerID. A server leased by
// another cluster, or on without any lease, is not ours: Terminal, so
// that nothing powers it off; a server off and unleased is gone as far
// as claimscale goes: NotFound.
func (p *Provider) leaseOf(ctx context.Context, providerID string) (*lease, error) {
	uuid, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok || uuid == "" {
		return nil, provider.NewTerminal(fmt.Errorf("providerID %q is not a redfish one (%s<system UUID>)", providerID, ProviderIDPrefix))
	}
	uuid = strings.ToLower(uuid)
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range leases {
		if l.UUID != uuid {
			continue
		}
		if l.Cluster != p.cluster {
			return nil, provider.NewTerminal(fmt.Errorf("server %s (%s) is leased by cluster %s, not %s: %w", l.Server, providerID, l.Cluster, p.cluster, errNotOurs))
		}
		return l, nil
	}
	for _, s := range p.servers {
		if seen := s.observation(); seen != nil && seen.uuid == uuid && seen.power != schemas.OffPowerState {
			return nil, provider.NewTerminal(fmt.Errorf("server %s (%s) is on without a claim of cluster %s: %w", s.spec.Name, providerID, p.cluster, errNotOurs))
		}
	}
	return nil, provider.NewNotFound("no server of NodeProvider %s is on for a claim of cluster %s with system UUID %s", p.nodeProvider, p.cluster, uuid)
}

// errNotOurs marks a server claimscale must leave alone.
var errNotOurs = errors.New("refusing to touch a server claimscale did not power on")

// Get returns the leased server of a providerID; a server that is not
// ours is not found.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	l, err := p.leaseOf(ctx, providerID)
	if errors.Is(err, errNotOurs) {
		return nil, provider.NewNotFound("%w", err)
	}
	if err != nil {
		return nil, err
	}
	s := p.server(l.Server)
	if s == nil {
		return nil, provider.NewNotFound("server %s is no longer in NodeProvider %s", l.Server, p.nodeProvider)
	}
	seen, err := p.observe(ctx, s, false)
	if err != nil {
		return nil, err
	}
	return p.instance(s, l, p.stateOf(s, l, seen)), nil
}

// stateOf is the instance state of a leased server. A server found off
// that we did not put to sleep was powered off by hand: reported, and not
// fought.
func (p *Provider) stateOf(s *server, l *lease, seen *observation) provider.InstanceState {
	switch seen.power {
	case schemas.PoweringOnPowerState:
		return provider.InstanceCreating
	case schemas.PoweringOffPowerState:
		return provider.InstanceStopping
	case schemas.OffPowerState:
		if l.Asleep {
			p.clear(s.spec.Name, "ClaimedServerPoweredOff")
			return provider.InstanceSuspended
		}
		p.report(s.spec.Name, "ClaimedServerPoweredOff", fmt.Sprintf("server %s of claim %s was powered off outside claimscale; it is not powered on again until the claim asks", s.spec.Name, l.Claim))
		return provider.InstanceRunning
	}
	p.clear(s.spec.Name, "ClaimedServerPoweredOff")
	if l.Asleep {
		p.report(s.spec.Name, "SleepingServerPoweredOn", fmt.Sprintf("server %s of sleeping claim %s was powered on outside claimscale", s.spec.Name, l.Claim))
	}
	return provider.InstanceRunning
}

// List returns the leased servers of this cluster, the machines
// claimscale powered on; a server that is on without a lease is not ours
// and not listed, so garbage collection never powers it off.
func (p *Provider) List(ctx context.Context) ([]*provider.Instance, error) {
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return nil, err
	}
	var out []*provider.Instance
	for _, l := range leases {
		s := p.server(l.Server)
		if s == nil || l.Cluster != p.cluster {
			continue
		}
		state := provider.InstanceRunning
		if l.Asleep {
			state = provider.InstanceSuspended
		}
		out = append(out, p.instance(s, l, state))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

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
		return p.ledger.release(ctx, l)
	}
	if err := p.powerOff(ctx, s, l); err != nil {
		return fmt.Errorf("powering off server %s of claim %s: %w", l.Server, l.Claim, err)
	}
	if err := s.ejectMedia(ctx); err != nil {
		logf.FromContext(ctx).Info("could not eject the virtual media", "server", s.spec.Name, "error", err.Error())
	}
	logf.FromContext(ctx).Info("powered off server", "server", s.spec.Name, "nodeclaim", l.Claim)
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

func (s *server) ejectMedia(ctx context.Context) error {
	if s.boot == nil || s.boot.Source != v1alpha1.RedfishBootCd {
		return nil
	}
	return s.bmc.do(ctx, func(_ context.Context, system *schemas.ComputerSystem) error {
		media, err := system.VirtualMedia()
		if err != nil || len(media) == 0 || media[0].Inserted == nil || !*media[0].Inserted {
			return err
		}
		_, err = media[0].EjectMedia()
		return s.bmc.classify(err, "ejecting the virtual media")
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
	l, err := p.leaseOf(ctx, providerID)
	if err != nil {
		return err
	}
	if l.Asleep {
		leases, err := p.ledger.leases(ctx)
		if err != nil {
			return err
		}
		if p.capped(leases) {
			return provider.NewInsufficientCapacity(fmt.Errorf("NodeProvider %s has %d servers on, its maxPoweredOn", p.nodeProvider, p.settings.maxPoweredOn))
		}
	}
	_, err = p.powerOnLeased(ctx, l)
	return err
}

// Problems are the servers that cannot serve or that claimscale leaves
// alone, with why.
func (p *Provider) Problems() []provider.Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.problems))
	for key := range p.problems {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := make([]provider.Problem, 0, len(keys))
	for _, key := range keys {
		out = append(out, p.problems[key])
	}
	return out
}

func (p *Provider) report(server, reason, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.problems[server+"/"+reason] = provider.Problem{Reason: reason, Message: message}
}

func (p *Provider) clear(server, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.problems, server+"/"+reason)
}
