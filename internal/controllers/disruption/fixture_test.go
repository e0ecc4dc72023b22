package disruption

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// fixture builds the objects a round decides on: one pool, its claims and
// nodes, and pods, all in memory.
type fixture struct {
	now time.Time
	// leaving are the nodes going away: out of the snapshot, as
	// provisioning's gather leaves them, their pods still on them.
	leaving map[string]bool
	pool    *v1alpha1.NodePool
	others  []*v1alpha1.NodePool
	shapes  []scheduling.Shape
	claims  []v1alpha1.NodeClaim
	nodes   []corev1.Node
	pods    []corev1.Pod
	budgets []policyv1.PodDisruptionBudget
}

var (
	c4 = scheduling.Shape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"), Price: 0.4}
	c2 = scheduling.Shape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("8Gi"), Price: 0.2}
)

func newFixture(shapes ...scheduling.Shape) *fixture {
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Generation: 1},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "provider"},
			Template:    v1alpha1.NodeTemplate{Labels: map[string]string{"team": "a"}},
			Disruption: v1alpha1.Disruption{
				ConsolidationPolicy: v1alpha1.ConsolidationWhenEmptyOrUnderutilized,
				ConsolidateAfter:    &metav1.Duration{Duration: 10 * time.Second},
			},
		},
	}
	for _, shape := range shapes {
		cpu, memory := shape.CPU, shape.Memory
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed, v1alpha1.Shape{Name: shape.Name, CPU: &cpu, Memory: &memory})
	}
	return &fixture{now: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), pool: pool, shapes: shapes}
}

// otherPool adds a second pool of the same shapes; its nodes are added
// with nodeOf.
func (f *fixture) otherPool(pool *v1alpha1.NodePool) *fixture {
	f.others = append(f.others, pool)
	return f
}

// node adds an Initialized claim an hour old and its Ready node.
func (f *fixture) node(name string, shape scheduling.Shape) *fixture {
	return f.nodeOf(f.pool, name, shape)
}

// nodeOf adds an Initialized claim of the pool, an hour old, and its Ready
// node carrying the pool's template labels.
func (f *fixture) nodeOf(pool *v1alpha1.NodePool, name string, shape scheduling.Shape) *fixture {
	claimShape := v1alpha1.ClaimShape{Name: shape.Name, CPU: shape.CPU, Memory: shape.Memory}
	hourAgo := metav1.NewTime(f.now.Add(-time.Hour))
	f.claims = append(f.claims, v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), CreationTimestamp: hourAgo,
			Labels:      map[string]string{"team": pool.Spec.Template.Labels["team"], v1alpha1.LabelNodePool: pool.Name},
			Annotations: map[string]string{v1alpha1.AnnotationTemplateHash: pool.TemplateHash(claimShape)},
		},
		Spec: v1alpha1.NodeClaimSpec{NodePoolRef: v1alpha1.NodePoolReference{Name: pool.Name}, Shape: claimShape},
		Status: v1alpha1.NodeClaimStatus{NodeName: name, Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionInitialized, Status: metav1.ConditionTrue, LastTransitionTime: hourAgo},
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: hourAgo},
		}},
	})
	f.nodes = append(f.nodes, corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"team": pool.Spec.Template.Labels["team"], v1alpha1.LabelNodePool: pool.Name, v1alpha1.LabelNodeClaim: name,
			corev1.LabelHostname: name, corev1.LabelInstanceTypeStable: shape.Name,
		}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: shape.CPU, corev1.ResourceMemory: shape.Memory, corev1.ResourcePods: resource.MustParse("110")},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: shape.CPU, corev1.ResourceMemory: shape.Memory, corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	})
	return f
}

// pod adds a pod of a ReplicaSet, requesting cpu, on a node ("" for
// pending).
func (f *fixture) pod(name, node, cpu string, mutate ...func(*corev1.Pod)) *fixture {
	controller := true
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"},
			CreationTimestamp: metav1.NewTime(f.now.Add(-time.Minute)),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: &controller}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi"),
			}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if node == "" {
		pod.Status.Phase = corev1.PodPending
	}
	for _, m := range mutate {
		m(&pod)
	}
	f.pods = append(f.pods, pod)
	return f
}

// going marks a node's claim deleted and its node drained, its pods not yet
// evicted.
func (f *fixture) going(name string) *fixture {
	deleted := metav1.NewTime(f.now.Add(-time.Second))
	f.claim(name).DeletionTimestamp = &deleted
	if f.leaving == nil {
		f.leaving = map[string]bool{}
	}
	f.leaving[name] = true
	return f
}

func (f *fixture) claim(name string) *v1alpha1.NodeClaim {
	for i := range f.claims {
		if f.claims[i].Name == name {
			return &f.claims[i]
		}
	}
	panic("no claim " + name)
}

// state is what a round would read from the caches.
func (f *fixture) state() *state {
	input := scheduling.Input{Cluster: scheduling.Cluster{
		Pools: []scheduling.Pool{{NodePool: f.pool, Shapes: scheduling.Shapes{Fixed: f.shapes}}},
	}}
	pools := []v1alpha1.NodePool{*f.pool}
	for _, other := range f.others {
		input.Pools = append(input.Pools, scheduling.Pool{NodePool: other, Shapes: scheduling.Shapes{Fixed: f.shapes}})
		pools = append(pools, *other)
	}
	var nodes []*corev1.Node
	for i := range f.nodes {
		nodes = append(nodes, &f.nodes[i])
		if !f.leaving[f.nodes[i].Name] {
			input.Nodes = append(input.Nodes, &f.nodes[i])
		}
	}
	for i := range f.pods {
		// As clusterstate's picture: a nominated pod is its node's.
		if scheduling.CountedOn(&f.pods[i]) != "" {
			input.Pods = append(input.Pods, &f.pods[i])
		} else {
			input.Pending = append(input.Pending, &f.pods[i])
		}
	}
	for i := range f.claims {
		claim := &f.claims[i]
		// A sleeping machine is no node in flight: provisioning may wake
		// it, nothing places pods on it before.
		if !isRegistered(claim) && !claim.Asleep() {
			input.InFlight = append(input.InFlight, scheduling.InFlight{Name: claim.Name, Pool: claim.Spec.NodePoolRef.Name,
				Shape: scheduling.Shape{Name: claim.Spec.Shape.Name, CPU: claim.Spec.Shape.CPU, Memory: claim.Spec.Shape.Memory}})
		}
	}
	return newState(f.now, objects{
		input: input, pools: pools, claims: f.claims, nodes: nodes,
		pods: pointers(f.pods), budgets: f.budgets,
	})
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func isRegistered(claim *v1alpha1.NodeClaim) bool {
	return claim.Status.NodeName != ""
}

// round classifies the state's candidates, every node stable for an hour.
func (f *fixture) round(s *state) *round {
	stable := map[string]time.Time{}
	for _, node := range f.nodes {
		stable[node.Name] = f.now.Add(-time.Hour)
	}
	pools, total, disrupting := s.poolTotals()
	budgets, errs := newLedger(pools, total, disrupting, f.now)
	for _, err := range errs {
		panic(err)
	}
	return newRound(s, s.candidates(), budgets, stable, nil, newMemory(memoryBackoff))
}
