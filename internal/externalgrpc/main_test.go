package externalgrpc

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/externalgrpc/testcerts"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// Shared by the tests: one API server, one manager whose cache the server
// reads, and the server on 127.0.0.1 behind mutual TLS.
var (
	env *testenv.Environment
	// cached reads through the server's cache, to wait for it in setups.
	cached client.Client
	// authority signs the server's certificate and the clients'.
	authority *testcerts.Authority
	// address of the shared server.
	address string
	// expanderAddress is where the shared server's gRPC expander listens,
	// with the certificate caFile verifies.
	expanderAddress, caFile string
	// resolver resolves providers the way the server does.
	resolver *providerresolver.Resolver
)

func TestMain(m *testing.M) {
	// The server's logs go to stderr with TEST_LOGS set, for debugging.
	if os.Getenv("TEST_LOGS") != "" {
		log.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	} else {
		log.SetLogger(logr.Discard())
	}
	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	code := 1
	if err := startServer(ctx, stopped); err != nil {
		fmt.Fprintln(os.Stderr, err)
		close(stopped)
	} else {
		code = m.Run()
	}
	cancel()
	<-stopped
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// startServer runs a manager with the indexes and the server, and waits
// until the server answers its health check.
func startServer(ctx context.Context, stopped chan<- struct{}) error {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	if err := index.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	cached = mgr.GetClient()
	registry := provider.NewRegistry()
	registry.Register(v1alpha1.ProviderTypeSimulated, simulated.NewFactory(simulated.Config{Kube: mgr.GetClient(), ExternalRegistrar: true}))
	resolver = &providerresolver.Resolver{
		Kube: mgr.GetClient(), SecretReader: mgr.GetAPIReader(),
		Registry: registry, ClusterName: "test", Namespace: "default",
	}
	if authority, err = testcerts.NewAuthority("test-ca"); err != nil {
		return err
	}
	serverPair, err := authority.Server("127.0.0.1")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "externalgrpc-")
	if err != nil {
		return err
	}
	certFile, keyFile, ca, err := authority.WriteFiles(dir, serverPair)
	if err != nil {
		return err
	}
	caFile = ca
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	expanderListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server, err := New(Options{
		Listener: listener, CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, GPULabel: "example.com/gpu",
		ExpanderListener: expanderListener,
	},
		Dependencies{Kube: mgr.GetClient(), Providers: resolver, Logger: log.Log})
	if err != nil {
		return err
	}
	if err := mgr.Add(server); err != nil {
		return err
	}
	address = server.Addr().String()
	expanderAddress = server.ExpanderAddr().String()
	go func() {
		defer close(stopped)
		defer os.RemoveAll(dir)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	conn, err := dial(address, mustClientTLS(authority, "cluster-autoscaler"))
	if err != nil {
		return err
	}
	defer conn.Close()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		response, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && response.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
	})
}

// dial connects to a server with TLS settings as cluster-autoscaler's.
func dial(address string, config credentials.TransportCredentials) (*grpc.ClientConn, error) {
	return grpc.NewClient(address, grpc.WithTransportCredentials(config))
}

func mustClientTLS(ca *testcerts.Authority, commonName string) credentials.TransportCredentials {
	pair, err := ca.Client(commonName)
	if err != nil {
		panic(err)
	}
	config, err := ca.ClientTLS(pair)
	if err != nil {
		panic(err)
	}
	return credentials.NewTLS(config)
}

// newClient is a CloudProvider client with a valid client certificate.
func newClient(t testing.TB) protos.CloudProviderClient {
	t.Helper()
	conn, err := dial(address, mustClientTLS(authority, "cluster-autoscaler"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return protos.NewCloudProviderClient(conn)
}
