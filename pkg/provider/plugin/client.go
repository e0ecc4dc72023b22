package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
)

// Defaults of spec.grpc (the CRD sets them too).
const (
	DefaultCallTimeout = 30 * time.Second
	DefaultRetries     = 2
)

// Keys of the credentials Secret: a kubernetes.io/tls Secret.
const (
	KeyClientCert = "tls.crt"
	KeyClientKey  = "tls.key"
	KeyCA         = "ca.crt"
)

// Client is the provider of a grpc NodeProvider: every call goes to the
// plugin.
type Client struct {
	conn         *grpc.ClientConn
	rpc          pluginpb.ProviderClient
	cluster      string
	nodeProvider string
	endpoint     string
	timeout      time.Duration
	// power is what the plugin last said about managing power.
	power powerSupport
}

var (
	_ provider.Provider        = (*Client)(nil)
	_ provider.Zoner           = (*Client)(nil)
	_ provider.PowerManager    = (*Client)(nil)
	_ provider.PowerCapability = (*Client)(nil)
)

// New is the provider.Factory for type grpc. It does not call the plugin:
// a plugin that is down makes calls fail (and the NodeProvider
// Unreachable), not the build.
func New(_ context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
	return NewClient(np, opts)
}

// NewClient is New returning the concrete type.
func NewClient(np *v1alpha1.NodeProvider, opts provider.Options) (*Client, error) {
	settings := np.Spec.GRPC
	switch {
	case settings == nil:
		return nil, provider.NewTerminal(fmt.Errorf("nodeprovider %s has no spec.grpc", np.Name))
	case opts.ClusterName == "":
		return nil, provider.NewTerminal(fmt.Errorf("no cluster name: it goes into every machine's %s tag", v1alpha1.TagCluster))
	}
	timeout := DefaultCallTimeout
	if settings.CallTimeout != nil && settings.CallTimeout.Duration > 0 {
		timeout = settings.CallTimeout.Duration
	}
	retries := int32(DefaultRetries)
	if settings.Retries != nil {
		retries = *settings.Retries
	}
	var transport credentials.TransportCredentials
	if strings.HasPrefix(settings.Endpoint, "unix://") {
		transport = insecure.NewCredentials()
	} else {
		config, err := clientTLS(np, opts)
		if err != nil {
			return nil, provider.NewTerminal(err)
		}
		transport = credentials.NewTLS(config)
	}
	conn, err := grpc.NewClient(settings.Endpoint,
		grpc.WithTransportCredentials(transport),
		grpc.WithDefaultServiceConfig(serviceConfig(retries)),
		// A plugin that restarts (a sidecar, a rollout) is found again
		// within seconds, not after gRPC's default two-minute backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, provider.NewTerminal(fmt.Errorf("nodeprovider %s: endpoint %q: %w", np.Name, settings.Endpoint, err))
	}
	return &Client{
		conn: conn, rpc: pluginpb.NewProviderClient(conn),
		cluster: opts.ClusterName, nodeProvider: np.Name, endpoint: settings.Endpoint, timeout: timeout,
	}, nil
}

// serviceConfig retries UNAVAILABLE, which every call may: Create is
// idempotent by claim and Delete of a machine already gone is success.
func serviceConfig(retries int32) string {
	if retries <= 0 {
		return `{}`
	}
	return fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "claimscale.provider.v1.Provider"}],
  "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.2s", "maxBackoff": "2s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`, retries+1)
}

