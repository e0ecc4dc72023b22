package operator

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions limit the informer of ConfigMaps (the simulated provider's
// machine records) to the controller's namespace: the controller has no
// permission, and no business, watching them cluster-wide.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{namespace: {}}},
	}}
}
