// Package operator assembles claimscale: the provider registry, the shared
// caches and indexes, and the controllers a mode runs, on one
// controller-runtime manager.
package operator

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/capacitybackoff"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/controllers/csrapproval"
	"github.com/claimscale/claimscale/internal/controllers/disruption"
	"github.com/claimscale/claimscale/internal/controllers/garbagecollection"
	"github.com/claimscale/claimscale/internal/controllers/nodeclaim"
	"github.com/claimscale/claimscale/internal/controllers/nodepool"
	"github.com/claimscale/claimscale/internal/controllers/nodeprovider"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/controllers/provisioningrequest"
	"github.com/claimscale/claimscale/internal/controllers/repair"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/externalgrpc"
	"github.com/claimscale/claimscale/internal/externalscaler"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/poolusability"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/warmcapacity"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// Mode chooses who decides when nodes come and go.
type Mode string

const (
	// ModeNative: claimscale provisions and disrupts by itself.
	ModeNative Mode = "native"
	// ModeExternalGRPC: a cluster-autoscaler decides through the
	// externalgrpc shim; provisioning and disruption are off.
	ModeExternalGRPC Mode = "externalgrpc"
)

// Options configure the controllers.
type Options struct {
	Mode        Mode
	ClusterName string
	// Namespace the controller runs in; the simulated provider keeps its
	// machines there.
	Namespace string
	// BatchIdle and BatchMax are provisioning's batch windows.
	BatchIdle time.Duration
	BatchMax  time.Duration
	// GCInterval and GCGracePeriod tune garbage collection.
	GCInterval    time.Duration
	GCGracePeriod time.Duration
	// Registry maps provider types to implementations.
	Registry *provider.Registry
	// Simulated configures the simulated provider's registrar.
	Simulated simulated.Config
	// SimulatedKubeletsElsewhere leaves the simulated machines' Nodes to a
	// registrar in another process (simulated.NewRegistrar): it plays
	// their kubelets, which on real machines run outside the controller,
	// and their certificate handshakes are not the controller's memory
	// and CPU. make scale runs it so.
	SimulatedKubeletsElsewhere bool
	// Clock for every timeout and window; nil is the real clock.
	Clock clock.WithTicker
	// CapacityClock times capacity backoffs only; nil is Clock. End-to-end
	// tests step it past a backoff while everything else runs in real time.
	CapacityClock clock.Clock
	// WarmCapacityClock decides which capacity schedules are active; nil
	// is Clock. End-to-end tests step it into and out of a window.
	WarmCapacityClock clock.PassiveClock
	// ExternalScalerInterval is how often pools' external scalers are
	// asked for headroom (default externalscaler.DefaultInterval).
	ExternalScalerInterval time.Duration
	// ExternalGRPC configures the externalgrpc server of ModeExternalGRPC.
	ExternalGRPC externalgrpc.Options
	// RedfishMediaBindAddress is where the media server listens that
	// gives BMCs each claim's seed image (redfish.MediaHandler); empty
	// serves none.
	RedfishMediaBindAddress string
	// Bootstrap is the fallback API endpoint and CA for pools that render
	// user data.
	Bootstrap BootstrapOptions
	// DryRun decides and records as in native mode, but creates, deletes,
	// cordons and evicts nothing; events and metrics say dry-run.
	DryRun bool
	// Requests tune how ProvisioningRequests are served.
	Requests RequestOptions
}

// RequestOptions tune the serving of ProvisioningRequests.
type RequestOptions struct {
	// BookingTime is how long provisioned capacity is kept for a
	// request's pods (default provisioningrequest.DefaultBookingTime).
	BookingTime time.Duration
	// Recheck is how soon a request that waits is looked at again
	// (default provisioningrequest.DefaultRecheck).
	Recheck time.Duration
	// Clock times the bookings; nil is Options.Clock. End-to-end tests
	// step it past a booking's end.
	Clock clock.PassiveClock
}

// BootstrapOptions are where joining machines find the API server when
// kube-public/cluster-info does not say.
type BootstrapOptions struct {
	// APIServerEndpoint is host:port.
	APIServerEndpoint string
	// CAFile is the cluster CA (PEM); empty is the CA the controller itself
	// trusts the API server with.
	CAFile string
}

