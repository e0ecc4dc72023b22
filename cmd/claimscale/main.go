// Command claimscale is the node autoscaler's controller: flags and manager
// wiring only; internal/operator assembles the controllers.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/internal/controllers/provisioningrequest"
	"github.com/claimscale/claimscale/internal/externalgrpc"
	"github.com/claimscale/claimscale/internal/memlimit"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/internal/version"
	"github.com/claimscale/claimscale/pkg/provider"
)

func main() {
	var (
		mode                string
		clusterName         string
		namespace           string
		metricsAddress      string
		healthAddress       string
		profilingAddress    string
		leaderElect         bool
		leaderElectionNS    string
		batchIdle, batchMax time.Duration
		gcInterval, gcGrace time.Duration
		bookingTime         time.Duration
		printVersion        bool
		secureMetrics       bool
		simulatedProvider   bool
		simulatedKubelets   bool
		dryRun              bool
		grpcOptions         externalgrpc.Options
		bootstrapOptions    operator.BootstrapOptions
		redfishMedia        string
	)
	flag.StringVar(&mode, "mode", string(operator.ModeNative), "native: claimscale provisions and disrupts; externalgrpc: serve cluster-autoscaler's externalgrpc protocol and let it decide")
	flag.StringVar(&clusterName, "cluster-name", "", "name of this cluster, tagged on every machine; machines without it are never touched (required)")
	flag.StringVar(&namespace, "namespace", envOr("POD_NAMESPACE", "claimscale-system"), "namespace the controller runs in")
	flag.StringVar(&metricsAddress, "metrics-bind-address", ":8443", "address of the metrics endpoint (0 disables it)")
	flag.BoolVar(&secureMetrics, "metrics-secure", true, "serve metrics over HTTPS, to callers the API server authenticates and authorizes for GET /metrics; false serves plain HTTP to anyone who reaches the address (bind it to localhost then)")
	flag.BoolVar(&simulatedProvider, "simulated-provider", false, "offer the simulated provider (NodeProviders of type simulated), for demos and tests: it creates Node objects and keeps machines in ConfigMaps")
	flag.BoolVar(&simulatedKubelets, "simulated-kubelets", true, "with --simulated-provider: register the simulated machines' Nodes from this process, playing their kubelets; false leaves that to another process running the simulated registrar, as real kubelets run on their machines (make scale does, to measure the controller alone)")
	flag.StringVar(&healthAddress, "health-probe-bind-address", ":8081", "address of the health and readiness probes")
	flag.StringVar(&profilingAddress, "profiling-bind-address", "", "address of Go's pprof endpoints (/debug/pprof), to profile the controller (off when empty; bind it to localhost)")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader so only one replica acts")
	flag.StringVar(&leaderElectionNS, "leader-election-namespace", "", "namespace of the leader election lease (default: --namespace)")
	flag.DurationVar(&batchIdle, "batch-idle-duration", time.Second, "a provisioning batch closes after this long without a new pending pod")
	flag.DurationVar(&batchMax, "batch-max-duration", 10*time.Second, "a provisioning batch closes after this long at the most")
	flag.DurationVar(&gcInterval, "gc-interval", 30*time.Second, "how often garbage collection looks for orphaned machines and claims")
	flag.DurationVar(&gcGrace, "gc-grace-period", 2*time.Minute, "how old a machine without a claim must be before it is deleted")
	flag.StringVar(&grpcOptions.BindAddress, "grpc-bind-address", externalgrpc.DefaultBindAddress, "externalgrpc mode: address of the gRPC server cluster-autoscaler calls")
	flag.StringVar(&grpcOptions.CertFile, "grpc-cert", "", "externalgrpc mode: the server's TLS certificate (PEM), reloaded when it changes")
	flag.StringVar(&grpcOptions.KeyFile, "grpc-key", "", "externalgrpc mode: the server certificate's key (PEM)")
	flag.StringVar(&grpcOptions.ClientCAFile, "grpc-client-ca", "", "externalgrpc mode: the CA that client certificates must be signed by (PEM), reloaded when it changes")
	flag.BoolVar(&grpcOptions.Insecure, "grpc-insecure", false, "externalgrpc mode: serve plaintext without client certificates (only on a network nobody else reaches)")
	flag.StringVar(&grpcOptions.GPULabel, "gpu-label", "", "externalgrpc mode: the label GPU nodes carry, told to cluster-autoscaler (default claimscale.io/gpu, which the nodes of shapes with GPUs carry)")
	flag.StringVar(&grpcOptions.ExpanderBindAddress, "grpc-expander-bind-address", "", "externalgrpc mode: also serve cluster-autoscaler's gRPC expander (--expander=grpc) at this address, over TLS without client certificates (off when empty)")
	flag.StringVar(&grpcOptions.ExpanderCertFile, "grpc-expander-cert", "", "externalgrpc mode: the expander's TLS certificate (PEM), reloaded when it changes; --grpc-cert when empty")
	flag.StringVar(&grpcOptions.ExpanderKeyFile, "grpc-expander-key", "", "externalgrpc mode: the expander certificate's key (PEM); --grpc-key when empty")
	flag.StringVar(&bootstrapOptions.APIServerEndpoint, "bootstrap-api-server-endpoint", "", "host:port new machines join, for pools with a bootstrap section, when neither the pool nor kube-public/cluster-info says")
	flag.StringVar(&bootstrapOptions.CAFile, "bootstrap-ca-file", "", "cluster CA (PEM) new machines trust, when kube-public/cluster-info is missing (default: the CA the controller trusts)")
	flag.StringVar(&redfishMedia, "redfish-media-bind-address", "", "address of the media server that gives BMCs each claim's seed image, for redfish servers that boot with userData VirtualMedia (off when empty; NodeProviders' spec.redfish.mediaURL must reach it)")
	flag.BoolVar(&dryRun, "dry-run", false, "native mode: decide and record as usual (kubectl claimscale why), with events and metrics marked dry-run, but create, delete, cordon and evict nothing; to run beside another autoscaler and compare")
	flag.DurationVar(&bookingTime, "provisioning-request-booking-time", provisioningrequest.DefaultBookingTime, "how long capacity provisioned for a ProvisioningRequest is kept for its pods before the booking expires")
	flag.BoolVar(&printVersion, "version", false, "print the version and exit")
	zapOptions := zap.Options{}
	zapOptions.BindFlags(flag.CommandLine)
	flag.Parse()

	if printVersion {
		fmt.Println(version.String())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOptions)))
	logger := ctrl.Log.WithName("claimscale")
	softLimit, err := memlimit.FromEnv(os.Getenv)
	if err != nil {
		logger.Error(err, "exiting")
		os.Exit(1)
	}
	if softLimit > 0 {
		logger.Info("Go memory limit set from the container's", "bytes", softLimit)
	}
	// With the simulated provider the registry is built once the manager
	// is (run), since that provider keeps its machines through its client.
	var registry *provider.Registry
	if !simulatedProvider {
		registry = operator.ProductionRegistry()
	}
	metrics := operator.MetricsOptions(metricsAddress, secureMetrics)
	if err := run(logger, operator.Options{
		Mode: operator.Mode(mode), ClusterName: clusterName, Namespace: namespace,
		BatchIdle: batchIdle, BatchMax: batchMax, GCInterval: gcInterval, GCGracePeriod: gcGrace,
		Registry: registry, ExternalGRPC: grpcOptions, Bootstrap: bootstrapOptions,
		DryRun: dryRun, SimulatedKubeletsElsewhere: !simulatedKubelets, RedfishMediaBindAddress: redfishMedia,
		Requests: operator.RequestOptions{BookingTime: bookingTime},
	}, metrics, healthAddress, profilingAddress, leaderElect, leaderElectionNS); err != nil {
		logger.Error(err, "exiting")
		os.Exit(1)
	}
}

