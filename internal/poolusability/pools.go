// Package poolusability owns whether a pool can make nodes now: the shapes
// its provider offers, resolved as the scheduling core sees them, the
// zones the provider names, whether the pool's template can make a node,
// and the backoff of a pool that could not. Provisioning, the NodePool
// status and the externalgrpc shim read it; one Pools, shared by them,
// makes one provider call per pool at a time and keeps one answer per pool
// generation and provider state.
package poolusability

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/retry"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/pkg/provider"
)

// ProviderResolver finds a NodeProvider's provider.
type ProviderResolver interface {
	ForProviderName(ctx context.Context, name string) (provider.Provider, error)
}

// DefaultCallTimeout bounds a provider call whose reader names no bound
// and has no deadline of its own.
const DefaultCallTimeout = 10 * time.Second

// Pools resolves pools through their providers and remembers the answers.
// The zero value needs only Providers.
type Pools struct {
	Providers ProviderResolver
	// Kube reads NodeProviders (a cached client is fine), whose generation
	// is the provider state an answer is kept for; nil keeps answers for
	// the pool's generation alone.
	Kube client.Reader
	// Clock times the answers' age and the backoff; nil is the real clock.
	Clock clock.PassiveClock
	// Recorder tells, on the pool, that it is backed off; nil tells only
	// the log.
	Recorder events.EventRecorder

	failures retry.Backoff

	mu sync.Mutex
	// calls are the provider calls running, by pool generation; last,
	// each pool's last answer.
	calls map[generationKey]*call
	last  map[string]answer
}

// Offer is what a pool's provider offers.
type Offer struct {
	// Offered is the provider's answer to Shapes.
	Offered []provider.Shape
	// Zones the provider names at run time (provider.Zoner), nil when it
	// names none.
	Zones []string
	// Shapes is Offered resolved against the pool (scheduling.PoolShapes);
	// ShapesErr says why it could not be, which is the pool's template's
	// fault, not the provider's.
	Shapes    scheduling.Shapes
	ShapesErr error
}

// Step is the part of a provider call that failed.
type Step int

const (
	// ResolvingProvider: the NodeProvider's provider could not be had.
	ResolvingProvider Step = iota
	// ListingShapes: the provider's Shapes failed.
	ListingShapes
	// ListingZones: the provider's Zones failed; the shapes are in the
	// Offer that comes with the error.
	ListingZones
)

// CallError is a failed provider call, with the step that failed.
type CallError struct {
	Step     Step
	Provider string
	Err      error
}

func (e *CallError) Error() string {
	switch e.Step {
	case ListingShapes:
		return fmt.Sprintf("resolving shapes with NodeProvider %s: %v", e.Provider, e.Err)
	case ListingZones:
		return fmt.Sprintf("listing the zones of NodeProvider %s: %v", e.Provider, e.Err)
	default:
		return e.Err.Error()
	}
}

func (e *CallError) Unwrap() error { return e.Err }

// SlowProviderError: a pool's provider named no shapes within the wait a
// reader allowed, and had named none before for this generation of the
// pool; the call goes on for the next reader.
type SlowProviderError struct {
	Provider string
	Wait     time.Duration
}

func (e *SlowProviderError) Error() string {
	return fmt.Sprintf("NodeProvider %s named no shapes within %s; the pool sits this round out while the call goes on", e.Provider, e.Wait)
}

// Read is how a reader wants a pool's offer.
type Read struct {
	// MaxAge: an answer for this generation of the pool and state of its
	// provider that is younger is taken without a call. Zero always asks
	// the provider (joining a call that runs).
	MaxAge time.Duration
	// Wait bounds how long the reader waits for the call; then it takes
	// the last answer without an error for this generation of the pool
	// and state of its provider, whatever its age, or a
	// SlowProviderError. Zero waits until the context ends.
	Wait time.Duration
	// CallTimeout bounds a call this reader starts; zero is the reader's
	// deadline, or DefaultCallTimeout without one.
	CallTimeout time.Duration
}

// call is one pool's provider call, which outlives the reader that began
// it when the provider is slow.
type call struct {
	done  chan struct{}
	offer Offer
	err   error
	// abandoned: no reader waited for the answer, so the call records its
	// own failure (see Failed).
	abandoned bool
}

// generationKey is one generation of a pool: the provider's shapes depend
// on the pool's spec, so a reader of a newer one does not join the call of
// an older one.
type generationKey struct {
	name       string
	uid        types.UID
	generation int64
}

func keyOf(pool *v1alpha1.NodePool) generationKey {
	return generationKey{pool.Name, pool.UID, pool.Generation}
}

// answer is a call's outcome for one generation of a pool and one state of
// its provider.
type answer struct {
	uid        types.UID
	generation int64
	provider   string
	at         time.Time
	offer      Offer
	err        error
}

func (a answer) of(pool *v1alpha1.NodePool, providerState string) bool {
	return a.uid == pool.UID && a.generation == pool.Generation && a.provider == providerState
}

