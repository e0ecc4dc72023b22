package testenv

import (
	"context"
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CachedClient returns a client that reads through an informer cache, as
// a manager's does, with the field indexes that indexes registers (the
// controllers' list calls use them; the API server knows none of them).
// The cache runs until ctx ends.
func (e *Environment) CachedClient(ctx context.Context, indexes func(context.Context, client.FieldIndexer) error) (client.Client, error) {
	informers, err := cache.New(e.Config, cache.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, err
	}
	if indexes != nil {
		if err := indexes(ctx, informers); err != nil {
			return nil, err
		}
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return nil, errors.New("the informer cache did not sync")
	}
	return client.New(e.Config, client.Options{Scheme: e.Scheme, Cache: &client.CacheOptions{Reader: informers}})
}
