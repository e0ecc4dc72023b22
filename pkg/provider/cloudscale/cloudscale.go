package cloudscale

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"
	"github.com/google/uuid"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// ProviderIDPrefix starts every providerID this provider returns; it is the
// format the cloudscale cloud-controller-manager writes into
// Node.spec.providerID.
const ProviderIDPrefix = "cloudscale://"

// Config tunes what New chooses by itself. The zero value is what New uses;
// tests and end-to-end runs set the base URL, the clock and the TTLs.
type Config struct {
	// BaseURL of the API. Empty means the credentials' apiURL key, else the
	// SDK's default (https://api.cloudscale.ch/, or $CLOUDSCALE_API_URL).
	BaseURL string
	// HTTPClient makes the requests. Nil means a client with a 30 s timeout.
	HTTPClient *http.Client
	// Clock for caches and retry waits. Nil means the real clock.
	Clock clock.Clock
	// FlavorTTL is how long the flavor list is kept (1 h).
	FlavorTTL time.Duration
	// ListTTL is how long a List snapshot is shared between callers (5 s).
	ListTTL time.Duration
	// MaxTries of one API call when it fails with 429, 5xx or no answer (4).
	MaxTries int
	// RetryInterval is the first wait between tries, doubling after (1 s).
	RetryInterval time.Duration
	// MaxRetryWait is the longest Retry-After waited out within a call
	// (30 s); a longer one is returned to the caller as the retry hint.
	MaxRetryWait time.Duration
	// MaxConcurrency of creates, and separately of deletes (10).
	MaxConcurrency int
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.FlavorTTL <= 0 {
		c.FlavorTTL = time.Hour
	}
	if c.ListTTL <= 0 {
		c.ListTTL = 5 * time.Second
	}
	if c.MaxTries <= 0 {
		c.MaxTries = 4
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.MaxRetryWait <= 0 {
		c.MaxRetryWait = 30 * time.Second
	}
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = 10
	}
	return c
}

// Provider makes cloudscale servers for NodeClaims.
type Provider struct {
	api         *cloudscale.Client
	cfg         Config
	clock       clock.Clock
	settings    settings
	clusterName string
	secrets     provider.SecretReader
	// token is kept only to scrub it from error text.
	token *secret
	// secretName names the credentials Secret in messages ("Secret ns/name").
	secretName string

	createSlots chan struct{}
	deleteSlots chan struct{}
	// claims serializes the Creates of one claim: the API has no
	// idempotency key, so two Creates that both looked before either made
	// its server would make two.
	claims claimLocks

	calls   singleflight.Group
	groupMu sync.Mutex
	groups  managedGroups
	mu      sync.Mutex
	flavors flavorCache
	servers serverCache
	// powering are the start and stop actions under way.
	powering powerActions
}

var _ provider.Provider = (*Provider)(nil)

// String describes the provider for logs. It exists so that printing a
// provider with any verb never reaches the API client, which holds the token.
func (p *Provider) String() string {
	return fmt.Sprintf("cloudscale provider (cluster %s, zones %s)", p.clusterName, strings.Join(p.settings.zoneNames(), ","))
}

// GoString is String, for %#v.
func (p *Provider) GoString() string { return p.String() }

// New builds a cloudscale provider from a NodeProvider of type cloudscale;
// it is the provider.Factory registered for that type.
func New(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
	return NewWithConfig(ctx, np, opts, Config{})
}

// NewFactory returns a provider.Factory that builds providers with cfg, for
// tests and end-to-end runs that point at a fake API or step a fake clock.
func NewFactory(cfg Config) provider.Factory {
	return func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		return NewWithConfig(ctx, np, opts, cfg)
	}
}

