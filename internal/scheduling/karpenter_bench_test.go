package scheduling

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The workloads of Karpenter's public scheduling benchmark
// (kubernetes-sigs/karpenter, pkg/controllers/provisioning/scheduling,
// scheduling_benchmark_test.go), generated here the same way: bare pods,
// each with requests drawn from 100m–1500m and 100Mi–4Gi and a label
// my-label (or my-affinity) of seven values, on one pool of a 400-shape
// catalog in three zones. Spread selectors are drawn independently of the
// pod's own label, so spread-constrained pods count generic pods (and each
// other) in their domains: selectors shared between constrained and
// unconstrained pods.

// karpenterGen draws pods the way Karpenter's generators do.
type karpenterGen struct {
	rnd  lcg
	next int
}

func newKarpenterGen() *karpenterGen { return &karpenterGen{rnd: lcg(42)} }

var (
	karpenterCPU    = []string{"100m", "250m", "500m", "1000m", "1500m"}
	karpenterMemory = []string{"100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"}
	karpenterValues = []string{"a", "b", "c", "d", "e", "f", "g"}
)

func (g *karpenterGen) value() string { return karpenterValues[g.rnd.next(len(karpenterValues))] }

func (g *karpenterGen) pod(opts ...podOpt) *corev1.Pod {
	g.next++
	cpu := karpenterCPU[g.rnd.next(len(karpenterCPU))]
	mem := karpenterMemory[g.rnd.next(len(karpenterMemory))]
	return pod(fmt.Sprintf("k-%05d", g.next), cpu, mem, opts...)
}

// generic pods carry a random my-label and nothing else.
func (g *karpenterGen) generic(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = g.pod(label("my-label", g.value()))
	}
	return out
}

// spread pods carry a random my-label and a hard spread (max skew 1) over
// key of the pods with another random my-label.
func (g *karpenterGen) spread(n int, key string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		own, sel := g.value(), g.value()
		out[i] = g.pod(label("my-label", own), func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"my-label": sel}},
			}}
		})
	}
	return out
}

// affinity pods require, over key, pods with their own my-affinity value
// (self-affinity: the first of a value may go anywhere).
func (g *karpenterGen) affinity(n int, key string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		v := g.value()
		out[i] = g.pod(label("my-affinity", v), func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"my-affinity": v}},
				}},
			}}
		})
	}
	return out
}

// antiAffine pods all carry app=nginx and keep every other such pod off
// their node: each needs a node of its own.
func (g *karpenterGen) antiAffine(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = g.pod(label("app", "nginx"), podAntiAffinity(corev1.LabelHostname, "nginx"))
	}
	return out
}

func karpenterPool() Cluster {
	return Cluster{Pools: []Pool{nodePool("default", catalog(400), zones("a", "b", "c"))}}
}

// diverseWorkload is Karpenter's diverse mix: n pods in five equal parts,
// generic, spread over zones, spread over hostnames, zone self-affinity,
// and hostname anti-affinity among the whole part (n/5 nodes at least).
func diverseWorkload(n int) (Cluster, []*corev1.Pod) {
	g := newKarpenterGen()
	var out []*corev1.Pod
	out = append(out, g.generic(n/5)...)
	out = append(out, g.spread(n/5, corev1.LabelTopologyZone)...)
	out = append(out, g.spread(n/5, corev1.LabelHostname)...)
	out = append(out, g.affinity(n/5, corev1.LabelTopologyZone)...)
	out = append(out, g.antiAffine(n/5)...)
	out = append(out, g.generic(n-len(out))...)
	return karpenterPool(), out
}

// topologyHeavyWorkload is Karpenter's spread generators alone with the
// generic pods they count: a third generic, a third spread over zones, a
// third spread over hostnames.
func topologyHeavyWorkload(n int) (Cluster, []*corev1.Pod) {
	g := newKarpenterGen()
	var out []*corev1.Pod
	out = append(out, g.generic(n/3)...)
	out = append(out, g.spread(n/3, corev1.LabelTopologyZone)...)
	out = append(out, g.spread(n/3, corev1.LabelHostname)...)
	out = append(out, g.generic(n-len(out))...)
	return karpenterPool(), out
}

// podAffinityWorkload is Karpenter's pod affinity generator over zones:
// every pod requires the pods of its my-affinity value in its zone. (Over
// hostnames, the seven values would each need one node for n/7 pods,
// more than a node's pod slots: Karpenter dropped that part too.)
func podAffinityWorkload(n int) (Cluster, []*corev1.Pod) {
	return karpenterPool(), newKarpenterGen().affinity(n, corev1.LabelTopologyZone)
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
