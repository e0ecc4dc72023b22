package provider

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Factory builds a Provider from a NodeProvider and its credentials.
type Factory func(ctx context.Context, nodeProvider *v1alpha1.NodeProvider, opts Options) (Provider, error)

// Registry maps a NodeProvider type to the factory of its implementation.
// cmd/claimscale fills it, so pkg/provider never imports an implementation.
type Registry struct {
	mu        sync.RWMutex
	factories map[v1alpha1.ProviderType]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[v1alpha1.ProviderType]Factory{}}
}

// Register adds the factory for a type, replacing any earlier one.
func (r *Registry) Register(providerType v1alpha1.ProviderType, factory Factory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.factories[providerType] = factory
}

// Types lists the registered types.
func (r *Registry) Types() []v1alpha1.ProviderType {
	r.mu.RLock()
	defer r.mu.RUnlock()
	types := make([]v1alpha1.ProviderType, 0, len(r.factories))
	for t := range r.factories {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	return types
}

// New builds the provider for a NodeProvider.
func (r *Registry) New(ctx context.Context, nodeProvider *v1alpha1.NodeProvider, opts Options) (Provider, error) {
	r.mu.RLock()
	factory, ok := r.factories[nodeProvider.Spec.Type]
	r.mu.RUnlock()
	if !ok {
		return nil, NewTerminal(fmt.Errorf("no provider implementation registered for type %q", nodeProvider.Spec.Type))
	}
	p, err := factory(ctx, nodeProvider, opts)
	if err != nil {
		return nil, fmt.Errorf("building %s provider %s: %w", nodeProvider.Spec.Type, nodeProvider.Name, err)
	}
	return p, nil
}
