package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
)

// ControllerNamespace is where the controller runs and the simulated
// provider keeps its machines.
const ControllerNamespace = "claimscale-system"

// ClusterName is the cluster tag of every machine the tests' controllers make.
const ClusterName = "e2e"

// env is the control plane of the test binary this package is linked
// into: each scenario package has its own, started by Main.
var env *testenv.Environment

// Main is the whole TestMain of a scenario package: it starts the package's
// control plane (kube-apiserver, etcd, kube-controller-manager,
// kube-scheduler and kwok on loopback ports chosen now, with Cluster API's
// CRDs and the test providers'), stores it in *started for the package's
// tests, makes the controller's namespace, runs the tests, stops
// everything and exits with the tests' code.
func Main(m *testing.M, started **testenv.Environment) {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	capiCRDs, err := clusterapitest.CRDPaths(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The autoscaling SIG's kinds claimscale serves (ProvisioningRequest,
	// CapacityBuffer) are installed as a cluster with Kueue or
	// cluster-autoscaler has them.
	crds := append(capiCRDs, filepath.Join(root, "config", "crd", "autoscaling"))
	env, err = testenv.Start(testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, Logs: ProcessLogs(), CRDPaths: crds})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*started = env
	code := 1
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// ProcessLogs sends the control plane's output to stderr when
// E2E_PROCESS_LOGS is set, for debugging a failure.
func ProcessLogs() *os.File {
	if os.Getenv("E2E_PROCESS_LOGS") != "" {
		return os.Stderr
	}
	return nil
}
