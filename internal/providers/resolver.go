// Package providers turns NodeProviders into live provider.Provider values:
// it reads each NodeProvider's credentials Secret, builds the implementation
// from the registry, and keeps it until the NodeProvider or the Secret
// changes, so controllers never rebuild a client per reconcile.
package providers

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// LabelNodeProvider on a NodeClaim names the NodeProvider that made its
// machine, so the machine can still be deleted after its pool is gone.
const LabelNodeProvider = "claimscale.io/nodeprovider"

// Resolver builds and caches providers.
type Resolver struct {
	// Kube reads NodeProviders and NodePools (a cached client is fine).
	Kube client.Reader
	// SecretReader reads Secrets; pass the manager's API reader so the
	// controller does not cache every Secret in the cluster.
	SecretReader client.Reader
	// ProviderClient is handed to providers that keep state in the cluster.
	ProviderClient client.Client
	Registry       *provider.Registry
	ClusterName    string
	Namespace      string

	mu    sync.Mutex
	cache map[string]cachedProvider
}

type cachedProvider struct {
	generation    int64
	secretVersion string
	provider      provider.Provider
}

// ForClaim returns the provider that makes the claim's machine: the one
// named by the claim's LabelNodeProvider, else its pool's.
func (r *Resolver) ForClaim(ctx context.Context, claim *v1alpha1.NodeClaim) (provider.Provider, error) {
	if name := claim.Labels[LabelNodeProvider]; name != "" {
		return r.ForProviderName(ctx, name)
	}
	var pool v1alpha1.NodePool
	if err := r.Kube.Get(ctx, client.ObjectKey{Name: claim.Spec.NodePoolRef.Name}, &pool); err != nil {
		return nil, fmt.Errorf("getting NodePool %s of claim %s: %w", claim.Spec.NodePoolRef.Name, claim.Name, err)
	}
	return r.ForProviderName(ctx, pool.Spec.ProviderRef.Name)
}

// ForProviderName returns the provider built from the named NodeProvider.
func (r *Resolver) ForProviderName(ctx context.Context, name string) (provider.Provider, error) {
	var nodeProvider v1alpha1.NodeProvider
	if err := r.Kube.Get(ctx, client.ObjectKey{Name: name}, &nodeProvider); err != nil {
		return nil, fmt.Errorf("getting NodeProvider %s: %w", name, err)
	}
	return r.For(ctx, &nodeProvider)
}

// For returns the provider built from a NodeProvider, rebuilding it when
// the NodeProvider's spec or its Secret changed.
func (r *Resolver) For(ctx context.Context, nodeProvider *v1alpha1.NodeProvider) (provider.Provider, error) {
	credentials, secretVersion, err := r.credentials(ctx, nodeProvider)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cached, ok := r.cache[nodeProvider.Name]; ok &&
		cached.generation == nodeProvider.Generation && cached.secretVersion == secretVersion {
		return cached.provider, nil
	}
	built, err := r.Registry.New(ctx, nodeProvider, provider.Options{
		ClusterName: r.ClusterName,
		Credentials: credentials,
		Secrets:     secretKeyReader{reader: r.SecretReader},
		Kube:        r.ProviderClient,
		Namespace:   r.Namespace,
	})
	if err != nil {
		return nil, err
	}
	if r.cache == nil {
		r.cache = map[string]cachedProvider{}
	}
	r.cache[nodeProvider.Name] = cachedProvider{
		generation:    nodeProvider.Generation,
		secretVersion: secretVersion,
		provider:      built,
	}
	return built, nil
}

// All returns the provider of every NodeProvider that can be built, and the
// errors of those that cannot, by NodeProvider name.
func (r *Resolver) All(ctx context.Context) (map[string]provider.Provider, map[string]error, error) {
	var list v1alpha1.NodeProviderList
	if err := r.Kube.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing NodeProviders: %w", err)
	}
	built := map[string]provider.Provider{}
	failed := map[string]error{}
	for i := range list.Items {
		p, err := r.For(ctx, &list.Items[i])
		if err != nil {
			failed[list.Items[i].Name] = err
			continue
		}
		built[list.Items[i].Name] = p
	}
	return built, failed, nil
}

func (r *Resolver) credentials(ctx context.Context, nodeProvider *v1alpha1.NodeProvider) (map[string][]byte, string, error) {
	ref := nodeProvider.Spec.CredentialsSecretRef
	if ref == nil {
		return nil, "", nil
	}
	var secret corev1.Secret
	if err := r.SecretReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", provider.NewTerminal(fmt.Errorf("credentials Secret %s/%s of NodeProvider %s not found", ref.Namespace, ref.Name, nodeProvider.Name))
		}
		return nil, "", fmt.Errorf("reading credentials Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return secret.Data, secret.ResourceVersion, nil
}

type secretKeyReader struct{ reader client.Reader }

func (s secretKeyReader) ReadSecretKey(ctx context.Context, ref v1alpha1.SecretKeyReference) ([]byte, error) {
	var secret corev1.Secret
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	value, ok := secret.Data[ref.Key]
	if !ok {
		return nil, provider.NewTerminal(fmt.Errorf("Secret %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key))
	}
	return value, nil
}
