package plugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/plugin/pluginpb"
)

// futurePlugin speaks another protocol version.
type futurePlugin struct {
	pluginpb.UnimplementedProviderServer
}

func (futurePlugin) Capabilities(context.Context, *pluginpb.CapabilitiesRequest) (*pluginpb.CapabilitiesResponse, error) {
	return &pluginpb.CapabilitiesResponse{ProtocolVersion: 2, Zones: []string{"a"}}, nil
}

// serve runs a gRPC server with the Provider service and, when health is
// set, a health service answering it for the Provider service.
func serve(t *testing.T, register func(*grpc.Server), healthStatus *healthpb.HealthCheckResponse_ServingStatus) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "caps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "p.sock")
	listener, err := Listen(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	register(server)
	if healthStatus != nil {
		h := health.NewServer()
		h.SetServingStatus(pluginpb.Provider_ServiceDesc.ServiceName, *healthStatus)
		healthpb.RegisterHealthServer(server, h)
	}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	client, err := NewClient(&v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "caps"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeGRPC, GRPC: &v1alpha1.GRPCSettings{Endpoint: endpoint}},
	}, provider.Options{ClusterName: "c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// A plugin's zones reach provisioning through Capabilities, once its health
// service says it serves; a plugin of another protocol version is refused
// for good, and one that says it is not serving is retried.
func TestZonesComeFromCapabilitiesAfterTheHealthCheck(t *testing.T) {
	ctx := t.Context()
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	withZones := func(g *grpc.Server) {
		NewServer(nil, "c", &pluginpb.CapabilitiesResponse{Zones: []string{"zone-a", "zone-b"}}).Register(g)
	}

	zones, err := serve(t, withZones, nil).Zones(ctx)
	if err != nil || !slices.Equal(zones, []string{"zone-a", "zone-b"}) {
		t.Fatalf("Zones = %v, %v; want the plugin's zone-a and zone-b", zones, err)
	}

	future := serve(t, func(g *grpc.Server) { pluginpb.RegisterProviderServer(g, futurePlugin{}) }, &serving)
	if _, err := future.Zones(ctx); !provider.IsTerminal(err) || !strings.Contains(err.Error(), "protocol version 2") {
		t.Fatalf("Zones of a plugin of protocol version 2 = %v, want a terminal error naming the version", err)
	}

	down := serve(t, func(g *grpc.Server) { pluginpb.RegisterProviderServer(g, futurePlugin{}) }, &notServing)
	if _, err := down.Zones(ctx); err == nil || provider.IsTerminal(err) || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Fatalf("Zones of a plugin that is not serving = %v, want a retryable error saying NOT_SERVING", err)
	}
}
