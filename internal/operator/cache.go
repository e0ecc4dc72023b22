package operator

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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
func CacheOptions(namespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		// Node repair reads the kubelets' heartbeat Leases, and only those.
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{corev1.NamespaceNodeLease: {}}},
		&corev1.ConfigMap{}:     {Namespaces: map[string]cache.Config{namespace: {}}},
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{namespace: {
			LabelSelector: labels.SelectorFromSet(labels.Set{simulated.LabelMachine: "true"}),
		}}},
	}}
}
