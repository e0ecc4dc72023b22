package poolusability

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

var c2 = provider.Shape{Name: "c2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.1}

// held is the fake provider with Shapes held until released: a provider
// slower than its readers.
type held struct {
	*fake.Provider
	release chan struct{}
}

func (h *held) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Provider.Shapes(ctx, pool)
}

func poolOf(generation int64) *v1alpha1.NodePool {
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", UID: "pool-uid", Generation: generation},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "provider"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2"}}},
		},
	}
}

func shapeCalls(infra *fake.Infrastructure) int { return len(infra.Calls(fake.Shapes)) }

// heldPools is Pools on a provider held until the test releases it, and
// the reads of a provisioning round, which wait a millisecond for it.
func heldPools() (*Pools, *held, *fake.Infrastructure, Read) {
	infra := fake.NewInfrastructure(c2)
	slow := &held{Provider: infra.Provider("test"), release: make(chan struct{})}
	return &Pools{Providers: fake.Resolver{Provider: slow}}, slow, infra, Read{Wait: time.Millisecond, CallTimeout: time.Minute}
}

// releaseCall lets the pool's running call end, waits for it, and holds
// the next one.
func releaseCall(pools *Pools, slow *held) {
	close(slow.release)
	<-pools.done("pool")
	slow.release = make(chan struct{})
}

// offerTooSlow reads the pool's offer while its provider is held.
func offerTooSlow(t *testing.T, pools *Pools, pool *v1alpha1.NodePool, read Read) {
	t.Helper()
	var tooSlow *SlowProviderError
	if _, err := pools.Offer(t.Context(), pool, read); !errors.As(err, &tooSlow) {
		t.Fatalf("generation %d: err = %v while the provider is held, want a SlowProviderError", pool.Generation, err)
	}
}

// done is closed when the pool's running call ends (at once when none
// runs); the tests run one call of a pool at a time.
func (p *Pools) done(pool string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, c := range p.calls {
		if key.name == pool {
			return c.done
		}
	}
	ended := make(chan struct{})
	close(ended)
	return ended
}

// Readers that come while a pool's call runs wait for that call instead of
// making their own.
func TestReadersShareOneCallPerPool(t *testing.T) {
	pools, slow, infra, read := heldPools()
	for range 3 {
		offerTooSlow(t, pools, poolOf(1), read)
	}
	releaseCall(pools, slow)
	if n := shapeCalls(infra); n != 1 {
		t.Fatalf("%d Shapes calls for three readers of one running call, want 1", n)
	}
	offer, err := pools.Offer(t.Context(), poolOf(1), read)
	if err != nil || len(offer.Shapes.Fixed) != 1 || offer.Shapes.Fixed[0].Name != "c2" {
		t.Fatalf("offer %+v, error %v; want c2 resolved", offer, err)
	}
}

// The provider's shapes depend on the pool's spec: a reader of a newer
// generation makes its own call instead of joining an older one's, and the
// older call, ending last, does not replace the newer answer.
func TestANewGenerationOfThePoolIsAskedAfresh(t *testing.T) {
	pools, slow, infra, read := heldPools()
	for _, generation := range []int64{1, 2} {
		offerTooSlow(t, pools, poolOf(generation), read)
	}
	close(slow.release)
	<-pools.done("pool")
	<-pools.done("pool")
	if n := shapeCalls(infra); n != 2 {
		t.Fatalf("%d Shapes calls for two generations of the pool, want 2", n)
	}
	if last := pools.last["pool"]; last.generation != 2 {
		t.Fatalf("the kept answer is of generation %d, want 2", last.generation)
	}
}

// An answer younger than a reader's MaxAge is taken without a call; an
// older one, or one for another generation of the pool, is asked again.
func TestAnswersAreKeptForTheirAgeAndPoolGeneration(t *testing.T) {
	infra := fake.NewInfrastructure(c2)
	clk := clocktesting.NewFakeClock(time.Now())
	pools := &Pools{Providers: fake.Resolver{Provider: infra.Provider("test")}, Clock: clk}
	read := Read{MaxAge: time.Minute}
	offer := func(generation int64) {
		t.Helper()
		if _, err := pools.Offer(t.Context(), poolOf(generation), read); err != nil {
			t.Fatal(err)
		}
	}
	offer(1)
	offer(1)
	if n := shapeCalls(infra); n != 1 {
		t.Fatalf("%d Shapes calls for two reads within MaxAge, want 1", n)
	}
	// A reader that wants a fresh answer asks, whatever is kept.
	if _, err := pools.Offer(t.Context(), poolOf(1), Read{}); err != nil {
		t.Fatal(err)
	}
	if n := shapeCalls(infra); n != 2 {
		t.Fatalf("%d Shapes calls after a fresh read, want 2", n)
	}
	offer(2)
	if n := shapeCalls(infra); n != 3 {
		t.Fatalf("%d Shapes calls after the pool changed, want 3", n)
	}
	clk.Step(time.Minute)
	offer(2)
	if n := shapeCalls(infra); n != 4 {
		t.Fatalf("%d Shapes calls once the answer is MaxAge old, want 4", n)
	}
}