// Operator is the assembled controllers, for callers that need a piece
// (the externalgrpc shim uses the resolver).
type Operator struct {
	Providers *providerresolver.Resolver
	Capacity  *capacitybackoff.Backoff
	// ExternalGRPC is the externalgrpc server in ModeExternalGRPC, else nil.
	ExternalGRPC *externalgrpc.Server
	// Decisions are the latest provisioning and disruption decisions,
	// served under decisions.Path on the metrics server.
	Decisions *decisions.Store
}

// Setup registers the indexes and the controllers of the mode on mgr.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) (*Operator, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Registry == nil {
		return nil, fmt.Errorf("no provider registry")
	}
	if opts.DryRun && opts.Mode == ModeExternalGRPC {
		return nil, fmt.Errorf("--dry-run is for the native mode: in externalgrpc mode cluster-autoscaler decides")
	}
	if err := index.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	if err := registerInClusterProviders(mgr, opts); err != nil {
		return nil, err
	}
	resolver := &providerresolver.Resolver{
		Kube:         mgr.GetClient(),
		SecretReader: mgr.GetAPIReader(),
		Registry:     opts.Registry,
		ClusterName:  opts.ClusterName,
		Namespace:    opts.Namespace,
		Clock:        opts.Clock,
	}
	if opts.CapacityClock == nil {
		opts.CapacityClock = opts.Clock
	}
	capacityBackoff := capacitybackoff.NewBackoff(opts.CapacityClock)
	if opts.WarmCapacityClock == nil {
		opts.WarmCapacityClock = opts.Clock
	}
	warm := &warmcapacity.Source{Clock: opts.WarmCapacityClock}
	batcher := provisioning.NewBatcher(opts.BatchIdle, opts.BatchMax, opts.Clock)
	op := &Operator{Providers: resolver, Capacity: capacityBackoff, Decisions: decisions.NewStore(opts.DryRun)}
	if err := mgr.AddMetricsServerExtraHandler(decisions.Path, decisions.Handler(op.Decisions)); err != nil {
		return nil, fmt.Errorf("serving decisions: %w", err)
	}
	templates := &poolusability.TemplateCheck{Kube: mgr.GetClient()}
	broadcaster, err := startEventBroadcaster(ctx, mgr)
	if err != nil {
		return nil, err
	}
	recorder := func(name string) events.EventRecorder {
		return newEventRecorder(broadcaster.NewRecorder(mgr.GetScheme(), name), mgr.GetScheme())
	}
	// One answer per pool and provider state for provisioning, the
	// NodePool status and the externalgrpc shim; the backoff it keeps is
	// provisioning's, so are its events.
	pools := &poolusability.Pools{Providers: resolver, Kube: mgr.GetClient(), Clock: opts.Clock, Recorder: recorder(provisioning.Name)}

	bootstrapper, err := newBootstrapper(mgr, opts)
	if err != nil {
		return nil, err
	}
	podLatency, err := watchPodLatency(ctx, mgr, opts)
	if err != nil {
		return nil, err
	}
	// The controller's own writes to claims, until the cache shows them.
	writes := clusterstate.NewWrites(opts.Clock)
	if err := writes.Watch(ctx, mgr.GetCache()); err != nil {
		return nil, err
	}
	// Provisioning plans pods on claims; registration nominates them.
	nominations := clusterstate.NewNominations(opts.Clock)
	setups := []interface{ SetupWithManager(ctrl.Manager) error }{
		&nodeclaim.Controller{
			Kube: mgr.GetClient(), Providers: resolver, Capacity: capacityBackoff,
			Recorder: recorder(nodeclaim.Name), Clock: opts.Clock, Writes: writes, Nominations: nominations,
			KeepFailedClaims: opts.Mode == ModeExternalGRPC,
			Bootstrap:        bootstrapper,
		},
		&nodepool.Controller{Kube: mgr.GetClient(), Providers: resolver, Pools: pools, Templates: templates, Recorder: recorder(nodepool.Name)},
		// The claims' tokens are approved by nothing else.
		&csrapproval.Controller{Kube: mgr.GetClient(), Tokens: bootstrapper.Tokens, Recorder: recorder(csrapproval.Name), Clock: opts.Clock},
		&nodeprovider.Controller{Kube: mgr.GetClient(), Providers: resolver, Recorder: recorder(nodeprovider.Name)},
	}
	// What disruption waits for when it has nothing to do.
	changes := clusterstate.New()
	if opts.Mode != ModeExternalGRPC {
		if err := changes.Watch(ctx, mgr.GetCache()); err != nil {
			return nil, err
		}
		objects, err := clusterstate.NewObjects(ctx, mgr.GetCache())
		if err != nil {
			return nil, err
		}
		departures := clusterstate.NewDepartures(opts.Clock)
		if err := departures.Watch(ctx, mgr.GetCache()); err != nil {
			return nil, err
		}
		provisioner := &provisioning.Provisioner{
			Kube: mgr.GetClient(), Objects: objects, Providers: resolver, Capacity: capacityBackoff,
			Recorder: recorder(provisioning.Name), Clock: opts.Clock, Templates: templates, Pools: pools,
			WarmCapacity: warm, Decisions: op.Decisions, DryRun: opts.DryRun,
			PodLatency: podLatency, Writes: writes, Nominations: nominations,
		}
		// Room other objects ask to keep is simulated by provisioning and
		// disruption alike, and either decides again when it changes.
		roomChanged := func() {
			batcher.Trigger()
			changes.Changed()
		}
		requests, err := provisioningRequests(ctx, mgr, opts, provisioner, objects, writes, recorder(provisioningrequest.Name), roomChanged)
		if err != nil {
			return nil, err
		}
		if requests != nil {
			warm.Reservations = append(warm.Reservations, requests.Bookings)
			setups = append(setups, requests)
		}
		buffers, err := capacityBuffers(ctx, mgr, provisioning.Resolve(mgr.GetClient(), resolver, capacityBackoff), opts, roomChanged)
		if err != nil {
			return nil, err
		}
		if buffers != nil {
			warm.Reservations = append(warm.Reservations, buffers.Buffers)
			setups = append(setups, buffers)
		}
		setups = append(setups,
			&provisioning.Controller{Provisioner: provisioner, Batcher: batcher},
			&disruption.Controller{
				Kube: mgr.GetClient(), Providers: resolver, Pools: provisioning.Resolve(mgr.GetClient(), resolver, capacityBackoff),
				Recorder: recorder(disruption.Name), Clock: opts.Clock,
				WarmCapacity: warm, Decisions: op.Decisions, DryRun: opts.DryRun,
				Changes: changes, Objects: objects, Departures: departures, Writes: writes,
			},
			&repair.Controller{Kube: mgr.GetClient(), Recorder: recorder(repair.Name), Clock: opts.Clock, Writes: writes},
		)
	}
	if opts.DryRun {
		// A dry run acts on nothing: no machine is launched for a claim,
		// repaired or collected.
		setups = slices.DeleteFunc(setups, func(s interface{ SetupWithManager(ctrl.Manager) error }) bool {
			switch s.(type) {
			case *nodeclaim.Controller, *repair.Controller, *csrapproval.Controller:
				return true
			}
			return false
		})
	}
	for _, s := range setups {
		if err := s.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up %T: %w", s, err)
		}
	}
	if opts.Mode != ModeExternalGRPC {
		scalers := &externalscaler.Poller{
			Kube: mgr.GetClient(), Clock: opts.Clock, Interval: opts.ExternalScalerInterval,
			// A new answer is acted on at once, not at the periodic round,
			// by both provisioning and disruption.
			Changed: func() {
				batcher.Trigger()
				changes.Changed()
			},
		}
		warm.External = scalers
		if err := mgr.Add(scalers); err != nil {
			return nil, err
		}
	}
	gc := &garbagecollection.Controller{
		Kube: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Providers: resolver,
		Recorder: recorder(garbagecollection.Name), Clock: opts.Clock,
		Interval: opts.GCInterval, GracePeriod: opts.GCGracePeriod,
		Tokens: bootstrapper.Tokens,
	}
	if !opts.DryRun {
		if err := mgr.Add(gc); err != nil {
			return nil, err
		}
	}
	if opts.Mode == ModeExternalGRPC {
		server, err := externalgrpc.New(opts.ExternalGRPC, externalgrpc.Dependencies{
			Kube: mgr.GetClient(), Providers: resolver, Pools: pools,
			Logger: mgr.GetLogger(), Clock: opts.Clock, Writes: writes,
		})
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(server); err != nil {
			return nil, err
		}
		op.ExternalGRPC = server
	}
	// Simulated machines "boot" by this registrar registering their Nodes;
	// it stands in for the machines themselves, so it runs on every replica.
	// Without the simulated provider it does not run: it would need rights
	// to create Nodes and write ConfigMaps that nothing else needs.
	if slices.Contains(opts.Registry.Types(), v1alpha1.ProviderTypeSimulated) && !opts.SimulatedKubeletsElsewhere {
		if opts.Simulated.RESTConfig == nil {
			opts.Simulated.RESTConfig = mgr.GetConfig()
		}
		if err := mgr.Add(simulated.NewRegistrar(mgr.GetClient(), opts.Namespace, opts.ClusterName, opts.Simulated)); err != nil {
			return nil, err
		}
	}
	return op, nil
}

