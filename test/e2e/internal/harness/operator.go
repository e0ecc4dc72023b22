package harness

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/internal/externalgrpc"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/pkg/provider"
)

// OperatorOptions tune the in-process controllers per test.
type OperatorOptions struct {
	Registry      *provider.Registry
	GCGracePeriod time.Duration
	// Config reaches the API server; nil is the administrator's.
	Config *rest.Config
	// LeaderElection on, with its lease in the controller's namespace.
	LeaderElection bool
	// Mode is native unless set; ExternalGRPC configures the server of
	// the externalgrpc mode.
	Mode         operator.Mode
	ExternalGRPC externalgrpc.Options
	// CapacityClock times capacity backoffs; nil is the real clock.
	CapacityClock clock.Clock
	// WarmCapacityClock decides which capacity schedules are active; nil
	// is the real clock.
	WarmCapacityClock clock.PassiveClock
	// MetricsAddress serves metrics and decisions there over HTTPS to
	// authorized callers, as deployed; empty serves none.
	MetricsAddress string
	// DryRun decides without acting.
	DryRun bool
	// SimulatedKubeletsElsewhere leaves the simulated machines' Nodes to
	// a registrar the test runs, as make scale's controller does.
	SimulatedKubeletsElsewhere bool
	// RedfishMediaBindAddress runs the redfish media server there, as
	// --redfish-media-bind-address does; empty runs none.
	RedfishMediaBindAddress string
	// RequestClock times the ProvisioningRequests' bookings; nil is the
	// real clock.
	RequestClock clock.PassiveClock
}

// StartOperator runs claimscale's controllers against the test control
// plane until the returned stop function is called (or the test ends).
func StartOperator(t *testing.T, opts OperatorOptions) (stop func()) {
	t.Helper()
	if opts.Registry == nil {
		opts.Registry = operator.DefaultRegistry(env.Client)
	}
	if opts.GCGracePeriod == 0 {
		opts.GCGracePeriod = time.Minute
	}
	if opts.Config == nil {
		opts.Config = env.Config
	}
	if opts.Mode == "" {
		opts.Mode = operator.ModeNative
	}
	metrics := metricsserver.Options{BindAddress: "0"}
	if opts.MetricsAddress != "" {
		metrics = operator.MetricsOptions(opts.MetricsAddress, true)
	}
	mgr, err := ctrl.NewManager(opts.Config, ctrl.Options{
		Scheme:                  scheme.New(),
		Cache:                   operator.CacheOptions(ControllerNamespace),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "claimscale-" + ClusterName,
		LeaderElectionNamespace: ControllerNamespace,
		// A lease renewed late on a busy machine (two control planes and
		// the compiler on two cores) would stop the test's controller
		// mid-scenario; the next test's takes a released lease at once.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 Ptr(60 * time.Second),
		RenewDeadline:                 Ptr(45 * time.Second),
		Metrics:                       metrics,
		HealthProbeBindAddress:        "0",
		// Each test starts its own manager in this process.
		Controller: config.Controller{SkipNameValidation: Ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := operator.Setup(ctx, mgr, operator.Options{
		Mode: opts.Mode, ClusterName: ClusterName, Namespace: ControllerNamespace,
		BatchIdle: 500 * time.Millisecond, BatchMax: 3 * time.Second,
		GCInterval: time.Second, GCGracePeriod: opts.GCGracePeriod,
		Registry: opts.Registry, ExternalGRPC: opts.ExternalGRPC,
		CapacityClock: opts.CapacityClock, WarmCapacityClock: opts.WarmCapacityClock,
		ExternalScalerInterval:     250 * time.Millisecond,
		DryRun:                     opts.DryRun,
		SimulatedKubeletsElsewhere: opts.SimulatedKubeletsElsewhere,
		RedfishMediaBindAddress:    opts.RedfishMediaBindAddress,
		// Requests and buffers that wait are looked at again each second,
		// not each half minute: a scenario waits for them.
		Requests: operator.RequestOptions{Clock: opts.RequestClock, Recheck: time.Second},
	}); err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}
