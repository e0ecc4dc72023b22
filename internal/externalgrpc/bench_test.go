package externalgrpc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/poolusability"
)

// The benchmarks call the handlers in-process against the manager's real
// cache, filled with 500 nodes of five pools and their claims; the grpc
// variants add the round trip over mutual TLS on 127.0.0.1.
const (
	benchPools        = 5
	benchNodesPerPool = 100
)

var (
	benchOnce  sync.Once
	benchNodes []*corev1.Node
)

func benchCluster(b *testing.B) []*corev1.Node {
	benchOnce.Do(func() {
		// Kept for every benchmark of the run: no cleanup; the API server
		// goes when the run ends.
		w := &world{t: b, g: NewWithT(b), ctx: context.Background(), name: "bench"}
		w.g.SetDefaultEventuallyTimeout(time.Minute)
		var pools []*v1alpha1.NodePool
		for i := range benchPools {
			pools = append(pools, w.pool(fmt.Sprintf("bench-%d", i), func(pool *v1alpha1.NodePool) {
				pool.Spec.Limits.Nodes = ptr(int32(1000))
			}))
		}
		var mu sync.Mutex
		var group errgroup.Group
		group.SetLimit(16)
		for _, pool := range pools {
			for range benchNodesPerPool {
				group.Go(func() error {
					claim := w.claimQuietly(pool, registeredStatus)
					node := w.nodeQuietly(claim)
					mu.Lock()
					defer mu.Unlock()
					benchNodes = append(benchNodes, node)
					return nil
				})
			}
		}
		w.g.Expect(group.Wait()).To(Succeed())
		w.g.Eventually(func() int {
			var nodes corev1.NodeList
			w.g.Expect(cached.List(w.ctx, &nodes)).To(Succeed())
			var claims v1alpha1.NodeClaimList
			w.g.Expect(cached.List(w.ctx, &claims)).To(Succeed())
			withID := 0
			for _, claim := range claims.Items {
				if claim.Status.ProviderID != "" {
					withID++
				}
			}
			return min(len(nodes.Items), withID)
		}).Should(BeNumerically(">=", benchPools*benchNodesPerPool))
	})
	if len(benchNodes) != benchPools*benchNodesPerPool {
		b.Fatal("benchmark cluster not built")
	}
	return benchNodes
}

func benchProvider() *cloudProvider {
	return &cloudProvider{kube: cached, shapes: newShapeCache(&poolusability.Pools{Providers: resolver, Clock: clock.RealClock{}}, clock.RealClock{})}
}

func BenchmarkNodeGroupForNode(b *testing.B) {
	nodes := benchCluster(b)
	ctx := context.Background()
	labelled := make([]*protos.NodeGroupForNodeRequest, len(nodes))
	unlabelled := make([]*protos.NodeGroupForNodeRequest, len(nodes))
	for i, node := range nodes {
		labelled[i] = &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels}}
		unlabelled[i] = &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: node.Name, ProviderID: node.Spec.ProviderID}}
	}
	foreign := &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "control-plane", ProviderID: "other://control-plane"}}
	cases := []struct {
		name     string
		requests []*protos.NodeGroupForNodeRequest
	}{
		{"by pool label", labelled},
		{"by providerID", unlabelled},
		{"foreign node", []*protos.NodeGroupForNodeRequest{foreign}},
	}
	for _, tc := range cases {
		b.Run("in-process/"+tc.name, func(b *testing.B) {
			c := benchProvider()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := c.NodeGroupForNode(ctx, tc.requests[i%len(tc.requests)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	b.Run("grpc/by pool label", func(b *testing.B) {
		ca := newClient(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := ca.NodeGroupForNode(ctx, labelled[i%len(labelled)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func BenchmarkNodeGroups(b *testing.B) {
	benchCluster(b)
	ctx := context.Background()
	b.Run("in-process", func(b *testing.B) {
		c := benchProvider()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.NodeGroups(ctx, &protos.NodeGroupsRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc", func(b *testing.B) {
		ca := newClient(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