// newBootstrapper builds the user-data renderer and token keeper. Secrets
// and kube-public are read uncached: the controller keeps no informer of
// kube-system's Secrets.
func newBootstrapper(mgr manager.Manager, opts Options) (*bootstrap.Bootstrapper, error) {
	caPEM, err := bootstrapCA(mgr.GetConfig(), opts.Bootstrap.CAFile)
	if err != nil {
		return nil, err
	}
	return &bootstrap.Bootstrapper{
		Tokens: &bootstrap.Tokens{Kube: mgr.GetClient(), Reader: mgr.GetAPIReader(), Clock: opts.Clock},
		Cluster: &bootstrap.ClusterSource{
			Reader: mgr.GetAPIReader(), Endpoint: opts.Bootstrap.APIServerEndpoint, CAPEM: caPEM,
		},
		Reader: mgr.GetAPIReader(), Namespace: opts.Namespace,
	}, nil
}

// bootstrapCA reads the CA joining machines are told to trust: the file
// given, else the one the controller trusts the API server with (in a pod,
// the service account's ca.crt: the cluster CA).
func bootstrapCA(cfg *rest.Config, caFile string) ([]byte, error) {
	switch {
	case caFile != "":
	case len(cfg.CAData) > 0:
		return cfg.CAData, nil
	case cfg.CAFile != "":
		caFile = cfg.CAFile
	default:
		return nil, nil
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the bootstrap CA: %w", err)
	}
	return ca, nil
}