// NewWithConfig is New with the defaults in cfg overridden. It makes no API
// call: settings and credentials are checked, the API is first asked when
// the provider is used.
func NewWithConfig(_ context.Context, np *v1alpha1.NodeProvider, opts provider.Options, cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	secretName := "the credentials Secret"
	if ref := np.Spec.CredentialsSecretRef; ref != nil {
		secretName = fmt.Sprintf("Secret %s/%s", ref.Namespace, ref.Name)
	}
	if opts.ClusterName == "" {
		return nil, provider.NewTerminal(fmt.Errorf("no cluster name: it goes into every server's %s tag", v1alpha1.TagCluster))
	}
	s, err := parseSettings(np)
	if err != nil {
		return nil, provider.NewTerminal(err)
	}
	if s.userData != nil && opts.Secrets == nil {
		return nil, provider.NewTerminal(fmt.Errorf("spec.cloudscale.userDataSecretRef is set but no Secret reader was given"))
	}
	creds, err := parseCredentials(opts.Credentials, secretName)
	if err != nil {
		return nil, provider.NewTerminal(err)
	}

	httpClient := &http.Client{Timeout: 30 * time.Second}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		httpClient = &c
	}
	base := httpClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	httpClient.Transport = recordingTransport{base: base}

	api := cloudscale.NewClient(httpClient)
	api.AuthToken = creds.token.value
	baseURL := cfg.BaseURL
	if baseURL == "" {
		baseURL = creds.baseURL
	}
	if baseURL != "" {
		u, err := parseBaseURL(baseURL)
		if err != nil {
			return nil, provider.NewTerminal(err)
		}
		api.BaseURL = u
	}

	return &Provider{
		api:         api,
		cfg:         cfg,
		clock:       cfg.Clock,
		settings:    s,
		clusterName: opts.ClusterName,
		secrets:     opts.Secrets,
		token:       creds.token,
		secretName:  secretName,
		groups:      managedGroups{reserved: map[string][]*reservation{}},
		createSlots: make(chan struct{}, cfg.MaxConcurrency),
		deleteSlots: make(chan struct{}, cfg.MaxConcurrency),
	}, nil
}

