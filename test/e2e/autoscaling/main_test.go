// Package autoscaling runs, end to end, what claimscale's controllers do
// with pods and nodes on the simulated provider: scale up and down,
// booting, disruption and consolidation, budgets, warm capacity, repair,
// bad input and scale. One
// control plane for the package (../doc.go says which package takes what).
package autoscaling

import (
	"testing"

	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// env is this package's control plane.
var env *testenv.Environment

func TestMain(m *testing.M) { harness.Main(m, &env) }
