package providerresolver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// hangingProvider blocks every call until its context ends, while hang is
// set, and counts the calls that reached it.
type hangingProvider struct {
	hang  atomic.Bool
	calls atomic.Int32
}

func (p *hangingProvider) wait(ctx context.Context) error {
	p.calls.Add(1)
	if p.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (p *hangingProvider) Create(ctx context.Context, _ *v1alpha1.NodeClaim, _ provider.CreateOptions) (*provider.Instance, error) {
	return &provider.Instance{}, p.wait(ctx)
}
func (p *hangingProvider) Delete(ctx context.Context, _ string) error { return p.wait(ctx) }
func (p *hangingProvider) Get(ctx context.Context, _ string) (*provider.Instance, error) {
	return &provider.Instance{}, p.wait(ctx)
}
func (p *hangingProvider) List(ctx context.Context) ([]*provider.Instance, error) {
	return nil, p.wait(ctx)
}
func (p *hangingProvider) Shapes(ctx context.Context, _ *v1alpha1.NodePool) ([]provider.Shape, error) {
	return nil, p.wait(ctx)
}

func TestAHungProviderCostsOneTimeoutThenFailsFastUntilItAnswersAgain(t *testing.T) {
	g := NewWithT(t)
	hung := &hangingProvider{}
	hung.hang.Store(true)
	safe := newSafeProvider("hung", hung, nil)
	defer safe.breaker.stop()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := safe.Shapes(ctx, &v1alpha1.NodePool{})
	cancel()
	g.Expect(IsUnreachable(err)).To(BeTrue(), "a call that timed out is unreachable: %v", err)

	started := time.Now()
	_, err = safe.Shapes(context.Background(), &v1alpha1.NodePool{})
	g.Expect(IsUnreachable(err)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring("NodeProvider hung is unreachable"))
	g.Expect(time.Since(started)).To(BeNumerically("<", 10*time.Millisecond), "the second call waits for nothing")
	g.Expect(hung.calls.Load()).To(Equal(int32(1)), "the second call does not reach the provider")

	hung.hang.Store(false)
	g.Eventually(func() error {
		_, err := safe.Shapes(context.Background(), &v1alpha1.NodePool{})
		return err
	}).WithTimeout(5*time.Second).WithPolling(50*time.Millisecond).Should(Succeed(), "the breaker's own probe finds the provider back")
}
