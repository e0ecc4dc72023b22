package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// kubeletsPollInterval is how often the machines are looked at: the
// simulated provider's own registrar polls as often while machines boot.
const kubeletsPollInterval = 250 * time.Millisecond

// runKubelets plays the simulated machines' kubelets from this process
// until ctx ends: it registers the Node of every machine whose boot delay
// has passed, joining with the machine's bootstrap token and client
// certificate as the registrar inside the controller would. The controller
// runs with --simulated-kubelets=false, so what it measures is claimscale:
// real kubelets run on their machines, and at a thousand nodes their TLS
// handshakes alone were tens of megabytes allocated in the controller.
//
// It polls instead of running simulated.Registrar.Start, which waits up to
// five seconds between passes when no machine is booting unless a Create
// in its own process wakes it, and no Create happens in this one.
func runKubelets(ctx context.Context, config *rest.Config, scheme *runtime.Scheme, namespace, cluster string) error {
	mgr, err := manager.New(config, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The controller's own: machines and their user data where it
		// keeps them.
		Cache: operator.CacheOptions(namespace),
	})
	if err != nil {
		return fmt.Errorf("building the simulated kubelets' manager: %w", err)
	}
	registrar := simulated.NewRegistrar(mgr.GetClient(), namespace, cluster, simulated.Config{RESTConfig: config})
	// Runnables start once the caches have synced.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		ticker := time.NewTicker(kubeletsPollInterval)
		defer ticker.Stop()
		var lastError string
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
			}
			// Errors are expected while the control plane is saturated;
			// the next pass retries. Each new one is told once.
			if err := registrar.RegisterDue(ctx); err != nil && ctx.Err() == nil && err.Error() != lastError {
				lastError = err.Error()
				logf("simulated kubelets: %v", err)
			}
		}
	}))
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