// run checks what can be checked before anything starts (flags, ports, the
// API server and the CRDs), so a startup failure is the first line printed,
// then runs the manager.
func run(logger logr.Logger, opts operator.Options, metrics metricsserver.Options, healthAddress, profilingAddress string, leaderElect bool, leaderElectionNS string) error {
	if opts.ClusterName == "" {
		return fmt.Errorf("--cluster-name is required: it marks the machines this controller may touch")
	}
	if opts.Mode != operator.ModeNative && opts.Mode != operator.ModeExternalGRPC {
		return fmt.Errorf("--mode must be %s or %s, not %q", operator.ModeNative, operator.ModeExternalGRPC, opts.Mode)
	}
	if leaderElectionNS == "" {
		leaderElectionNS = opts.Namespace
	}
	listeners := [][2]string{{"metrics-bind-address", metrics.BindAddress}, {"health-probe-bind-address", healthAddress}, {"profiling-bind-address", profilingAddress}, {"redfish-media-bind-address", opts.RedfishMediaBindAddress}}
	if opts.Mode == operator.ModeExternalGRPC {
		listeners = append(listeners, [2]string{"grpc-bind-address", opts.ExternalGRPC.BindAddress}, [2]string{"grpc-expander-bind-address", opts.ExternalGRPC.ExpanderBindAddress})
	}
	for _, listener := range listeners {
		if err := operator.CheckListen(listener[0], listener[1]); err != nil {
			return err
		}
	}
	config, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("finding the API server: %w", err)
	}
	if err := operator.CheckCRDs(config); err != nil {
		return err
	}
	operator.LogStart(logger, version.String(), opts)
	ctx := ctrl.SetupSignalHandler()
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                  scheme.New(),
		Cache:                   operator.CacheOptions(opts.Namespace),
		Metrics:                 metrics,
		HealthProbeBindAddress:  healthAddress,
		PprofBindAddress:        profilingAddress,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "claimscale-" + opts.ClusterName,
		LeaderElectionNamespace: leaderElectionNS,
		// A new leader must not act on a stale view; release on shutdown so
		// a rolling update hands over at once.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if opts.Registry == nil {
		opts.Registry = operator.DefaultRegistry(mgr.GetClient())
	}
	if _, err := operator.Setup(ctx, mgr, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func envOr(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