// registerInClusterProviders adds the providers that keep state in the
// cluster claimscale runs in, unless the caller chose its own: clusterapi
// (Machines, read back right after they are made) and redfish (its
// leases, which must be read as written: two calls must never lease one
// server). Both go through an uncached client; the manager's is only
// known here.
func registerInClusterProviders(mgr manager.Manager, opts Options) error {
	registry := opts.Registry
	kube, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("building the in-cluster providers' client: %w", err)
	}
	if opts.RedfishMediaBindAddress != "" {
		if err := mgr.Add(&mediaServer{address: opts.RedfishMediaBindAddress, handler: redfish.MediaHandler(kube, opts.Namespace)}); err != nil {
			return fmt.Errorf("adding the redfish media server: %w", err)
		}
	}
	if !slices.Contains(registry.Types(), v1alpha1.ProviderTypeRedfish) {
		registry.Register(v1alpha1.ProviderTypeRedfish, redfish.NewFactory(redfish.Config{Kube: kube, MediaServing: opts.RedfishMediaBindAddress != ""}))
	}
	if slices.Contains(registry.Types(), v1alpha1.ProviderTypeClusterAPI) {
		return nil
	}
	registry.Register(v1alpha1.ProviderTypeClusterAPI, clusterapi.NewFactory(clusterapi.Config{Kube: kube}))
	return nil
}
