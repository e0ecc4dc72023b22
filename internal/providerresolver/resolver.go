// Package providerresolver turns NodeProviders into live provider.Provider values:
// it reads each NodeProvider's credentials Secret, builds the implementation
// from the registry, and keeps it until the NodeProvider or the Secret
// changes, so controllers never rebuild a client per reconcile.
package providerresolver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/retry"
	"github.com/claimscale/claimscale/pkg/provider"
)

// LabelNodeProvider is v1alpha1.LabelNodeProvider, where every
// user-visible name is listed.
const LabelNodeProvider = v1alpha1.LabelNodeProvider

// DefaultBuildTimeout bounds building one provider (some builders call the
// provider's API to prove the endpoint and credentials).
const DefaultBuildTimeout = 30 * time.Second

// Resolver builds and caches providers. Each NodeProvider is built on its
// own (one build at a time per NodeProvider, none holding up another's),
// under BuildTimeout, and a failed build is remembered for a backoff, so a
// NodeProvider whose API hangs costs its callers nothing but the remembered
// error until it is tried again.
type Resolver struct {
	// Kube reads NodeProviders and NodePools (a cached client is fine).
	Kube client.Reader
	// SecretReader reads Secrets; pass the manager's API reader so the
	// controller does not cache every Secret in the cluster.
	SecretReader client.Reader
	Registry     *provider.Registry
	ClusterName  string
	Namespace    string
	// BuildTimeout bounds one build (default DefaultBuildTimeout).
	BuildTimeout time.Duration
	// Clock times the backoff of failed builds; nil is the real clock.
	Clock clock.PassiveClock

	mu      sync.Mutex
	entries map[string]*entry
	backoff retry.Backoff
}

// entry is one NodeProvider's provider, or its last failed build, for one
// generation of the NodeProvider and one version of its Secret.
type entry struct {
	generation    int64
	secretVersion string
	provider      *safeProvider
	err           error
	// building is closed when the running build ends; nil when none runs.
	building chan struct{}
}

// ForClaim returns the provider of the claim's machine: the one the
// controller recorded when it launched the machine, else (not launched
// yet) its pool's. A label on the claim cannot point it elsewhere.
func (r *Resolver) ForClaim(ctx context.Context, claim *v1alpha1.NodeClaim) (provider.Provider, error) {
	name, err := r.ProviderNameOf(ctx, claim)
	if err != nil {
		return nil, err
	}
	return r.ForProviderName(ctx, name)
}

// ProviderNameOf names the NodeProvider of a claim's machine: recorded in
// its status once launched, else its pool's.
func (r *Resolver) ProviderNameOf(ctx context.Context, claim *v1alpha1.NodeClaim) (string, error) {
	if name := claim.Status.NodeProviderName; name != "" {
		return name, nil
	}
	var pool v1alpha1.NodePool
	if err := r.Kube.Get(ctx, client.ObjectKey{Name: claim.Spec.NodePoolRef.Name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &PoolNotFoundError{Pool: claim.Spec.NodePoolRef.Name}
		}
		return "", fmt.Errorf("getting NodePool %s of claim %s: %w", claim.Spec.NodePoolRef.Name, claim.Name, err)
	}
	return pool.Spec.ProviderRef.Name, nil
}

// PoolNotFoundError: a claim names a NodePool that does not exist.
type PoolNotFoundError struct{ Pool string }

func (e *PoolNotFoundError) Error() string { return fmt.Sprintf("NodePool %s does not exist", e.Pool) }

// ProviderNotFoundError: a NodePool or claim names a NodeProvider that does
// not exist.
type ProviderNotFoundError struct{ Provider string }

func (e *ProviderNotFoundError) Error() string {
	return fmt.Sprintf("NodeProvider %s does not exist", e.Provider)
}

// ForProviderName returns the provider built from the named NodeProvider.
func (r *Resolver) ForProviderName(ctx context.Context, name string) (provider.Provider, error) {
	var nodeProvider v1alpha1.NodeProvider
	if err := r.Kube.Get(ctx, client.ObjectKey{Name: name}, &nodeProvider); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &ProviderNotFoundError{Provider: name}
		}
		return nil, fmt.Errorf("getting NodeProvider %s: %w", name, err)
	}
	return r.For(ctx, &nodeProvider)
}