// A changed NodeProvider (a new generation) may offer other shapes: its
// pools' kept answers are not taken for it.
func TestAnswersAreKeptForTheirProviderState(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	nodeProvider := &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: "provider"}}
	kube := clientfake.NewClientBuilder().WithScheme(scheme).WithObjects(nodeProvider).Build()
	infra := fake.NewInfrastructure(c2)
	pools := &Pools{Providers: fake.Resolver{Provider: infra.Provider("test")}, Kube: kube}
	read := Read{MaxAge: time.Hour}
	for range 2 {
		if _, err := pools.Offer(t.Context(), poolOf(1), read); err != nil {
			t.Fatal(err)
		}
	}
	if n := shapeCalls(infra); n != 1 {
		t.Fatalf("%d Shapes calls, want 1", n)
	}
	if err := kube.Get(t.Context(), client.ObjectKeyFromObject(nodeProvider), nodeProvider); err != nil {
		t.Fatal(err)
	}
	nodeProvider.Spec.Type = v1alpha1.ProviderTypeSimulated
	nodeProvider.Generation++
	if err := kube.Update(t.Context(), nodeProvider); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Offer(t.Context(), poolOf(1), read); err != nil {
		t.Fatal(err)
	}
	if n := shapeCalls(infra); n != 2 {
		t.Fatalf("%d Shapes calls after the NodeProvider changed, want 2", n)
	}
}

// A reader with a Wait goes on without the provider: with the last answer
// for this generation of the pool when there is one, else with a
// SlowProviderError. The call it left behind records its own failure in
// the pool's backoff.
func TestASlowProviderIsLeftBehindAndItsFailureBacksThePoolOff(t *testing.T) {
	pools, slow, infra, read := heldPools()
	offerTooSlow(t, pools, poolOf(1), read)
	releaseCall(pools, slow)

	// The answer the abandoned call got serves the next slow round.
	offer, err := pools.Offer(t.Context(), poolOf(1), read)
	if err != nil || len(offer.Offered) != 1 {
		t.Fatalf("offer %+v, error %v; want the last answer", offer, err)
	}
	releaseCall(pools, slow)
	// It is no answer for the next generation of the pool.
	offerTooSlow(t, pools, poolOf(2), read)
	infra.Fail(fake.Shapes, errors.New("catalog unavailable"))
	releaseCall(pools, slow)
	if err := pools.Waiting(poolOf(2)); err == nil {
		t.Fatal("the pool is not backed off after its abandoned call failed")
	}
	pools.Succeeded(poolOf(2))
	if err := pools.Waiting(poolOf(2)); err != nil {
		t.Fatalf("the pool is still backed off after it succeeded: %v", err)
	}
}

// Each step of a call fails in its own way, so that readers tell the
// NodeProvider's absence from its Shapes failing; a pool the provider's
// shapes cannot be resolved for is the template's fault, with the shapes
// offered.
func TestCallErrorsSayWhichStepFailed(t *testing.T) {
	infra := fake.NewInfrastructure(c2)
	pools := &Pools{Providers: fake.Resolver{Provider: infra.Provider("test")}}
	infra.FailNext(fake.Shapes, errors.New("catalog unavailable"))
	_, err := pools.Offer(t.Context(), poolOf(1), Read{})
	var failed *CallError
	if !errors.As(err, &failed) || failed.Step != ListingShapes || failed.Error() != "resolving shapes with NodeProvider provider: catalog unavailable" {
		t.Fatalf("err = %v, want a CallError of ListingShapes", err)
	}
	unknown := poolOf(1)
	unknown.Spec.Shapes.Fixed[0].Name = "c9"
	offer, err := pools.Offer(t.Context(), unknown, Read{})
	if err != nil || offer.ShapesErr == nil || len(offer.Offered) != 1 {
		t.Fatalf("offer %+v, error %v; want the offered shapes and a ShapesErr", offer, err)
	}
	missing := &Pools{Providers: resolverFunc(func() (provider.Provider, error) { return nil, errors.New("no NodeProvider provider") })}
	if _, err := missing.Offer(t.Context(), poolOf(1), Read{}); !errors.As(err, &failed) || failed.Step != ResolvingProvider || err.Error() != "no NodeProvider provider" {
		t.Fatalf("err = %v, want a CallError of ResolvingProvider with the resolver's words", err)
	}
}

type resolverFunc func() (provider.Provider, error)

func (f resolverFunc) ForProviderName(context.Context, string) (provider.Provider, error) { return f() }
