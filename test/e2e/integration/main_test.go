// Package integration runs claimscale end to end with what is around it:
// the real providers' APIs (Proxmox, cloudscale), provider plugins,
// Cluster API, pools isolated from each other's failing providers, KEDA's
// external scaler, nodes that join (bootstrap tokens, the hollow kubelet), the
// chart and kustomize, metrics and Prometheus, cluster-autoscaler's
// externalgrpc, and the kubectl plugin (why, simulate, get) with users'
// roles. One control plane for the package (../doc.go says which package
// takes what).
package integration

import (
	"testing"

	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// env is this package's control plane.
var env *testenv.Environment

func TestMain(m *testing.M) { harness.Main(m, &env) }
