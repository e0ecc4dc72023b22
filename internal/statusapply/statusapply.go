// Package statusapply writes the part of a claimscale object's status that
// one controller owns, by server-side apply under that controller's field
// manager and without a resourceVersion: the entries other controllers
// write into the same condition list are neither conflicted with nor
// erased, and a write from a copy the cache has not caught up with is
// simply the newer value.
package statusapply

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Apply applies status (the owned fields only) as the status of the
// cluster-scoped claimscale object kind/name, owned by fieldOwner, and
// returns the resourceVersion the write produced.
func Apply(ctx context.Context, kube client.Client, kind, name string, status any, fieldOwner string) (string, error) {
	encoded, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return "", fmt.Errorf("encoding status of %s %s: %w", kind, name, err)
	}
	apply := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"status":     encoded,
	}}
	if err := kube.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("writing status of %s %s: %w", kind, name, err)
	}
	return apply.GetResourceVersion(), nil
}