// For returns the provider built from a NodeProvider, rebuilding it when
// the NodeProvider's spec or its Secret changed. A build runs detached from
// the caller: a caller whose context ends first gets an error, and the
// build goes on to its own timeout for the next caller. While a failed
// build is backed off, or being retried, callers get its error at once.
func (r *Resolver) For(ctx context.Context, nodeProvider *v1alpha1.NodeProvider) (provider.Provider, error) {
	credentials, secretVersion, err := r.credentials(ctx, nodeProvider)
	if err != nil {
		return nil, err
	}
	name := nodeProvider.Name
	r.mu.Lock()
	if r.entries == nil {
		r.entries = map[string]*entry{}
		r.backoff.Clock = r.Clock
	}
	e, ok := r.entries[name]
	if !ok || e.generation != nodeProvider.Generation || e.secretVersion != secretVersion {
		if ok && e.provider != nil {
			e.provider.retire()
		}
		e = &entry{generation: nodeProvider.Generation, secretVersion: secretVersion}
		r.entries[name] = e
		r.backoff.Succeeded(name)
	}
	if e.provider != nil {
		built := e.provider
		r.mu.Unlock()
		return built, nil
	}
	if e.err != nil {
		if waiting, _ := r.backoff.Waiting(name, e.generation); waiting != nil {
			err := e.err
			r.mu.Unlock()
			return nil, err
		}
	}
	if e.building == nil {
		e.building = make(chan struct{})
		go r.build(ctx, e, nodeProvider.DeepCopy(), credentials)
	}
	if e.err != nil {
		// Being retried: the last failure stands until the retry succeeds.
		err := e.err
		r.mu.Unlock()
		return nil, err
	}
	building := e.building
	r.mu.Unlock()

	select {
	case <-building:
	case <-ctx.Done():
		err := fmt.Errorf("building the provider of NodeProvider %s: no answer yet: %w", name, ctx.Err())
		r.mu.Lock()
		defer r.mu.Unlock()
		if e.provider == nil && e.err == nil && errors.Is(err, context.DeadlineExceeded) {
			// Later callers get this at once instead of waiting on the
			// same build; its own outcome replaces it.
			e.err = err
		}
		if e.provider != nil {
			return e.provider, nil
		}
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.provider != nil {
		return e.provider, nil
	}
	return nil, e.err
}

// build makes e's provider, under the build timeout, and records the
// outcome.
func (r *Resolver) build(ctx context.Context, e *entry, nodeProvider *v1alpha1.NodeProvider, credentials map[string][]byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.buildTimeout())
	defer cancel()
	built, err := r.Registry.New(ctx, nodeProvider, provider.Options{
		ClusterName: r.ClusterName,
		Credentials: credentials,
		Secrets:     secretKeyReader{reader: r.SecretReader},
		Namespace:   r.Namespace,
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		e.err = newRedactor(secretValues(credentials)).error(fmt.Errorf("building the provider of NodeProvider %s: %w", nodeProvider.Name, err))
		r.backoff.Failed(nodeProvider.Name, e.generation, e.err)
	} else {
		e.provider, e.err = newSafeProvider(nodeProvider.Name, built, credentials), nil
		r.backoff.Succeeded(nodeProvider.Name)
	}
	close(e.building)
	e.building = nil
}

// forgetAllBut drops the providers of NodeProviders that no longer exist,
// and stops their breakers' probes.
func (r *Resolver) forgetAllBut(nodeProviders []v1alpha1.NodeProvider) {
	live := map[string]bool{}
	for i := range nodeProviders {
		live[nodeProviders[i].Name] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.entries {
		if live[name] {
			continue
		}
		if e.provider != nil {
			e.provider.retire()
		}
		delete(r.entries, name)
		r.backoff.Succeeded(name)
	}
}

func (r *Resolver) buildTimeout() time.Duration {
	if r.BuildTimeout > 0 {
		return r.BuildTimeout
	}
	return DefaultBuildTimeout
}

// All returns the provider of every NodeProvider that can be built, and the
// errors of those that cannot, by NodeProvider name.
func (r *Resolver) All(ctx context.Context) (map[string]provider.Provider, map[string]error, error) {
	var list v1alpha1.NodeProviderList
	if err := r.Kube.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing NodeProviders: %w", err)
	}
	r.forgetAllBut(list.Items)
	built := map[string]provider.Provider{}
	failed := map[string]error{}
	for i := range list.Items {
		buildCtx, cancel := context.WithTimeout(ctx, r.buildTimeout())
		p, err := r.For(buildCtx, &list.Items[i])
		cancel()
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
