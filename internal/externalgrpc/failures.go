package externalgrpc

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
)

// Instance error classes cluster-autoscaler knows.
const (
	errorClassOutOfResources = 1
	errorClassOther          = 99
)

// failureTTL is how long a claim that failed to launch and is gone is
// still reported: longer than cluster-autoscaler's two-minute re-read of a
// group's instances, so every failure reaches it.
const failureTTL = 5 * time.Minute

// launchError is the error a claim's Launched condition reports, if any:
// capacity errors back the group off in cluster-autoscaler (class 1),
// every other launch failure counts as a failed creation (class 99).
func launchError(claim *v1alpha1.NodeClaim) *protos.InstanceErrorInfo {
	launched := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionLaunched)
	if launched == nil || launched.Status == metav1.ConditionTrue {
		return nil
	}
	switch launched.Reason {
	case "InsufficientCapacity":
		return &protos.InstanceErrorInfo{ErrorCode: launched.Reason, ErrorMessage: launched.Message, InstanceErrorClass: errorClassOutOfResources}
	case "LaunchFailed", "ProviderUnavailable":
		return &protos.InstanceErrorInfo{ErrorCode: launched.Reason, ErrorMessage: launched.Message, InstanceErrorClass: errorClassOther}
	}
	return nil
}

type failure struct {
	pool  string
	info  *protos.InstanceErrorInfo
	until time.Time
	// dismissed: cluster-autoscaler deleted the instance; the failure is
	// kept only so the claim's deletion event does not bring it back.
	dismissed bool
}

// failures remembers claims that failed to launch after they are gone. The
// lifecycle controller deletes a claim as soon as its provider reports no
// capacity, usually before cluster-autoscaler next lists the group's
// instances; without this memory it would never learn of the failure and
// would keep asking the same group for nodes.
type failures struct {
	clock clock.PassiveClock

	mu     sync.Mutex
	claims map[string]failure // by claim name
}

func newFailures(clk clock.PassiveClock) *failures {
	return &failures{clock: clk, claims: map[string]failure{}}
}

// watch records every claim that disappears with a launch error.
func (f *failures) watch(ctx context.Context, informers Informers) error {
	informer, err := informers.GetInformer(ctx, &v1alpha1.NodeClaim{})
	if err != nil {
		return fmt.Errorf("watching NodeClaims for launch failures: %w", err)
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if claim, ok := obj.(*v1alpha1.NodeClaim); ok {
				f.record(claim)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching NodeClaims for launch failures: %w", err)
	}
	return nil
}

// Informers is the part of the manager's cache the server watches.
type Informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// record remembers a deleted claim whose launch found no capacity. Other
// launch failures need no memory: such claims stay, retrying, until someone
// deletes them, so cluster-autoscaler has seen them.
func (f *failures) record(claim *v1alpha1.NodeClaim) {
	info := launchError(claim)
	if info == nil || info.InstanceErrorClass != errorClassOutOfResources {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.claims[claim.Name].dismissed {
		return
	}
	f.claims[claim.Name] = failure{pool: claim.Spec.NodePoolRef.Name, info: info, until: f.clock.Now().Add(failureTTL)}
}

// instances returns the remembered failures of a pool as failed creations,
// forgetting expired ones.
func (f *failures) instances(pool string) []*protos.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	var out []*protos.Instance
	for name, failed := range f.claims {
		if !now.Before(failed.until) {
			delete(f.claims, name)
			continue
		}
		if failed.pool == pool && !failed.dismissed {
			out = append(out, &protos.Instance{
				Id: PlaceholderPrefix + name,
				Status: &protos.InstanceStatus{
					InstanceState: protos.InstanceStatus_instanceCreating,
					ErrorInfo:     failed.info,
				},
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// poolOf names the pool of a remembered claim, "" if none is remembered.
func (f *failures) poolOf(claim string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claims[claim].pool
}

// dismiss stops reporting a claim once cluster-autoscaler deleted its
// instance, also when the claim's deletion is seen only afterwards.
func (f *failures) dismiss(claim, pool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims[claim] = failure{pool: pool, until: f.clock.Now().Add(failureTTL), dismissed: true}
}
