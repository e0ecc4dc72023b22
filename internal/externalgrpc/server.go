package externalgrpc

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/poolusability"
)

// DefaultBindAddress is where cluster-autoscaler's cloud-config points by
// default.
const DefaultBindAddress = ":8086"

// How long a shutdown waits for calls in flight before cutting them off.
const shutdownGrace = 5 * time.Second

// Options configure the server; the flags of --mode=externalgrpc.
type Options struct {
	// BindAddress is host:port to listen on (DefaultBindAddress if empty).
	BindAddress string
	// Listener, when set, is served instead of listening on BindAddress.
	Listener net.Listener
	// CertFile and KeyFile are the server's certificate and key (PEM);
	// ClientCAFile holds the CA client certificates must chain to. All
	// three are re-read when they change.
	CertFile, KeyFile, ClientCAFile string
	// Insecure serves plaintext without client authentication. Only for a
	// network nobody else can reach.
	Insecure bool
	// GPULabel is the label of GPU nodes, answered to GPULabel;
	// v1alpha1.LabelGPU when empty.
	GPULabel string

	// ExpanderBindAddress, when set, serves cluster-autoscaler's gRPC
	// expander there (--expander=grpc), on a listener of its own:
	// cluster-autoscaler's expander client verifies the server but
	// presents no certificate, so this listener demands none. It only
	// reads.
	ExpanderBindAddress string
	// ExpanderListener, when set, is served instead of listening on
	// ExpanderBindAddress.
	ExpanderListener net.Listener
	// ExpanderCertFile and ExpanderKeyFile are the expander's certificate
	// and key (PEM), re-read when they change; CertFile and KeyFile when
	// empty. cluster-autoscaler refuses a plaintext expander.
	ExpanderCertFile, ExpanderKeyFile string
}

// Dependencies are what the server reads and writes through.
type Dependencies struct {
	// Kube reads through the manager's cache, with the indexes of the
	// index package, and writes to the API server.
	Kube client.Client
	// Providers resolve pools' shapes.
	Providers ProviderResolver
	// Pools resolves and keeps pools' shapes, shared with the NodePool
	// status; nil builds one from Providers, Kube and Clock.
	Pools  *poolusability.Pools
	Logger logr.Logger
	// Clock for cache lifetimes; nil is the real clock.
	Clock clock.PassiveClock
	// Writes waits for the cache to show the server's own writes; nil
	// looks at the cache again until it does.
	Writes *clusterstate.Writes
}

// Server serves the CloudProvider service and gRPC health checks. It is a
// manager Runnable that runs on every replica: it only reads the cache and
// writes claims, which the leader's controllers act on.
type Server struct {
	grpc     *grpc.Server
	health   *health.Server
	listener net.Listener
	tls      *serverTLS
	logger   logr.Logger

	// expander is the gRPC expander's server, nil when not served.
	expander         *grpc.Server
	expanderListener net.Listener
	expanderCerts    *certwatcher.CertWatcher
}

// New builds the server and opens its listener, so a taken port or a
// missing certificate fails at startup.
func New(opts Options, deps Dependencies) (*Server, error) {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	logger := deps.Logger.WithName("externalgrpc")
	s := &Server{health: health.NewServer(), logger: logger}

	serverOptions := []grpc.ServerOption{
		interceptors(logger),
		// cluster-autoscaler keeps one connection open; let its keepalive
		// pings through instead of answering them with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if opts.Insecure {
		logger.Info("WARNING: serving the externalgrpc protocol in plaintext without client authentication (--grpc-insecure); anyone who reaches the port can add and delete nodes")
		serverOptions = append(serverOptions, grpc.Creds(insecure.NewCredentials()))
	} else {
		serverTLS, err := newServerTLS(opts.CertFile, opts.KeyFile, opts.ClientCAFile, logger)
		if err != nil {
			return nil, err
		}
		s.tls = serverTLS
		serverOptions = append(serverOptions, grpc.Creds(credentials.NewTLS(serverTLS.config())))
	}
	s.grpc = grpc.NewServer(serverOptions...)
	if deps.Pools == nil {
		deps.Pools = &poolusability.Pools{Providers: deps.Providers, Kube: deps.Kube, Clock: deps.Clock}
	}
	shapes := newShapeCache(deps.Pools, deps.Clock)
	protos.RegisterCloudProviderServer(s.grpc, &cloudProvider{
		kube:     deps.Kube,
		shapes:   shapes,
		gpuLabel: cmp.Or(opts.GPULabel, v1alpha1.LabelGPU),
		writes:   deps.Writes,
	})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	metrics.GRPCServer.InitializeMetrics(s.grpc)
	// Not serving until Start: the cache may not be synced before.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(protos.CloudProvider_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	s.listener = opts.Listener
	if s.listener == nil {
		address := opts.BindAddress
		if address == "" {
			address = DefaultBindAddress
		}
		listener, err := net.Listen("tcp", address)
		if err != nil {
			return nil, fmt.Errorf("listening for externalgrpc on %s: %w", address, err)
		}
		s.listener = listener
	}
	if opts.ExpanderBindAddress != "" || opts.ExpanderListener != nil {
		if err := s.newExpander(opts, &expander{kube: deps.Kube, shapes: shapes}); err != nil {
			_ = s.listener.Close()
			return nil, err
		}
	}
	return s, nil
}

