// Package workloads makes the pods of Karpenter's public scheduling
// benchmark (kubernetes-sigs/karpenter, pkg/controllers/provisioning/
// scheduling, scheduling_benchmark_test.go) the way its generators do, so
// that the packer's benchmarks and the end-to-end test that binds them with
// the real kube-scheduler place the same pods: bare pods, each with
// requests drawn from 100m–1500m and 100Mi–4Gi and a label my-label (or
// my-affinity) of seven values. Spread selectors are drawn independently of
// the pod's own label, so spread-constrained pods count generic pods (and
// each other) in their domains: selectors shared between constrained and
// unconstrained pods, which is what makes the scheduler's binding order
// matter.
package workloads

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Generator draws pods from a fixed seed: the same calls make the same
// pods on every run.
type Generator struct {
	rnd  lcg
	next int
	// Namespace of the pods made ("default" unless set).
	Namespace string
	// Adjust, when set, changes each pod as it is made (a node selector, a
	// toleration, an image), after the draws.
	Adjust func(*corev1.Pod)
}

// NewGenerator returns the generator the benchmarks use.
func NewGenerator() *Generator { return &Generator{rnd: lcg(42), Namespace: "default"} }

// lcg is a tiny deterministic generator.
type lcg uint64

func (l *lcg) draw(n int) int {
	*l = *l*6364136223846793005 + 1442695040888963407
	return int(uint64(*l>>33) % uint64(n))
}

var (
	cpuRequests    = []string{"100m", "250m", "500m", "1000m", "1500m"}
	memoryRequests = []string{"100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"}
	labelValues    = []string{"a", "b", "c", "d", "e", "f", "g"}
)

func (g *Generator) value() string { return labelValues[g.rnd.draw(len(labelValues))] }

// pod draws a pod's requests, then applies the options and Adjust.
func (g *Generator) pod(opts ...func(*corev1.Pod)) *corev1.Pod {
	g.next++
	cpu := cpuRequests[g.rnd.draw(len(cpuRequests))]
	memory := memoryRequests[g.rnd.draw(len(memoryRequests))]
	name := fmt.Sprintf("k-%05d", g.next)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.Namespace, UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
			}},
		}}},
	}
	for _, opt := range opts {
		opt(p)
	}
	if g.Adjust != nil {
		g.Adjust(p)
	}
	return p
}

// Generic pods carry a random my-label and nothing else.
func (g *Generator) Generic(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		value := g.value()
		out[i] = g.pod(func(p *corev1.Pod) { p.Labels["my-label"] = value })
	}
	return out
}

// Spread pods carry a random my-label and a hard spread (max skew 1) over
// key of the pods with another random my-label.
func (g *Generator) Spread(n int, key string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		own, selected := g.value(), g.value()
		out[i] = g.pod(func(p *corev1.Pod) {
			p.Labels["my-label"] = own
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"my-label": selected}},
			}}
		})
	}
	return out
}

// Affinity pods require, over key, pods with their own my-affinity value
// (self-affinity: the first of a value may go anywhere).
func (g *Generator) Affinity(n int, key string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		value := g.value()
		out[i] = g.pod(func(p *corev1.Pod) {
			p.Labels["my-affinity"] = value
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"my-affinity": value}},
				}},
			}}
		})
	}
	return out
}

// AntiAffine pods all carry app=nginx and keep every other such pod off
// their node: each needs a node of its own.
func (g *Generator) AntiAffine(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = g.pod(func(p *corev1.Pod) {
			p.Labels["app"] = "nginx"
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx"}},
				}},
			}}
		})
	}
	return out
}

// Diverse is Karpenter's diverse mix: n pods in five equal parts, generic,
// spread over zones, spread over hostnames, zone self-affinity, and
// hostname anti-affinity among the whole part (n/5 nodes at least).
func (g *Generator) Diverse(n int) []*corev1.Pod {
	var out []*corev1.Pod
	out = append(out, g.Generic(n/5)...)
	out = append(out, g.Spread(n/5, corev1.LabelTopologyZone)...)
	out = append(out, g.Spread(n/5, corev1.LabelHostname)...)
	out = append(out, g.Affinity(n/5, corev1.LabelTopologyZone)...)
	out = append(out, g.AntiAffine(n/5)...)
	return append(out, g.Generic(n-len(out))...)
}

// TopologyHeavy is Karpenter's spread generators alone with the generic
// pods they count: a third generic, a third spread over zones, a third
// spread over hostnames.
func (g *Generator) TopologyHeavy(n int) []*corev1.Pod {
	var out []*corev1.Pod
	out = append(out, g.Generic(n/3)...)
	out = append(out, g.Spread(n/3, corev1.LabelTopologyZone)...)
	out = append(out, g.Spread(n/3, corev1.LabelHostname)...)
	return append(out, g.Generic(n-len(out))...)
}

// PodAffinity is Karpenter's pod affinity generator over zones: every pod
// requires the pods of its my-affinity value in its zone. (Over
// hostnames, the seven values would each need one node for n/7 pods,
// more than a node's pod slots: Karpenter dropped that part too.)
func (g *Generator) PodAffinity(n int) []*corev1.Pod {
	return g.Affinity(n, corev1.LabelTopologyZone)
}