// clientTLS is mutual TLS 1.3 with the credentials Secret's certificate.
// The CA comes from spec.grpc.caSecretRef, read at each new connection so a
// rotated CA needs no rebuild, or from the credentials Secret's ca.crt (a
// change to that Secret rebuilds the provider).
func clientTLS(np *v1alpha1.NodeProvider, opts provider.Options) (*tls.Config, error) {
	settings := np.Spec.GRPC
	certPEM, keyPEM := opts.Credentials[KeyClientCert], opts.Credentials[KeyClientKey]
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, fmt.Errorf("nodeprovider %s: the credentials Secret needs %s and %s (the client certificate of mutual TLS)", np.Name, KeyClientCert, KeyClientKey)
	}
	certificate, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("nodeprovider %s: the credentials Secret's %s and %s are not a certificate and its key", np.Name, KeyClientCert, KeyClientKey)
	}
	serverName := settings.ServerName
	if serverName == "" {
		host, _, err := net.SplitHostPort(settings.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("nodeprovider %s: endpoint %q is not host:port: %w", np.Name, settings.Endpoint, err)
		}
		serverName = host
	}
	roots := func() (*x509.CertPool, error) {
		bundle := opts.Credentials[KeyCA]
		source := "the credentials Secret's " + KeyCA
		if ref := settings.CASecretRef; ref != nil {
			if opts.Secrets == nil {
				return nil, errors.New("no Secret reader to read spec.grpc.caSecretRef with")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if bundle, err = opts.Secrets.ReadSecretKey(ctx, *ref); err != nil {
				return nil, fmt.Errorf("reading the CA of spec.grpc.caSecretRef: %w", err)
			}
			source = fmt.Sprintf("Secret %s/%s key %s", ref.Namespace, ref.Name, ref.Key)
		}
		pool := x509.NewCertPool()
		if len(bundle) == 0 || !pool.AppendCertsFromPEM(bundle) {
			return nil, fmt.Errorf("no CA certificate (PEM) in %s", source)
		}
		return pool, nil
	}
	if settings.CASecretRef == nil {
		// Checked now, so a missing CA is a clear InvalidConfiguration
		// rather than a failing handshake.
		if _, err := roots(); err != nil {
			return nil, fmt.Errorf("nodeprovider %s: %w", np.Name, err)
		}
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{certificate},
		ServerName:   serverName,
		// The chain is verified in VerifyConnection against the CA as it
		// is now, which the standard verification cannot reload.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyConnection: func(state tls.ConnectionState) error {
			if len(state.PeerCertificates) == 0 {
				return errors.New("the plugin presented no certificate")
			}
			pool, err := roots()
			if err != nil {
				return err
			}
			intermediates := x509.NewCertPool()
			for _, c := range state.PeerCertificates[1:] {
				intermediates.AddCert(c)
			}
			_, err = state.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: pool, Intermediates: intermediates, DNSName: serverName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			return err
		},
	}, nil
}

// Close releases the connection; the resolver calls it when it replaces
// the provider.
func (c *Client) Close() error { return c.conn.Close() }

// call runs one call under the call timeout and turns its error into the
// provider error of its kind.
func call[T any](ctx context.Context, c *Client, what string, do func(ctx context.Context) (T, error)) (T, error) {
	return callWith(ctx, c, what, errorOf, do)
}

// callWith is call with the error mapping given.
func callWith[T any](ctx context.Context, c *Client, what string, errorOf func(string, error, bool) error, do func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	answer, err := do(ctx)
	if err != nil {
		var zero T
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("%s: %w", what, ctx.Err())
		}
		return zero, errorOf(what, err, c.unreachable(ctx))
	}
	return answer, nil
}

// unreachable says whether a failed call failed for want of the plugin:
// no connection, or none answered in time.
func (c *Client) unreachable(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	return c.conn.GetState() != connectivity.Ready
}

// Create asks the plugin for the claim's machine.
func (c *Client) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	what := fmt.Sprintf("creating the machine of claim %s", claim.Name)
	answer, err := call(ctx, c, what, func(ctx context.Context) (*pluginpb.CreateResponse, error) {
		return c.rpc.Create(ctx, createRequest(c.cluster, c.nodeProvider, claim, opts))
	})
	if err != nil {
		return nil, err
	}
	instance, err := instanceFromWire(answer.GetInstance())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return instance, nil
}

// Delete asks the plugin to remove a machine.
func (c *Client) Delete(ctx context.Context, providerID string) error {
	_, err := call(ctx, c, "deleting machine "+providerID, func(ctx context.Context) (*pluginpb.DeleteResponse, error) {
		return c.rpc.Delete(ctx, &pluginpb.DeleteRequest{Cluster: c.cluster, ProviderId: providerID})
	})
	return err
}

