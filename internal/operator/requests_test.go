package operator

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/internal/testenv"
)

// Without their CRDs, ProvisioningRequests and CapacityBuffers are not
// served, and each says so in one log line; with them, both controllers
// are built.
// The package's only control plane: no other test of it needs one.
func TestTheAutoscalingKindsAreServedOnlyWhenTheirCRDsAreInstalled(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	var lines []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	build := func() (requests, buffers bool) {
		t.Helper()
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{Clock: clock.RealClock{}}
		r, err := provisioningRequests(ctx, mgr, opts, nil, nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := capacityBuffers(ctx, mgr, nil, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r != nil, b != nil
	}

	if requests, buffers := build(); requests || buffers {
		t.Fatalf("without the CRDs: requests served %t, buffers served %t", requests, buffers)
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "ProvisioningRequests are not served") || !strings.Contains(lines[1], "CapacityBuffers are not served") {
		t.Fatalf("want one line each, got %q", lines)
	}

	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "config", "crd", "autoscaling")}}); err != nil {
		t.Fatal(err)
	}
	if requests, buffers := build(); !requests || !buffers {
		t.Fatalf("with the CRDs: requests served %t, buffers served %t", requests, buffers)
	}
	if len(lines) != 2 {
		t.Errorf("served kinds logged %q", lines[2:])
	}
}
