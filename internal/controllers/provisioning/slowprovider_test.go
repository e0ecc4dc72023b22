package provisioning

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// byName resolves each NodeProvider to its own provider.
type byName map[string]provider.Provider

func (b byName) ForProviderName(_ context.Context, name string) (provider.Provider, error) {
	return b[name], nil
}

// stalledShapes answers Shapes the way a provider whose API hangs, or whose
// SDK retries a refused connection with backoff, does: not before the
// call's deadline, or after delay.
type stalledShapes struct {
	provider.Provider
	delay time.Duration
	err   error
	shape provider.Shape
}

func (s stalledShapes) Shapes(ctx context.Context, _ *v1alpha1.NodePool) ([]provider.Shape, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(s.delay):
		if s.err != nil {
			return nil, s.err
		}
		return []provider.Shape{s.shape}, nil
	}
}

// A provider that hangs, one that refuses connections after its SDK's
// retries, and one that is slow but healthy hold up no round: the healthy
// pool is open at once, the slow pool too once it answered, the failed
// ones are backed off without a round waiting on them.
func TestARoundDoesNotWaitOnSlowProviders(t *testing.T) {
	cpu, memory := resource.MustParse("4"), resource.MustParse("8Gi")
	reader := &cacheReader{objects: map[string][]runtime.Object{}}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	resolver := byName{
		"healthy": oneShape{shape: provider.Shape{Name: "m", Price: 0.1}},
		"hanging": stalledShapes{delay: time.Hour},
		"refused": stalledShapes{delay: 7 * time.Second, err: refused},
		"slow":    stalledShapes{delay: 800 * time.Millisecond, shape: provider.Shape{Name: "m", Price: 0.1}},
	}
	for name := range resolver {
		reader.add("*v1alpha1.NodePoolList", &v1alpha1.NodePool{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Generation: 1},
			Spec: v1alpha1.NodePoolSpec{
				ProviderRef: v1alpha1.ProviderReference{Name: name},
				Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "m", CPU: &cpu, Memory: &memory}}},
			},
		})
		reader.add("*v1alpha1.NodeProvider", &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	p := &Provisioner{Kube: reader, Providers: resolver, Capacity: allAvailable{}, ProviderCallTimeout: 5 * time.Second}

	round := func() map[string]bool {
		t.Helper()
		started := time.Now()
		_, open, err := p.gather(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(started); took > time.Second {
			t.Errorf("a round took %s beside slow providers, want at most the pool wait (%s)", took, DefaultPoolWait)
		}
		names := map[string]bool{}
		for name := range open {
			names[name] = true
		}
		return names
	}
	if open := round(); !open["healthy"] || open["hanging"] || open["refused"] || open["slow"] {
		t.Fatalf("open pools of the first round = %v, want only the healthy one", open)
	}
	// The slow provider answers in the background; a later round has its
	// shapes without waiting, and the healthy pool is in every round.
	NewWithT(t).Eventually(func(g Gomega) {
		open := round()
		g.Expect(open).To(HaveKey("healthy"))
		g.Expect(open).To(HaveKey("slow"))
	}).WithTimeout(5 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// zonedShapes is a provider that names its zones at run time, as the
// Proxmox provider names its hosts.
type zonedShapes struct {
	oneShape
	zones []string
}

func (z zonedShapes) Zones(context.Context) ([]string, error) { return z.zones, nil }

// A provider's run-time zones (Proxmox hosts) are the zones of its pool's
// new nodes, so a pod with a hard zone spread can land on the pool.
func TestAProvidersRunTimeZonesReachThePool(t *testing.T) {
	cpu, memory := resource.MustParse("4"), resource.MustParse("8Gi")
	reader := &cacheReader{objects: map[string][]runtime.Object{}}
	reader.add("*v1alpha1.NodePoolList", &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pve", UID: "pve", Generation: 1},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "pve"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "m", CPU: &cpu, Memory: &memory}}},
		},
	})
	reader.add("*v1alpha1.NodeProvider", &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: "pve"}, Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeProxmox}})
	resolver := byName{"pve": zonedShapes{oneShape: oneShape{shape: provider.Shape{Name: "m"}}, zones: []string{"pve1", "pve2"}}}
	p := &Provisioner{Kube: reader, Providers: resolver, Capacity: allAvailable{}}
	input, _, err := p.gather(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(input.Pools) != 1 {
		t.Fatalf("pools = %d, want 1", len(input.Pools))
	}
	NewWithT(t).Expect(input.Pools[0].Zones).To(Equal([]string{"pve1", "pve2"}))
}
