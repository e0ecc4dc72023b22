package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
)

// Server serves a provider.Provider as a claimscale.provider.v1 plugin for
// one cluster: a request for another cluster is refused, so a plugin never
// touches machines tagged for a cluster it was not set up for.
type Server struct {
	pluginpb.UnimplementedProviderServer
	provider     provider.Provider
	cluster      string
	capabilities *pluginpb.CapabilitiesResponse
}

// NewServer serves p, whose machines carry cluster's tag; capabilities is
// what Capabilities answers (protocol_version is set to 1).
func NewServer(p provider.Provider, cluster string, capabilities *pluginpb.CapabilitiesResponse) *Server {
	if capabilities == nil {
		capabilities = &pluginpb.CapabilitiesResponse{}
	}
	capabilities.ProtocolVersion = 1
	return &Server{provider: p, cluster: cluster, capabilities: capabilities}
}

// Register adds the Provider service and a health service that answers
// SERVING (overall and for the Provider service) to g.
func (s *Server) Register(g *grpc.Server) {
	pluginpb.RegisterProviderServer(g, s)
	healthServer := health.NewServer()
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthServer.SetServingStatus(pluginpb.Provider_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, healthServer)
}

func (s *Server) checkCluster(cluster string) error {
	if cluster != s.cluster {
		return status.Errorf(codes.FailedPrecondition, "this plugin serves cluster %q, not %q", s.cluster, cluster)
	}
	return nil
}

// Create makes (or finds) the claim's machine.
func (s *Server) Create(ctx context.Context, req *pluginpb.CreateRequest) (*pluginpb.CreateResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	claim, err := claimFromWire(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	instance, err := s.provider.Create(ctx, claim, provider.CreateOptions{UserData: req.GetUserData()})
	if err != nil {
		return nil, statusOf(err)
	}
	return &pluginpb.CreateResponse{Instance: instanceToWire(instance)}, nil
}

// Delete removes a machine.
func (s *Server) Delete(ctx context.Context, req *pluginpb.DeleteRequest) (*pluginpb.DeleteResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	err := s.provider.Delete(ctx, req.GetProviderId())
	if err != nil && !provider.IsNotFound(err) {
		return nil, statusOf(err)
	}
	return &pluginpb.DeleteResponse{}, nil
}

// Get answers one machine.
func (s *Server) Get(ctx context.Context, req *pluginpb.GetRequest) (*pluginpb.GetResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	instance, err := s.provider.Get(ctx, req.GetProviderId())
	if err != nil {
		return nil, statusOf(err)
	}
	return &pluginpb.GetResponse{Instance: instanceToWire(instance)}, nil
}

// List answers the cluster's machines.
func (s *Server) List(ctx context.Context, req *pluginpb.ListRequest) (*pluginpb.ListResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	instances, err := s.provider.List(ctx)
	if err != nil {
		return nil, statusOf(err)
	}
	answer := &pluginpb.ListResponse{}
	for _, i := range instances {
		answer.Instances = append(answer.Instances, instanceToWire(i))
	}
	return answer, nil
}

// Shapes answers the pool's shapes.
func (s *Server) Shapes(ctx context.Context, req *pluginpb.ShapesRequest) (*pluginpb.ShapesResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	pool, err := poolFromWire(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	shapes, err := s.provider.Shapes(ctx, pool)
	if err != nil {
		return nil, statusOf(err)
	}
	answer := &pluginpb.ShapesResponse{}
	for _, shape := range shapes {
		answer.Shapes = append(answer.Shapes, shapeToWire(shape))
	}
	return answer, nil
}

// Capabilities answers what the plugin can do; power is whether the
// provider served can manage power (provider.CanManagePower), whatever
// NewServer was given.
func (s *Server) Capabilities(ctx context.Context, _ *pluginpb.CapabilitiesRequest) (*pluginpb.CapabilitiesResponse, error) {
	answer := proto.CloneOf(s.capabilities)
	answer.Power = s.powerManager(ctx) != nil
	return answer, nil
}

// powerManager is the served provider's PowerManager, or nil when it
// cannot manage power.
func (s *Server) powerManager(ctx context.Context) provider.PowerManager {
	if s.provider == nil || !provider.CanManagePower(ctx, s.provider) {
		return nil
	}
	power, _ := s.provider.(provider.PowerManager)
	return power
}

// errNoPower is what Suspend and Resume answer for a provider that cannot
// manage power: UNIMPLEMENTED, as a plugin built before the calls existed
// answers.
func errNoPower(call string) error {
	return status.Errorf(codes.Unimplemented, "%s: the provider behind this plugin cannot manage power", call)
}

// Suspend stops a machine through the provider's PowerManager.
func (s *Server) Suspend(ctx context.Context, req *pluginpb.SuspendRequest) (*pluginpb.SuspendResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	power := s.powerManager(ctx)
	if power == nil {
		return nil, errNoPower("Suspend")
	}
	if err := power.Suspend(ctx, req.GetProviderId()); err != nil {
		return nil, statusOf(err)
	}
	return &pluginpb.SuspendResponse{}, nil
}

// Resume starts a stopped machine through the provider's PowerManager.
func (s *Server) Resume(ctx context.Context, req *pluginpb.ResumeRequest) (*pluginpb.ResumeResponse, error) {
	if err := s.checkCluster(req.GetCluster()); err != nil {
		return nil, err
	}
	power := s.powerManager(ctx)
	if power == nil {
		return nil, errNoPower("Resume")
	}
	if err := power.Resume(ctx, req.GetProviderId()); err != nil {
		return nil, statusOf(err)
	}
	return &pluginpb.ResumeResponse{}, nil
}

// Listen opens host:port or unix:///path; a stale socket file is replaced.
func Listen(endpoint string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
		listener, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", endpoint, err)
		}
		return listener, nil
	}
	listener, err := net.Listen("tcp", endpoint)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", endpoint, err)
	}
	return listener, nil
}

// ServerTLS is a plugin's side of mutual TLS 1.3: its certificate from
// certFile and keyFile, reloaded when they change (start the returned
// watcher), and client certificates required and verified against the CA
// bundle in clientCAFile.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, *certwatcher.CertWatcher, error) {
	watcher, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the server certificate: %w", err)
	}
	bundle, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, nil, fmt.Errorf("no CA certificate (PEM) in %s", clientCAFile)
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: watcher.GetCertificate,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
	}, watcher, nil
}