// providerState identifies the pool's NodeProvider as it is now: its UID
// and generation, "" when it cannot be read (the call says why).
func (p *Pools) providerState(ctx context.Context, pool *v1alpha1.NodePool) string {
	if p.Kube == nil {
		return ""
	}
	var nodeProvider v1alpha1.NodeProvider
	if err := p.Kube.Get(ctx, client.ObjectKey{Name: pool.Spec.ProviderRef.Name}, &nodeProvider); err != nil {
		return ""
	}
	return fmt.Sprintf("%s/%d", nodeProvider.UID, nodeProvider.Generation)
}

func (p *Pools) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

// Offer returns what the pool's provider offers now, as read asks.
func (p *Pools) Offer(ctx context.Context, pool *v1alpha1.NodePool, read Read) (Offer, error) {
	state := p.providerState(ctx, pool)
	p.mu.Lock()
	if p.calls == nil {
		p.calls, p.last = map[generationKey]*call{}, map[string]answer{}
	}
	if last, ok := p.last[pool.Name]; ok && read.MaxAge > 0 && last.of(pool, state) && p.now().Sub(last.at) < read.MaxAge {
		p.mu.Unlock()
		return last.offer, last.err
	}
	c, running := p.calls[keyOf(pool)]
	if !running {
		c = &call{done: make(chan struct{})}
		p.calls[keyOf(pool)] = c
		go p.call(ctx, pool.DeepCopy(), state, p.timeout(ctx, read), c)
	}
	p.mu.Unlock()

	var timeout <-chan time.Time
	if read.Wait > 0 {
		timer := time.NewTimer(read.Wait)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-c.done:
		return c.offer, c.err
	case <-timeout:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-c.done:
		return c.offer, c.err
	default:
	}
	if read.Wait <= 0 {
		// What the call would have said, had it run on the reader's
		// context.
		return Offer{}, &CallError{Step: ListingShapes, Provider: pool.Spec.ProviderRef.Name, Err: ctx.Err()}
	}
	c.abandoned = true
	if last, ok := p.last[pool.Name]; ok && last.err == nil && last.of(pool, state) {
		return last.offer, nil
	}
	return Offer{}, &SlowProviderError{Provider: pool.Spec.ProviderRef.Name, Wait: read.Wait}
}

func (p *Pools) timeout(ctx context.Context, read Read) time.Duration {
	if read.CallTimeout > 0 {
		return read.CallTimeout
	}
	if deadline, ok := ctx.Deadline(); ok {
		return time.Until(deadline)
	}
	return DefaultCallTimeout
}

// call asks the pool's provider for its shapes and zones, resolves the
// shapes against the pool, and records the answer when the provider named
// shapes.
func (p *Pools) call(ctx context.Context, pool *v1alpha1.NodePool, state string, timeout time.Duration, c *call) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	name := pool.Spec.ProviderRef.Name
	var offer Offer
	machines, err := p.Providers.ForProviderName(ctx, name)
	switch {
	case err != nil:
		err = &CallError{Step: ResolvingProvider, Provider: name, Err: err}
	default:
		if offer.Offered, err = machines.Shapes(ctx, pool); err != nil {
			err = &CallError{Step: ListingShapes, Provider: name, Err: err}
			break
		}
		offer.Shapes, offer.ShapesErr = scheduling.PoolShapes(pool, offer.Offered)
		if zoner, ok := machines.(provider.Zoner); ok {
			if offer.Zones, err = zoner.Zones(ctx); err != nil {
				err = &CallError{Step: ListingZones, Provider: name, Err: err}
			}
		}
	}
	p.mu.Lock()
	c.offer, c.err = offer, err
	delete(p.calls, keyOf(pool))
	// An older generation's call that ends late leaves a newer answer be.
	last, ok := p.last[pool.Name]
	newer := ok && last.uid == pool.UID && last.generation > pool.Generation
	if (offer.Offered != nil || err == nil) && !newer {
		p.last[pool.Name] = answer{uid: pool.UID, generation: pool.Generation, provider: state, at: p.now(), offer: offer, err: err}
	}
	abandoned := c.abandoned
	p.mu.Unlock()
	// Backed off before the call is seen to end, so that the pool's next
	// reader finds it so.
	if abandoned && err != nil {
		p.Failed(ctx, pool, err)
	}
	close(c.done)
}

// Waiting returns the error a pool failed with while it is backed off for
// it, nil when it may be tried.
func (p *Pools) Waiting(pool *v1alpha1.NodePool) error {
	p.setClock()
	err, _ := p.failures.Waiting(pool.Name, pool.Generation)
	return err
}

// Failed leaves a pool out for its backoff and tells why, on the pool's
// events and in the log, and returns how long it waits.
func (p *Pools) Failed(ctx context.Context, pool *v1alpha1.NodePool, err error) time.Duration {
	p.setClock()
	wait := p.failures.Failed(pool.Name, pool.Generation, err)
	log.FromContext(ctx).Info("pool cannot provision, skipped", "nodePool", pool.Name, "reason", err.Error(), "retryIn", wait)
	if p.Recorder != nil {
		p.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, "ProvisioningSkipped", "Provision",
			"pool skipped by provisioning for %s: %v", wait.Round(time.Second), err)
	}
	return wait
}

// Succeeded ends a pool's backoff.
func (p *Pools) Succeeded(pool *v1alpha1.NodePool) {
	p.failures.Succeeded(pool.Name)
}

func (p *Pools) setClock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Clock != nil && p.failures.Clock == nil {
		p.failures.Clock = p.Clock
	}
}