// Create makes the server for a claim, or adopts the one a previous attempt
// made: servers tagged with this cluster and claim are looked for first,
// and only when there is none is one created, with every tag in the create
// request itself.
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	flavor := claim.Spec.Shape.Name
	if flavor == "" {
		return nil, provider.NewTerminal(fmt.Errorf("nodeclaim %s has no shape name: it names the cloudscale flavor", claim.Name))
	}
	zone, err := p.zoneFor(claim)
	if err != nil {
		return nil, err
	}
	unlock, err := p.claims.lock(ctx, claim.Name)
	if err != nil {
		return nil, fmt.Errorf("waiting for another Create of nodeclaim %s: %w", claim.Name, err)
	}
	defer unlock()
	release, err := acquire(ctx, p.createSlots)
	if err != nil {
		return nil, err
	}
	defer release()
	log := logf.FromContext(ctx).WithValues("nodeclaim", claim.Name, "flavor", flavor, "zone", zone.name)

	tags := provider.Tags(p.clusterName, claim)
	// The core's per-claim user data wins over the provider's shared one.
	userData := string(opts.UserData)
	if userData == "" {
		if userData, err = p.userData(ctx); err != nil {
			return nil, err
		}
	}
	req := p.settings.serverRequest(zone, claim.Name, flavor, userData, tags)

	var server *cloudscale.Server
	adopted := false
	err = p.retry(ctx, func(ctx context.Context) error {
		// Looking first on every try, not only the first: a create that
		// timed out or got a 5xx may still have made the server.
		var existing []cloudscale.Server
		if err := p.do(ctx, func(ctx context.Context) error {
			var err error
			existing, err = p.api.Servers.List(ctx, cloudscale.WithTagFilter(cloudscale.TagMap{
				v1alpha1.TagCluster:   p.clusterName,
				v1alpha1.TagNodeClaim: claim.Name,
			}))
			return err
		}); err != nil {
			return fmt.Errorf("looking for a server tagged for nodeclaim %s: %w", claim.Name, err)
		}
		if s := oldestOwned(existing, p.clusterName, claim.Name); s != nil {
			server, adopted = s, true
			return nil
		}
		if p.settings.maxServersPerGroup > 0 {
			group, done, err := p.serverGroupFor(ctx, claim.Spec.NodePoolRef.Name, zone.name)
			if err != nil {
				return err
			}
			defer func() {
				made := ""
				if server != nil {
					made = server.UUID
				}
				done(made)
			}()
			req.ServerGroups = append(slices.Clone(zone.serverGroups), group)
		}
		if err := p.do(ctx, func(ctx context.Context) error {
			var err error
			server, err = p.api.Servers.Create(ctx, req)
			return err
		}); err != nil {
			return fmt.Errorf("creating server %s (flavor %s, zone %s): %w", claim.Name, flavor, zone.name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.invalidateServers()
	if adopted {
		log.Info("adopted existing cloudscale server", "server", server.UUID)
	} else {
		log.Info("created cloudscale server", "server", server.UUID)
	}
	return p.instance(server), nil
}

// zoneFor picks the zone of a claim's server: the first of the provider's
// zones that the claim's topology.kubernetes.io/zone requirements allow.
// Provisioning puts every claim it makes in one zone; a claim without a
// zone requirement (written by hand) goes to the first zone.
func (p *Provider) zoneFor(claim *v1alpha1.NodeClaim) (zoneSettings, error) {
	var requirements []corev1.NodeSelectorRequirement
	for _, r := range claim.Spec.Requirements.NodeSelector {
		if r.Key == corev1.LabelTopologyZone {
			requirements = append(requirements, r)
		}
	}
	for _, z := range p.settings.zones {
		if zoneAllowed(z.name, requirements) {
			return z, nil
		}
	}
	var wanted []string
	for _, r := range requirements {
		wanted = append(wanted, fmt.Sprintf("%s %s %s", r.Key, r.Operator, strings.Join(r.Values, ",")))
	}
	return zoneSettings{}, provider.NewTerminal(fmt.Errorf("nodeclaim %s requires %s, but the NodeProvider makes servers in zones %s only",
		claim.Name, strings.Join(wanted, " and "), strings.Join(p.settings.zoneNames(), ", ")))
}

func zoneAllowed(zone string, requirements []corev1.NodeSelectorRequirement) bool {
	for _, r := range requirements {
		in := slices.Contains(r.Values, zone)
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			if !in {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if in {
				return false
			}
		case corev1.NodeSelectorOpDoesNotExist:
			return false
		}
	}
	return true
}

// oldestOwned picks, among servers the tag filter returned, the oldest that
// really carries both tags (the filter is the API's; this is ours).
func oldestOwned(servers []cloudscale.Server, cluster, claim string) *cloudscale.Server {
	var found *cloudscale.Server
	for i := range servers {
		s := &servers[i]
		if s.Tags[v1alpha1.TagCluster] != cluster || s.Tags[v1alpha1.TagNodeClaim] != claim {
			continue
		}
		if found == nil || s.CreatedAt.Before(found.CreatedAt) {
			found = s
		}
	}
	return found
}

func (p *Provider) userData(ctx context.Context) (string, error) {
	ref := p.settings.userData
	if ref == nil {
		return "", nil
	}
	// Read on every create, so a changed Secret applies to the next server
	// without rebuilding the provider.
	data, err := p.secrets.ReadSecretKey(ctx, *ref)
	if err != nil {
		return "", fmt.Errorf("reading user data from Secret %s/%s key %q: %w", ref.Namespace, ref.Name, ref.Key, err)
	}
	return string(data), nil
}

// Delete removes a server after checking it carries this cluster's tag. A
// server that is already gone is success.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	id, err := parseProviderID(providerID)
	if err != nil {
		return err
	}
	release, err := acquire(ctx, p.deleteSlots)
	if err != nil {
		return err
	}
	defer release()

	server, err := p.get(ctx, id)
	if provider.IsNotFound(err) {
		p.invalidateServers()
		return nil
	}
	if err != nil {
		return err
	}
	if got := server.Tags[v1alpha1.TagCluster]; got != p.clusterName {
		return provider.NewTerminal(fmt.Errorf("refusing to delete cloudscale server %s (%s): %w: want %s=%s, it has %q",
			id, server.Name, ErrForeignServer, v1alpha1.TagCluster, p.clusterName, got))
	}
	err = p.retry(ctx, func(ctx context.Context) error {
		return p.do(ctx, func(ctx context.Context) error { return p.api.Servers.Delete(ctx, id) })
	})
	p.invalidateServers()
	if err != nil && !provider.IsNotFound(err) {
		return fmt.Errorf("deleting cloudscale server %s (%s): %w", id, server.Name, err)
	}
	logf.FromContext(ctx).Info("deleted cloudscale server", "server", id, "name", server.Name)
	if pool := server.Tags[v1alpha1.TagNodePool]; p.settings.maxServersPerGroup > 0 && pool != "" {
		p.groups.forget(id)
		p.pruneServerGroups(ctx, pool)
	}
	return nil
}

// Get returns one server, from the last List snapshot when it is fresh.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	id, err := parseProviderID(providerID)
	if err != nil {
		return nil, err
	}
	if s, ok := p.cachedServer(id); ok {
		return p.instance(&s), nil
	}
	server, err := p.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return p.instance(server), nil
}

func (p *Provider) get(ctx context.Context, id string) (*cloudscale.Server, error) {
	var server *cloudscale.Server
	err := p.retry(ctx, func(ctx context.Context) error {
		return p.do(ctx, func(ctx context.Context) error {
			var err error
			server, err = p.api.Servers.Get(ctx, id)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("getting cloudscale server %s: %w", id, err)
	}
	return server, nil
}

// List returns the servers tagged for this cluster. Callers within
// cfg.ListTTL share one API call, and concurrent callers share one request.
func (p *Provider) List(ctx context.Context) ([]*provider.Instance, error) {
	servers, err := p.listServers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*provider.Instance, 0, len(servers))
	for i := range servers {
		out = append(out, p.instance(&servers[i]))
	}
	return out, nil
}

func (p *Provider) listServers(ctx context.Context) ([]cloudscale.Server, error) {
	if servers, ok := p.cachedServers(); ok {
		return servers, nil
	}
	// The shared call must not fail for everyone because the caller that
	// started it gave up; each caller waits on its own context instead.
	shared := context.WithoutCancel(ctx)
	ch := p.calls.DoChan("list", func() (any, error) {
		ctx := shared
		// A call that finished between our look at the cache and this one
		// starting has filled it.
		if servers, ok := p.cachedServers(); ok {
			return servers, nil
		}
		p.mu.Lock()
		generation := p.servers.generation
		p.mu.Unlock()
		var servers []cloudscale.Server
		err := p.retry(ctx, func(ctx context.Context) error {
			return p.do(ctx, func(ctx context.Context) error {
				var err error
				servers, err = p.api.Servers.List(ctx, cloudscale.WithTagFilter(cloudscale.TagMap{v1alpha1.TagCluster: p.clusterName}))
				return err
			})
		})
		if err != nil {
			return nil, fmt.Errorf("listing cloudscale servers tagged %s=%s: %w", v1alpha1.TagCluster, p.clusterName, err)
		}
		// The filter is the API's; a server without our tag must never be
		// handed out as ours, so check again.
		owned := servers[:0]
		for _, s := range servers {
			if s.Tags[v1alpha1.TagCluster] == p.clusterName {
				owned = append(owned, s)
			}
		}
		p.storeServers(owned, generation)
		return owned, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return append([]cloudscale.Server(nil), r.Val.([]cloudscale.Server)...), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serverCache is the last List snapshot. Create and Delete bump the
// generation, so a List that was already under way when they changed the
// set of servers does not store a snapshot that misses the change.
type serverCache struct {
	fetched    time.Time
	byUUID     map[string]cloudscale.Server
	list       []cloudscale.Server
	generation int
}

func (p *Provider) cachedServers() ([]cloudscale.Server, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.servers.byUUID == nil || p.clock.Since(p.servers.fetched) >= p.cfg.ListTTL {
		return nil, false
	}
	return append([]cloudscale.Server(nil), p.servers.list...), true
}

func (p *Provider) cachedServer(id string) (cloudscale.Server, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.servers.byUUID == nil || p.clock.Since(p.servers.fetched) >= p.cfg.ListTTL {
		return cloudscale.Server{}, false
	}
	s, ok := p.servers.byUUID[id]
	return s, ok
}

func (p *Provider) storeServers(servers []cloudscale.Server, generation int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if generation != p.servers.generation {
		return
	}
	byUUID := make(map[string]cloudscale.Server, len(servers))
	for _, s := range servers {
		byUUID[s.UUID] = s
	}
	p.servers.fetched = p.clock.Now()
	p.servers.byUUID = byUUID
	p.servers.list = append([]cloudscale.Server(nil), servers...)
}

func (p *Provider) invalidateServers() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.servers.generation++
	p.servers.byUUID = nil
	p.servers.list = nil
}

// instance describes a server the way the controllers need it.
func (p *Provider) instance(s *cloudscale.Server) *provider.Instance {
	zone := s.Zone.Slug
	if zone == "" && len(p.settings.zones) == 1 {
		zone = p.settings.zones[0].name
	}
	labels := map[string]string{}
	if zone != "" {
		labels[corev1.LabelTopologyZone] = zone
	}
	if region := regionOf(zone); region != "" {
		labels[corev1.LabelTopologyRegion] = region
	}
	if s.Flavor.Slug != "" {
		labels[corev1.LabelInstanceTypeStable] = s.Flavor.Slug
	}
	capacity := corev1.ResourceList{}
	if s.Flavor.VCPUCount > 0 {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(int64(s.Flavor.VCPUCount), resource.DecimalSI)
	}
	if s.Flavor.MemoryGB > 0 {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(int64(s.Flavor.MemoryGB)<<30, resource.BinarySI)
	}
	tags := map[string]string{}
	for _, k := range []string{v1alpha1.TagCluster, v1alpha1.TagNodePool, v1alpha1.TagNodeClaim} {
		if v, ok := s.Tags[k]; ok {
			tags[k] = v
		}
	}
	return &provider.Instance{
		ProviderID: ProviderIDPrefix + s.UUID,
		Name:       s.Name,
		Capacity:   capacity,
		Labels:     labels,
		Tags:       tags,
		State:      instanceState(s.Status),
		CreatedAt:  s.CreatedAt,
	}
}

// instanceState maps the API's server status. "changing" is what a new
// server reports until it has booted (and a server being started or
// stopped); a stopped server of ours sleeps (a new one is never stopped:
// it changes until it runs); "errored" is left to the registration
// timeout to deal with.
func instanceState(status string) provider.InstanceState {
	switch status {
	case cloudscale.ServerRunning:
		return provider.InstanceRunning
	case cloudscale.ServerStopped:
		return provider.InstanceSuspended
	default:
		return provider.InstanceCreating
	}
}

var zonePattern = regexp.MustCompile(`^([a-z]+)[0-9]+$`)

// regionOf derives the region from a zone slug: cloudscale names zones
// after their region with a number (rma1 is in rma, lpg1 in lpg), which is
// also what the cloudscale CCM labels nodes with.
func regionOf(zone string) string {
	m := zonePattern.FindStringSubmatch(zone)
	if m == nil {
		return ""
	}
	return m[1]
}

// ProviderID returns the providerID of a server UUID.
func ProviderID(serverUUID string) string { return ProviderIDPrefix + serverUUID }

func parseProviderID(providerID string) (string, error) {
	id, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok {
		return "", provider.NewTerminal(fmt.Errorf("providerID %q is not a cloudscale one (%s<uuid>)", providerID, ProviderIDPrefix))
	}
	if _, err := uuid.Parse(id); err != nil {
		return "", provider.NewTerminal(fmt.Errorf("providerID %q does not end in a server UUID", providerID))
	}
	return id, nil
}

// acquire takes one of a bounded set of slots, so a burst of claims does
// not turn into a burst of API calls the API answers with 429.
func acquire(ctx context.Context, slots chan struct{}) (func(), error) {
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// claimLocks holds one lock per claim name while a Create of it runs.
type claimLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock waits until no other Create of claim runs, or ctx ends, and
// returns the unlock.
func (l *claimLocks) lock(ctx context.Context, claim string) (func(), error) {
	for {
		l.mu.Lock()
		if l.held == nil {
			l.held = map[string]chan struct{}{}
		}
		released, busy := l.held[claim]
		if !busy {
			released = make(chan struct{})
			l.held[claim] = released
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, claim)
				l.mu.Unlock()
				close(released)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-released:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
