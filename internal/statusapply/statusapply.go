// Package statusapply writes the part of a claimscale object's status that
// one controller owns, by server-side apply under that controller's field
// manager: the entries other controllers write into the same condition
// list are neither conflicted with nor erased. Apply writes without a
// resourceVersion, so a write from a copy the cache has not caught up with
// is simply the newer value; ApplyUnchanged writes only over the object as
// the writer read it, for a writer whose copy may lack its own last write.
package statusapply

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Apply applies status (the owned fields only) as the status of the
// cluster-scoped claimscale object kind/name, owned by fieldOwner, and
// returns the resourceVersion the write produced.
func Apply(ctx context.Context, kube client.Client, kind, name string, status any, fieldOwner string) (string, error) {
	apply, err := applyConfiguration(kind, name, status)
	if err != nil {
		return "", err
	}
	if err := kube.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("writing status of %s %s: %w", kind, name, err)
	}
	return apply.GetResourceVersion(), nil
}

// ApplyUnchanged is Apply on condition that the object is still at
// object's resourceVersion, else it fails with a conflict; object becomes
// the object as the write left it. A writer needs it whose copy may be
// older than its own last write: applying from such a copy would remove
// the fields it wrote since and the copy lacks.
func ApplyUnchanged[T any, P interface {
	*T
	client.Object
}](ctx context.Context, kube client.Client, kind string, object P, status any, fieldOwner string) error {
	apply, err := applyConfiguration(kind, object.GetName(), status)
	if err != nil {
		return err
	}
	apply.SetResourceVersion(object.GetResourceVersion())
	if err := kube.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing status of %s %s: %w", kind, object.GetName(), err)
	}
	var written T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(apply.Object, &written); err != nil {
		return fmt.Errorf("decoding %s %s as written: %w", kind, object.GetName(), err)
	}
	*object = written
	return nil
}

// Conditions is the status of a writer that owns some of an object's
// conditions and nothing else of its status.
type Conditions struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// applyConfiguration is the apply request of status as the status of
// kind/name.
func applyConfiguration(kind, name string, status any) (*unstructured.Unstructured, error) {
	encoded, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return nil, fmt.Errorf("encoding status of %s %s: %w", kind, name, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"status":     encoded,
	}}, nil
}
