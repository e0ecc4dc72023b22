package operator

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	autoscalingv1beta1 "github.com/claimscale/claimscale/api/autoscaling/v1beta1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/controllers/capacitybuffer"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/controllers/provisioningrequest"
)

// provisioningRequests builds the ProvisioningRequest controller, or
// returns nil, saying so once, when the API server does not serve
// ProvisioningRequests (its CRD is not installed) or in a dry run, which
// buys nothing for requests either.
func provisioningRequests(ctx context.Context, mgr manager.Manager, opts Options, provisioner *provisioning.Provisioner,
	objects clusterstate.ObjectSource, writes *clusterstate.Writes, recorder events.EventRecorder, changed func(),
) (*provisioningrequest.Controller, error) {
	served, err := serves(mgr, autoscalingv1.GroupVersion.WithKind("ProvisioningRequest"))
	if err != nil {
		return nil, err
	}
	if !served {
		log.FromContext(ctx).Info("ProvisioningRequests are not served: the API server has no autoscaling.x-k8s.io/v1 ProvisioningRequest (install its CRD, config/crd/autoscaling)")
		return nil, nil
	}
	if opts.DryRun {
		log.FromContext(ctx).Info("ProvisioningRequests are not served in a dry run")
		return nil, nil
	}
	clock := opts.Requests.Clock
	if clock == nil {
		clock = opts.Clock
	}
	return &provisioningrequest.Controller{
		Kube: mgr.GetClient(), Objects: objects, Writes: writes, Rounds: provisioner,
		Bookings: &provisioningrequest.Bookings{Kube: mgr.GetClient()},
		Recorder: recorder, Clock: clock,
		BookingTime: opts.Requests.BookingTime, Recheck: opts.Requests.Recheck,
		Changed: changed,
	}, nil
}

// capacityBuffers builds the CapacityBuffer controller, or returns nil,
// saying so once, when the API server does not serve CapacityBuffers.
func capacityBuffers(ctx context.Context, mgr manager.Manager, pools clusterstate.PoolUsability, opts Options, changed func()) (*capacitybuffer.Controller, error) {
	served, err := serves(mgr, autoscalingv1beta1.GroupVersion.WithKind("CapacityBuffer"))
	if err != nil {
		return nil, err
	}
	if !served {
		log.FromContext(ctx).Info("CapacityBuffers are not served: the API server has no autoscaling.x-k8s.io/v1beta1 CapacityBuffer (install its CRD, config/crd/autoscaling)")
		return nil, nil
	}
	return &capacitybuffer.Controller{
		Kube: mgr.GetClient(), Workloads: mgr.GetAPIReader(), Pools: pools,
		Buffers: &capacitybuffer.Buffers{}, Clock: opts.Clock, Recheck: opts.Requests.Recheck, Changed: changed,
		DryRun: opts.DryRun,
	}, nil
}

// serves says whether the API server serves a kind (its CRD is installed).
func serves(mgr manager.Manager, gvk schema.GroupVersionKind) (bool, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	var noMatch *meta.NoKindMatchError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &noMatch), meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("asking the API server for %s: %w", gvk, err)
}
