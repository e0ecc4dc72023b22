package operator

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// CacheOptions limit the informer of ConfigMaps (the simulated provider's
// machine records) to the controller's namespace, and that of Secrets to
// the simulated machines' user data there: the controller has no
// permission, and no business, watching them cluster-wide. Other Secrets
// (credentials, bootstrap tokens) are read uncached.
//
// Every cached object loses its managed fields and kubectl's
// last-applied-configuration annotation, which nothing here reads and
// which are often half of what a pod weighs: at ten thousand pods that is
// most of the controller's memory.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{DefaultTransform: stripUnread, ByObject: map[client.Object]cache.ByObject{
		// Node repair reads the kubelets' heartbeat Leases, and only those.
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{corev1.NamespaceNodeLease: {}}},
		&corev1.ConfigMap{}:     {Namespaces: map[string]cache.Config{namespace: {}}},
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{namespace: {
			LabelSelector: labels.SelectorFromSet(labels.Set{simulated.LabelMachine: "true"}),
		}}},
	}}
}

// stripUnread drops what no controller reads from an object about to be
// cached. It is safe for writes: an update without managed fields keeps the
// stored ones, and the annotation is only ever written by kubectl.
func stripUnread(in any) (any, error) {
	object, err := meta.Accessor(in)
	if err != nil {
		// Not an object (a tombstone, say): nothing to strip.
		return in, nil
	}
	if object.GetManagedFields() != nil {
		object.SetManagedFields(nil)
	}
	if annotations := object.GetAnnotations(); annotations[corev1.LastAppliedConfigAnnotation] != "" {
		delete(annotations, corev1.LastAppliedConfigAnnotation)
		object.SetAnnotations(annotations)
	}
	return in, nil
}
