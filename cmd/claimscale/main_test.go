package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/internal/operator"
)

// apiServerWithoutCRDs answers discovery as a kube-apiserver does for an
// API group nobody installed: 404 for /apis/claimscale.io/v1alpha1.
func apiServerWithoutCRDs(t *testing.T) string {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`))
	}))
	t.Cleanup(server.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	content := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + server.URL + "}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// A controller that cannot start says why before it says anything else:
// no "starting" line, no informer timing out minutes later.
func TestStartupFailuresAreReportedBeforeAnythingStarts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	t.Setenv("KUBECONFIG", apiServerWithoutCRDs(t))
	options := func() operator.Options {
		return operator.Options{Mode: operator.ModeNative, ClusterName: "c", Namespace: "claimscale-system", Registry: operator.ProductionRegistry()}
	}
	expander := func() operator.Options {
		o := options()
		o.Mode, o.ExternalGRPC.BindAddress, o.ExternalGRPC.ExpanderBindAddress = operator.ModeExternalGRPC, "127.0.0.1:0", taken.Addr().String()
		return o
	}
	for _, tc := range []struct {
		name      string
		opts      operator.Options
		metrics   string
		profiling string
		want      string
	}{
		{"port in use", options(), taken.Addr().String(), "", "--metrics-bind-address=" + taken.Addr().String()},
		{"profiling port in use", options(), "0", taken.Addr().String(), "--profiling-bind-address=" + taken.Addr().String()},
		{"expander port in use", expander(), "0", "", "--grpc-expander-bind-address=" + taken.Addr().String()},
		{"missing CRDs", options(), "0", "", "does not serve claimscale.io/v1alpha1: install claimscale's CRDs"},
		{"bad mode", func() operator.Options { o := options(); o.Mode = "sometimes"; return o }(), "0", "", `--mode must be native or externalgrpc, not "sometimes"`},
		{"no cluster name", func() operator.Options { o := options(); o.ClusterName = ""; return o }(), "0", "", "--cluster-name is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
			err := run(logr.Logger(logger), tc.opts, metricsserver.Options{BindAddress: tc.metrics}, "0", tc.profiling, false, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error saying %q", err, tc.want)
			}
			if len(lines) > 0 {
				t.Fatalf("logged before the failure: %v", lines)
			}
		})
	}
}
