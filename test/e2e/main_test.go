// Package e2e runs claimscale end to end on a local control plane: a real
// kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok,
// with the controllers in-process and the simulated provider, so pods really
// bind to the nodes claimscale makes and really become Running.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
)

// controllerNamespace is where the controller runs and the simulated
// provider keeps its machines.
const controllerNamespace = "claimscale-system"

// clusterName is the cluster tag of every machine the tests' controllers make.
const clusterName = "e2e"

var env *testenv.Environment

func TestMain(m *testing.M) {
	// Cluster API's CRDs and the test providers' (clusterapi_test.go).
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
	env, err = testenv.Start(testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, Logs: processLogs(), CRDPaths: capiCRDs})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// processLogs sends the control plane's output to stderr when
// E2E_PROCESS_LOGS is set, for debugging a failure.
func processLogs() *os.File {
	if os.Getenv("E2E_PROCESS_LOGS") != "" {
		return os.Stderr
	}
	return nil
}
