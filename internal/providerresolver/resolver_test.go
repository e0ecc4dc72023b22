package providerresolver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Builds of one NodeProvider run once at a time, hold up no other
// NodeProvider, and a failed build is remembered for its backoff.
func TestResolverBuildsEachNodeProviderOnItsOwnAndRemembersFailures(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	defer close(release)
	builds := map[string]*atomic.Int32{"slow": {}, "fine": {}, "broken": {}}
	registry := provider.NewRegistry()
	registry.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, _ provider.Options) (provider.Provider, error) {
		builds[np.Name].Add(1)
		switch np.Name {
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "broken":
			return nil, provider.NewTerminal(errors.New("spec.simulated is broken"))
		}
		return &hangingProvider{}, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	resolver := &Resolver{Registry: registry, Clock: clk, BuildTimeout: time.Minute}
	nodeProvider := func(name string) *v1alpha1.NodeProvider {
		return &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}, Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated}}
	}

	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := resolver.For(ctx, nodeProvider("slow"))
			g.Expect(err).To(MatchError(ContainSubstring("no answer yet")))
		}()
	}
	started := time.Now()
	built, err := resolver.For(context.Background(), nodeProvider("fine"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(built).NotTo(BeNil())
	g.Expect(time.Since(started)).To(BeNumerically("<", 50*time.Millisecond), "a slow NodeProvider held up another's build")
	wg.Wait()
	g.Expect(builds["slow"].Load()).To(Equal(int32(1)), "concurrent callers share one build")
	started = time.Now()
	_, err = resolver.For(context.Background(), nodeProvider("slow"))
	g.Expect(IsUnreachable(err)).To(BeTrue())
	g.Expect(time.Since(started)).To(BeNumerically("<", 10*time.Millisecond), "a caller after a timed-out one waits again")

	_, err = resolver.For(context.Background(), nodeProvider("broken"))
	g.Expect(err).To(MatchError(ContainSubstring("spec.simulated is broken")))
	_, err = resolver.For(context.Background(), nodeProvider("broken"))
	g.Expect(err).To(MatchError(ContainSubstring("spec.simulated is broken")))
	g.Expect(builds["broken"].Load()).To(Equal(int32(1)), "a failed build is remembered, not retried at once")
	clk.Step(2 * time.Second)
	_, err = resolver.For(context.Background(), nodeProvider("broken"))
	g.Expect(err).To(MatchError(ContainSubstring("spec.simulated is broken")))
	g.Eventually(builds["broken"].Load).Should(Equal(int32(2)), "retried once its backoff is over")

	fixed := nodeProvider("broken")
	fixed.Generation = 2
	registry.Register(v1alpha1.ProviderTypeSimulated, func(context.Context, *v1alpha1.NodeProvider, provider.Options) (provider.Provider, error) {
		return &hangingProvider{}, nil
	})
	_, err = resolver.For(context.Background(), fixed)
	g.Expect(err).NotTo(HaveOccurred(), "a new generation is built at once")
}
