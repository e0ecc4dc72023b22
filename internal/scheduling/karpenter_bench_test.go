package scheduling

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/internal/scheduling/workloads"
)

// The workloads of Karpenter's public scheduling benchmark (package
// workloads) on one pool of a 400-shape catalog in three zones.

func karpenterPool() Cluster {
	return Cluster{Pools: []Pool{nodePool("default", catalog(400), zones("a", "b", "c"))}}
}

func diverseWorkload(n int) (Cluster, []*corev1.Pod) {
	return karpenterPool(), workloads.NewGenerator().Diverse(n)
}

func topologyHeavyWorkload(n int) (Cluster, []*corev1.Pod) {
	return karpenterPool(), workloads.NewGenerator().TopologyHeavy(n)
}

func podAffinityWorkload(n int) (Cluster, []*corev1.Pod) {
	return karpenterPool(), workloads.NewGenerator().PodAffinity(n)
}

func BenchmarkDiverse1k(b *testing.B) {
	c, p := diverseWorkload(1000)
	benchmarkSolve(b, c, p)
}

func BenchmarkDiverse5k(b *testing.B) {
	c, p := diverseWorkload(5000)
	benchmarkSolve(b, c, p)
}

func BenchmarkTopologyHeavy5k(b *testing.B) {
	c, p := topologyHeavyWorkload(5000)
	benchmarkSolve(b, c, p)
}

func BenchmarkPodAffinity5k(b *testing.B) {
	c, p := podAffinityWorkload(5000)
	benchmarkSolve(b, c, p)
}
