package clusterstate

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/internal/scheduling"
)

// listDRA reads the Dynamic Resource Allocation objects a decision
// simulates pods with ResourceClaims on: every ResourceSlice, ResourceClaim
// and DeviceClass. A cluster whose API server does not serve
// resource.k8s.io/v1 (before Kubernetes 1.34) has none.
func listDRA(ctx context.Context, kube client.Reader) (scheduling.DRA, error) {
	var dra scheduling.DRA
	var slices resourcev1.ResourceSliceList
	if err := kube.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		if meta.IsNoMatchError(err) {
			return scheduling.DRA{}, nil
		}
		return dra, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	var claims resourcev1.ResourceClaimList
	if err := kube.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return dra, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	var classes resourcev1.DeviceClassList
	if err := kube.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return dra, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	for i := range slices.Items {
		dra.ResourceSlices = append(dra.ResourceSlices, &slices.Items[i])
	}
	for i := range claims.Items {
		dra.ResourceClaims = append(dra.ResourceClaims, &claims.Items[i])
	}
	for i := range classes.Items {
		dra.DeviceClasses = append(dra.DeviceClasses, &classes.Items[i])
	}
	return dra, nil
}
