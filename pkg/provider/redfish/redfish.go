package redfish

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish/schemas"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// MediaServing says the controller runs the media server
	// (MediaHandler), which serves the seeds of servers that boot with
	// userData VirtualMedia.
	MediaServing bool
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
	seeds        *seeds
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
		seeds: &seeds{
			kube: cfg.Kube, namespace: opts.Namespace, cluster: opts.ClusterName, nodeProvider: np.Name,
			baseURL: spec.MediaURL, serving: cfg.MediaServing,
		},
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
		p.report(s.spec.Name, ProblemServerUnreachable, fmt.Sprintf("server %s: %v", s.spec.Name, err))
		return nil, fmt.Errorf("reading server %s: %w", s.spec.Name, err)
	}
	p.clear(s.spec.Name, ProblemServerUnreachable)
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
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return nil, err
	}
	return p.leaseIn(leases, providerID)
}

// leaseIn is leaseOf among leases already read.
func (p *Provider) leaseIn(leases map[string]*lease, providerID string) (*lease, error) {
	uuid, ok := v1alpha1.SystemUUIDOf(providerID)
	if !ok {
		return nil, provider.NewTerminal(fmt.Errorf("providerID %q is not a redfish one (%s<system UUID>)", providerID, ProviderIDPrefix))
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
			p.clear(s.spec.Name, ProblemClaimedServerPoweredOff)
			return provider.InstanceSuspended
		}
		p.report(s.spec.Name, ProblemClaimedServerPoweredOff, fmt.Sprintf("server %s of claim %s was powered off outside claimscale; it is not powered on again until the claim asks", s.spec.Name, l.Claim))
		return provider.InstanceRunning
	}
	p.clear(s.spec.Name, ProblemClaimedServerPoweredOff)
	if l.Asleep {
		p.report(s.spec.Name, ProblemSleepingServerPoweredOn, fmt.Sprintf("server %s of sleeping claim %s was powered on outside claimscale", s.spec.Name, l.Claim))
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
