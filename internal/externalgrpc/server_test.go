package externalgrpc

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/externalgrpc/testcerts"
)

func TestHealthServiceReportsServing(t *testing.T) {
	g := NewWithT(t)
	conn, err := dial(address, mustClientTLS(authority, "probe"))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	for _, service := range []string{"", protos.CloudProvider_ServiceDesc.ServiceName} {
		response, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(response.GetStatus()).To(Equal(healthpb.HealthCheckResponse_SERVING), "service %q", service)
	}
}

func TestClientsThatCannotProveWhoTheyAreAreRefused(t *testing.T) {
	stranger, err := testcerts.NewAuthority("another-ca")
	if err != nil {
		t.Fatal(err)
	}
	strangerPair, err := stranger.Client("cluster-autoscaler")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, err := tls.X509KeyPair(strangerPair.CertPEM, strangerPair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ourPair, err := authority.Client("cluster-autoscaler")
	if err != nil {
		t.Fatal(err)
	}
	ourCert, err := tls.X509KeyPair(ourPair.CertPEM, ourPair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		config  *tls.Config
		refused bool
	}{
		{"a client with a certificate from our CA is answered", &tls.Config{RootCAs: authority.Pool(), Certificates: []tls.Certificate{ourCert}}, false},
		{"a client without a certificate is refused", &tls.Config{RootCAs: authority.Pool()}, true},
		{"a client with a certificate from another CA is refused", &tls.Config{RootCAs: authority.Pool(),
			// Presented whatever CAs the server names, as a misconfigured
			// client would.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerCert, nil },
		}, true},
		{"a client that offers at most TLS 1.2 is refused", &tls.Config{RootCAs: authority.Pool(), Certificates: []tls.Certificate{ourCert}, MaxVersion: tls.VersionTLS12}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			conn, err := dial(address, credentials.NewTLS(tc.config))
			g.Expect(err).NotTo(HaveOccurred())
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = protos.NewCloudProviderClient(conn).NodeGroups(ctx, &protos.NodeGroupsRequest{})
			if !tc.refused {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(status.Code(err)).To(Equal(codes.Unavailable), "refused at the handshake: %v", err)
			t.Log(err)
		})
	}
	t.Run("a plaintext client is refused", func(t *testing.T) {
		g := NewWithT(t)
		conn, err := dial(address, insecure.NewCredentials())
		g.Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = protos.NewCloudProviderClient(conn).NodeGroups(ctx, &protos.NodeGroupsRequest{})
		g.Expect(status.Code(err)).To(Equal(codes.Unavailable), "%v", err)
	})
}

// panickingReader fails the way a bug in a handler would.
type panickingReader struct{ client.Client }

func (panickingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("a bug in a handler")
}

func TestAPanicInAHandlerBecomesInternalAndTheServerLivesOn(t *testing.T) {
	g := NewWithT(t)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	server, err := New(Options{Listener: listener, Insecure: true},
		Dependencies{Kube: panickingReader{env.Client}, Providers: resolver, Logger: log.Log})
	g.Expect(err).NotTo(HaveOccurred())
	runServer(t, server)
	conn, err := dial(server.Addr().String(), insecure.NewCredentials())
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	ca := protos.NewCloudProviderClient(conn)

	handled := func(code codes.Code) float64 {
		return counterValue(g, "grpc_server_handled_total", map[string]string{"grpc_method": "NodeGroups", "grpc_code": code.String()})
	}
	before := handled(codes.Internal)
	_, err = ca.NodeGroups(context.Background(), &protos.NodeGroupsRequest{})
	g.Expect(status.Code(err)).To(Equal(codes.Internal), "%v", err)
	g.Expect(status.Convert(err).Message()).NotTo(ContainSubstring("a bug in a handler"), "the panic's detail stays in the log")
	g.Expect(handled(codes.Internal)-before).To(BeEquivalentTo(1), "the metrics count the panic as Internal")

	_, err = ca.GPULabel(context.Background(), &protos.GPULabelRequest{})
	g.Expect(err).NotTo(HaveOccurred(), "the server still answers")
}

func TestAPlaintextServerAnswersPlaintextClients(t *testing.T) {
	g := NewWithT(t)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	server, err := New(Options{Listener: listener, Insecure: true, GPULabel: "gpu"},
		Dependencies{Kube: cached, Providers: resolver, Logger: log.Log})
	g.Expect(err).NotTo(HaveOccurred())
	runServer(t, server)
	conn, err := dial(server.Addr().String(), insecure.NewCredentials())
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	label, err := protos.NewCloudProviderClient(conn).GPULabel(context.Background(), &protos.GPULabelRequest{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(label.GetLabel()).To(Equal("gpu"))
}

func TestMutualTLSNeedsAllThreeFiles(t *testing.T) {
	g := NewWithT(t)
	_, err := New(Options{Listener: nil, CertFile: "tls.crt", KeyFile: "tls.key"}, Dependencies{Kube: cached, Providers: resolver, Logger: log.Log})
	g.Expect(err).To(MatchError(ContainSubstring("--grpc-client-ca")))
}

// A renewed server certificate and a new client CA apply to the next
// connection, without a restart.
func TestCertificatesAreReloadedWhenTheirFilesChange(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	first, err := testcerts.NewAuthority("first-ca")
	g.Expect(err).NotTo(HaveOccurred())
	pair, err := first.Server("127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	certFile, keyFile, caFile, err := first.WriteFiles(dir, pair)
	g.Expect(err).NotTo(HaveOccurred())
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	server, err := New(Options{Listener: listener, CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile},
		Dependencies{Kube: cached, Providers: resolver, Logger: log.Log})
	g.Expect(err).NotTo(HaveOccurred())
	runServer(t, server)
	call := func(ca *testcerts.Authority) error {
		conn, err := dial(server.Addr().String(), mustClientTLS(ca, "cluster-autoscaler"))
		g.Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = protos.NewCloudProviderClient(conn).Refresh(ctx, &protos.RefreshRequest{})
		return err
	}
	g.Expect(call(first)).To(Succeed())

	second, err := testcerts.NewAuthority("second-ca")
	g.Expect(err).NotTo(HaveOccurred())
	pair, err = second.Server("127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	// Written beside and renamed into place, as a kubelet updates a
	// mounted Secret, so no reader sees half a file.
	staging := filepath.Join(dir, "staging")
	g.Expect(os.Mkdir(staging, 0o700)).To(Succeed())
	_, _, _, err = second.WriteFiles(staging, pair)
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range []string{"tls.key", "tls.crt", "ca.crt"} {
		g.Expect(os.Rename(filepath.Join(staging, name), filepath.Join(dir, name))).To(Succeed())
	}
	g.Eventually(func() error { return call(second) }, 30*time.Second, 100*time.Millisecond).Should(Succeed(),
		"the new certificate is served and the new CA trusted")
	g.Expect(call(first)).NotTo(Succeed(), "the old CA is trusted no more")
}

// runServer serves until the test ends.
func runServer(t *testing.T, server *Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
}

// counterValue sums a counter of controller-runtime's registry over the
// series whose labels include labels.
func counterValue(g *WithT, name string, labels map[string]string) float64 {
	families, err := crmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, family := range families {
		if family.GetName() != name {
			continue
		}
	series:
		for _, metric := range family.GetMetric() {
			have := map[string]string{}
			for _, pair := range metric.GetLabel() {
				have[pair.GetName()] = pair.GetValue()
			}
			for key, value := range labels {
				if have[key] != value {
					continue series
				}
			}
			total += metric.GetCounter().GetValue()
		}
	}
	return total
}
