// Package providerexample is the reference provider plugin: the simulated
// provider served over the claimscale.provider.v1 protocol, so claimscale
// can run with its provider out of process. It manages power as the
// simulated provider does (Suspend, Resume, and power in its
// Capabilities), so its pools' machines may sleep.
// cmd/claimscale-provider-example is its command; the end-to-end tests run
// it in process.
package providerexample

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// Options configure the plugin.
type Options struct {
	// Listen is host:port (mutual TLS: CertFile, KeyFile and ClientCAFile
	// are required) or unix:///path (no TLS; for a sidecar).
	Listen string
	// CertFile and KeyFile are the plugin's server certificate, reloaded
	// when they change; ClientCAFile is the CA claimscale's client
	// certificate must chain to.
	CertFile, KeyFile, ClientCAFile string
	// ClusterName is the cluster whose machines the plugin makes.
	ClusterName string
	// Namespace keeps the simulated machines' records.
	Namespace string
	// Simulated configures the machines (boot and start delays, zones,
	// failures).
	Simulated v1alpha1.SimulatedSettings
	// RESTConfig reaches the cluster's API server: the simulated machines
	// are records there and their Nodes register there.
	RESTConfig *rest.Config
}

// Run listens where opts say and serves until ctx ends.
func Run(ctx context.Context, opts Options) error {
	listener, err := plugin.Listen(opts.Listen)
	if err != nil {
		return err
	}
	return Serve(ctx, listener, opts)
}

// Serve serves the plugin on listener until ctx ends. A TCP listener needs
// the TLS files: the protocol carries join tokens, so it is never served in
// the clear over a network.
func Serve(ctx context.Context, listener net.Listener, opts Options) error {
	defer listener.Close()
	if opts.ClusterName == "" || opts.Namespace == "" || opts.RESTConfig == nil {
		return errors.New("a cluster name, a namespace and a REST config are required")
	}
	var serverOptions []grpc.ServerOption
	if listener.Addr().Network() != "unix" {
		if opts.CertFile == "" || opts.KeyFile == "" || opts.ClientCAFile == "" {
			return fmt.Errorf("listening on %s needs --tls-cert, --tls-key and --client-ca: the plugin is served over mutual TLS only (use unix:///path for a sidecar)", listener.Addr())
		}
		config, watcher, err := plugin.ServerTLS(opts.CertFile, opts.KeyFile, opts.ClientCAFile)
		if err != nil {
			return err
		}
		go func() { _ = watcher.Start(ctx) }()
		serverOptions = append(serverOptions, grpc.Creds(credentials.NewTLS(config)))
	}
	kube, err := client.New(opts.RESTConfig, client.Options{Scheme: scheme.New()})
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	nodeProvider := &v1alpha1.NodeProvider{Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: opts.Simulated.DeepCopy()}}
	nodeProvider.Name = "example-plugin"
	machines, err := simulated.NewFactory(simulated.Config{Kube: kube, RESTConfig: opts.RESTConfig})(ctx, nodeProvider,
		provider.Options{ClusterName: opts.ClusterName, Namespace: opts.Namespace})
	if err != nil {
		return fmt.Errorf("building the simulated provider: %w", err)
	}
	server := grpc.NewServer(serverOptions...)
	// Power is answered from the simulated provider, a PowerManager: the
	// server forwards Suspend and Resume to it.
	plugin.NewServer(machines, opts.ClusterName, &pluginpb.CapabilitiesResponse{
		FlexibleSizes: true,
		Zones:         opts.Simulated.Zones,
		RetryInfo:     true,
		UserData:      true,
	}).Register(server)
	go func() {
		<-ctx.Done()
		server.GracefulStop()
	}()
	if err := server.Serve(listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serving on %s: %w", listener.Addr(), err)
	}
	return nil
}
