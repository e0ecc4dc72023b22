package disruption

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/testenv"
)

// One API server for the package (execution_test.go), and a client that
// reads through an informer cache with the controllers' indexes, as the
// manager's does: a round reads the cluster from the cache and waits for
// its own writes to show there.
var (
	env    *testenv.Environment
	cached client.Client
)

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	testenv.RunMain(m, testenv.Options{}, &env, func(ctx context.Context, env *testenv.Environment) (err error) {
		cached, err = env.CachedClient(ctx, index.Setup)
		return err
	})
}
