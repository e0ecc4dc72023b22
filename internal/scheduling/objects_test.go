package scheduling

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Builders for the objects the tests and benchmarks feed the simulator.

func q(s string) resource.Quantity { return resource.MustParse(s) }

func shape(name, cpu, mem string, price float64) Shape {
	return Shape{Name: name, CPU: q(cpu), Memory: q(mem), Price: price}
}

type poolOpt func(*v1alpha1.NodePool, *Pool)

func nodePool(name string, shapes []Shape, opts ...poolOpt) Pool {
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p := Pool{NodePool: np, Shapes: Shapes{Fixed: shapes}}
	for _, o := range opts {
		o(np, &p)
	}
	return p
}

func weight(w int32) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) { np.Spec.Weight = w }
}

func poolLabels(kv ...string) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) {
		np.Spec.Template.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			np.Spec.Template.Labels[kv[i]] = kv[i+1]
		}
	}
}

func poolTaint(key, value string) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) {
		np.Spec.Template.Taints = append(np.Spec.Template.Taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule})
	}
}

func zones(z ...string) poolOpt {
	return func(_ *v1alpha1.NodePool, p *Pool) { p.Zones = z }
}

func maxPodsOpt(n int32) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) { np.Spec.Template.Kubelet.MaxPods = &n }
}

func limitNodes(n int32) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) {
		if np.Spec.Limits == nil {
			np.Spec.Limits = &v1alpha1.Limits{}
		}
		np.Spec.Limits.Nodes = &n
	}
}

func limitCPU(cpu string) poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) {
		if np.Spec.Limits == nil {
			np.Spec.Limits = &v1alpha1.Limits{}
		}
		c := q(cpu)
		np.Spec.Limits.CPU = &c
	}
}

func inUse(nodes int64, cpu, mem string) poolOpt {
	return func(_ *v1alpha1.NodePool, p *Pool) {
		p.InUse = Usage{Nodes: nodes, CPU: q(cpu), Memory: q(mem)}
	}
}

func unavailable(names ...string) poolOpt {
	return func(_ *v1alpha1.NodePool, p *Pool) { p.Unavailable = names }
}

// noEviction makes allocatable equal capacity, so tests can reason in round
// numbers.
func noEviction() poolOpt {
	return func(np *v1alpha1.NodePool, _ *Pool) {
		np.Spec.Template.Kubelet.EvictionHard = map[string]v1alpha1.EvictionThreshold{"memory.available": "0"}
	}
}

type podOpt func(*corev1.Pod)

// pod makes a pending pod of one container. Pods of one owner with equal
// options form one equivalence class.
func pod(name, cpu, mem string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Labels: map[string]string{},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: q(cpu), corev1.ResourceMemory: q(mem),
			}},
		}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func owner(name string) podOpt {
	return func(p *corev1.Pod) {
		t := true
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: types.UID("rs-" + name), Controller: &t,
		}}
	}
}

func label(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Labels[k] = v }
}

func nodeSelector(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[k] = v
	}
}

func nodeAffinity(key string, op corev1.NodeSelectorOperator, values ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: key, Operator: op, Values: values,
				}}}},
			},
		}}
	}
}

func tolerate(key string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}

func hostPort(port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
	}
}

func spread(key string, maxSkew int32, app string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		})
	}
}

func podAntiAffinity(key, app string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			}},
		}
	}
}

func podAffinity(key, app string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			}},
		}
	}
}

func onNode(node string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodRunning
	}
}

// pods makes n pods of one Deployment-like owner.
func pods(n int, prefix, cpu, mem string, opts ...podOpt) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = pod(fmt.Sprintf("%s-%05d", prefix, i), cpu, mem, append([]podOpt{owner(prefix), label("app", prefix)}, opts...)...)
	}
	return out
}

func node(name, cpu, mem string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	l := map[string]string{corev1.LabelHostname: name}
	for k, v := range labels {
		l[k] = v
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: q(cpu), corev1.ResourceMemory: q(mem),
		corev1.ResourcePods: q("110"), corev1.ResourceEphemeralStorage: q("100Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity: rl, Allocatable: rl,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func daemonSet(name, cpu, mem string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID("ds-" + name)},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"ds": name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "agent",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: q(cpu), corev1.ResourceMemory: q(mem),
				}},
			}}},
		}},
	}
}

// Pods whose parts the informer's cache shares compare by pointer; a
// shorter slice over the same elements, or another map, is still compared
// by content.
func TestSameClassTakesSharedPartsAsEqual(t *testing.T) {
	tolerations := []corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}, {Key: "b", Operator: corev1.TolerationOpExists}}
	first, second := pod("web-1", "1", "1Gi", owner("web")), pod("web-2", "1", "1Gi", owner("web"))
	second.Labels, second.Spec.Containers = first.Labels, first.Spec.Containers
	first.Spec.Tolerations, second.Spec.Tolerations = tolerations, tolerations
	if !sameClass(first, second) {
		t.Fatal("two pods sharing their parts are of different classes")
	}
	second.Spec.Tolerations = tolerations[:1]
	if sameClass(first, second) {
		t.Error("a pod tolerating less, over the same elements, is of the same class")
	}
	second.Spec.Tolerations = tolerations
	second.Spec.Containers = slices.Clone(first.Spec.Containers)
	second.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("1Gi")}
	if sameClass(first, second) {
		t.Error("a pod requesting more in a container of its own is of the same class")
	}
}