// newExpander sets up the expander's server: TLS with the server's
// certificate only, TLS 1.3 at the least, the same interceptors and the
// health service.
func (s *Server) newExpander(opts Options, ranker *expander) error {
	certFile, keyFile := opts.ExpanderCertFile, opts.ExpanderKeyFile
	if certFile == "" && keyFile == "" {
		certFile, keyFile = opts.CertFile, opts.KeyFile
	}
	if certFile == "" || keyFile == "" {
		return fmt.Errorf("the gRPC expander needs a server certificate and key (--grpc-expander-cert and --grpc-expander-key, or --grpc-cert and --grpc-key): cluster-autoscaler refuses a plaintext expander")
	}
	certs, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("loading the gRPC expander's certificate: %w", err)
	}
	s.expanderCerts = certs
	s.expander = grpc.NewServer(
		interceptors(s.logger.WithName("expander")),
		grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: certs.GetCertificate})),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	protos.RegisterExpanderServer(s.expander, ranker)
	healthpb.RegisterHealthServer(s.expander, s.health)
	metrics.GRPCServer.InitializeMetrics(s.expander)
	s.expanderListener = opts.ExpanderListener
	if s.expanderListener == nil {
		listener, err := net.Listen("tcp", opts.ExpanderBindAddress)
		if err != nil {
			return fmt.Errorf("listening for the gRPC expander on %s: %w", opts.ExpanderBindAddress, err)
		}
		s.expanderListener = listener
	}
	return nil
}

// ExpanderAddr is where the expander listens, nil when it is not served.
func (s *Server) ExpanderAddr() net.Addr {
	if s.expanderListener == nil {
		return nil
	}
	return s.expanderListener.Addr()
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// NeedLeaderElection is false: every replica serves, so the Service
// reaches whichever is up.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then stops gracefully. The manager starts
// it once the caches are synced.
func (s *Server) Start(ctx context.Context) error {
	if s.tls != nil {
		go func() {
			if err := s.tls.certs.Start(ctx); err != nil {
				s.logger.Error(err, "watching the server certificate; serving the one loaded")
			}
		}()
	}
	servers := []*grpc.Server{s.grpc}
	served := make(chan error, 2)
	go func() { served <- s.grpc.Serve(s.listener) }()
	if s.expander != nil {
		servers = append(servers, s.expander)
		go func() {
			if err := s.expanderCerts.Start(ctx); err != nil {
				s.logger.Error(err, "watching the expander's certificate; serving the one loaded")
			}
		}()
		go func() { served <- s.expander.Serve(s.expanderListener) }()
		s.logger.Info("serving cluster-autoscaler's gRPC expander", "address", s.expanderListener.Addr().String())
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(protos.CloudProvider_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.logger.Info("serving cluster-autoscaler's externalgrpc protocol", "address", s.listener.Addr().String(), "mutualTLS", s.tls != nil)

	select {
	case err := <-served:
		for _, server := range servers {
			server.Stop()
		}
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serving externalgrpc: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		for _, server := range servers {
			server.GracefulStop()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownGrace):
		for _, server := range servers {
			server.Stop()
		}
	}
	return nil
}