// Get asks the plugin for one machine.
func (c *Client) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	what := "getting machine " + providerID
	answer, err := call(ctx, c, what, func(ctx context.Context) (*pluginpb.GetResponse, error) {
		return c.rpc.Get(ctx, &pluginpb.GetRequest{Cluster: c.cluster, ProviderId: providerID})
	})
	if err != nil {
		return nil, err
	}
	instance, err := instanceFromWire(answer.GetInstance())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return instance, nil
}

// List asks the plugin for this cluster's machines.
func (c *Client) List(ctx context.Context) ([]*provider.Instance, error) {
	what := "listing machines"
	answer, err := call(ctx, c, what, func(ctx context.Context) (*pluginpb.ListResponse, error) {
		return c.rpc.List(ctx, &pluginpb.ListRequest{Cluster: c.cluster})
	})
	if err != nil {
		return nil, err
	}
	instances := make([]*provider.Instance, 0, len(answer.GetInstances()))
	for _, wire := range answer.GetInstances() {
		instance, err := instanceFromWire(wire)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		instances = append(instances, instance)
	}
	return instances, nil
}

// Shapes asks the plugin for the pool's shapes.
func (c *Client) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	what := "resolving the shapes of pool " + pool.Name
	answer, err := call(ctx, c, what, func(ctx context.Context) (*pluginpb.ShapesResponse, error) {
		return c.rpc.Shapes(ctx, shapesRequest(c.cluster, c.nodeProvider, pool))
	})
	if err != nil {
		return nil, err
	}
	shapes := make([]provider.Shape, 0, len(answer.GetShapes()))
	for _, wire := range answer.GetShapes() {
		shape, err := shapeFromWire(wire)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		shapes = append(shapes, shape)
	}
	return shapes, nil
}

// ProtocolVersion is the version of claimscale.provider.v1 this client
// speaks; a plugin that answers another in Capabilities is refused.
const ProtocolVersion = 1

// Zones are the zones the plugin makes machines in, from its Capabilities
// (provider.Zoner), once its health service says it serves. A plugin that
// speaks another protocol version is refused for good.
func (c *Client) Zones(ctx context.Context) ([]string, error) {
	if err := c.Healthy(ctx); err != nil {
		return nil, err
	}
	capabilities, err := c.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	if v := capabilities.GetProtocolVersion(); v != ProtocolVersion {
		return nil, provider.NewTerminal(fmt.Errorf("the plugin at %s speaks protocol version %d of claimscale.provider.v1, claimscale speaks %d: upgrade the plugin or claimscale", c.endpoint, v, ProtocolVersion))
	}
	return capabilities.GetZones(), nil
}

// Healthy asks the plugin's gRPC health service about the Provider
// service. A plugin that serves no health service is taken at its word
// (the health service is recommended, not required); one that says it is
// not serving is retried.
func (c *Client) Healthy(ctx context.Context) error {
	var unimplemented bool
	answer, err := call(ctx, c, "asking the plugin's health", func(ctx context.Context) (*healthpb.HealthCheckResponse, error) {
		answer, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: pluginpb.Provider_ServiceDesc.ServiceName})
		unimplemented = status.Code(err) == codes.Unimplemented || status.Code(err) == codes.NotFound
		return answer, err
	})
	switch {
	case unimplemented:
		return nil
	case err != nil:
		return err
	case answer.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return provider.NewRetryable(fmt.Errorf("the plugin at %s says its Provider service is %s", c.endpoint, answer.GetStatus()), 0)
	}
	return nil
}

// Capabilities asks the plugin what it can do.
func (c *Client) Capabilities(ctx context.Context) (*pluginpb.CapabilitiesResponse, error) {
	return call(ctx, c, "asking the plugin's capabilities", func(ctx context.Context) (*pluginpb.CapabilitiesResponse, error) {
		return c.rpc.Capabilities(ctx, &pluginpb.CapabilitiesRequest{})
	})
}
