package provisioning

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/pkg/provider"
)

// cacheReader answers List and Get from objects in memory the way
// controller-runtime's informer cache does (pkg/cache/internal/
// cache_reader.go, v0.25.2): each object is deep-copied into the result
// unless the List asks for client.UnsafeDisableDeepCopy, and the list's
// items are set with meta.SetList, which copies each object's struct into
// the list. Nothing else of a client is there: a benchmark calling more
// panics.
type cacheReader struct {
	client.Client
	objects map[string][]runtime.Object
}

func (c *cacheReader) add(kind string, object runtime.Object) {
	c.objects[kind] = append(c.objects[kind], object)
}

func (c *cacheReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var options client.ListOptions
	options.ApplyOptions(opts)
	kind := fmt.Sprintf("%T", list)
	stored := c.objects[kind]
	out := make([]runtime.Object, 0, len(stored))
	for _, object := range stored {
		if options.UnsafeDisableDeepCopy == nil || !*options.UnsafeDisableDeepCopy {
			object = object.DeepCopyObject()
		}
		out = append(out, object)
	}
	return meta.SetList(list, out)
}

func (c *cacheReader) Get(_ context.Context, key client.ObjectKey, object client.Object, _ ...client.GetOption) error {
	for _, stored := range c.objects[fmt.Sprintf("%T", object)] {
		if stored.(client.Object).GetName() == key.Name {
			copied := stored.DeepCopyObject()
			// Same type: copy the struct the pointer points to.
			switch o := object.(type) {
			case *v1alpha1.NodeProvider:
				*o = *copied.(*v1alpha1.NodeProvider)
				return nil
			}
		}
	}
	return fmt.Errorf("%s not stored", key.Name)
}

// oneShape is a provider offering one shape, the pool's.
type oneShape struct {
	provider.Provider
	shape provider.Shape
}

func (o oneShape) Shapes(context.Context, *v1alpha1.NodePool) ([]provider.Shape, error) {
	return []provider.Shape{o.shape}, nil
}

func (o oneShape) ForProviderName(context.Context, string) (provider.Provider, error) { return o, nil }

type allAvailable struct{}

func (allAvailable) Narrow(_ string, zones, shapes []string) (available, unavailable []string, unavailableIn map[string][]string) {
	return zones, nil, nil
}

// A provisioning round on `make scale`'s cluster once it is up (1,000
// claims and nodes of 8 cpu / 32 GiB, each running ten pods of 800m /
// 1 GiB) for a batch of ten new pods: gathering the cluster from the
// cache and scheduling the batch. The target is 200 ms of CPU.
func BenchmarkProvisioningRoundOn1000FullNodes(b *testing.B) {
	cpu, memory := resource.MustParse("8"), resource.MustParse("32Gi")
	reader := &cacheReader{objects: map[string][]runtime.Object{}}
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "scale", UID: "pool", Generation: 1},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "large", CPU: &cpu, Memory: &memory}}},
		},
	}
	reader.add("*v1alpha1.NodePoolList", pool)
	reader.add("*v1alpha1.NodeProvider", &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: "sim"}})
	controller := true
	for i := range 1000 {
		name := fmt.Sprintf("scale-%04d", i)
		zone := []string{"zone-a", "zone-b"}[i%2]
		reader.add("*v1alpha1.NodeClaimList", &v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: map[string]string{v1alpha1.LabelNodePool: pool.Name}},
			Spec: v1alpha1.NodeClaimSpec{
				NodePoolRef: v1alpha1.NodePoolReference{Name: pool.Name},
				Shape:       v1alpha1.ClaimShape{Name: "large", CPU: cpu, Memory: memory},
			},
			Status: v1alpha1.NodeClaimStatus{NodeName: name, ProviderID: "simulated://" + name, Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionRegistered, Status: metav1.ConditionTrue},
				{Type: v1alpha1.ConditionInitialized, Status: metav1.ConditionTrue},
			}},
		})
		reader.add("*v1.NodeList", &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				v1alpha1.LabelNodePool: pool.Name, v1alpha1.LabelNodeClaim: name, corev1.LabelHostname: name,
				corev1.LabelTopologyZone: zone, corev1.LabelInstanceTypeStable: "large",
			}},
			Spec: corev1.NodeSpec{ProviderID: "simulated://" + name},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory, corev1.ResourcePods: resource.MustParse("110")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		})
		for d := range 10 {
			reader.add("*v1.PodList", scalePod(fmt.Sprintf("scale-%02d-%04d", d, i), fmt.Sprintf("scale-%02d", d), name, &controller))
		}
	}
	for i := range 10 {
		pod := scalePod(fmt.Sprintf("late-%02d", i), "late", "", &controller)
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		reader.add("*v1.PodList", pod)
	}
	podStore, nodeStore := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	for _, pod := range reader.objects["*v1.PodList"] {
		if err := podStore.Add(pod); err != nil {
			b.Fatal(err)
		}
	}
	for _, node := range reader.objects["*v1.NodeList"] {
		if err := nodeStore.Add(node); err != nil {
			b.Fatal(err)
		}
	}
	// What the handlers were told as the cluster came up.
	existing := scheduling.NewExisting()
	existing.SetSynced(func() bool { return true })
	for _, node := range nodeStore.List() {
		existing.SetNode(node.(*corev1.Node))
	}
	for _, pod := range podStore.List() {
		existing.SetPod(pod.(*corev1.Pod))
	}
	for _, source := range []struct {
		name    string
		objects ObjectSource
	}{
		{"listed", nil},
		{"from the informers' stores", clusterstate.ObjectsOf(podStore, nodeStore, nil)},
		{"kept by the informers' handlers", clusterstate.ObjectsOf(podStore, nodeStore, existing)},
	} {
		b.Run(source.name, func(b *testing.B) {
			p := &Provisioner{
				Kube: reader, Objects: source.objects, Providers: oneShape{shape: provider.Shape{Name: "large", Price: 0.8,
					Capacity: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory}}},
				Capacity: allAvailable{},
			}
			benchmarkRound(b, p)
		})
	}
}

func benchmarkRound(b *testing.B, p *Provisioner) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		input, _, err := p.gather(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(input.Nodes) != 1000 || len(input.Pods) != 10000 || len(input.Pending) != 10 {
			b.Fatalf("gathered %d nodes, %d pods, %d pending", len(input.Nodes), len(input.Pods), len(input.Pending))
		}
		result, err := solve(ctx, input)
		if err != nil {
			b.Fatal(err)
		}
		if len(result.NewNodes) != 1 {
			b.Fatalf("%d new nodes for ten late pods on full nodes, want 1", len(result.NewNodes))
		}
	}
}

// scalePod is a pod of `make scale`'s Deployments: 800m / 1 GiB, of a
// ReplicaSet.
func scalePod(name, app, node string, controller *bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID(name), Labels: map[string]string{"app": app},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app, UID: types.UID(app), Controller: controller}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("800m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
			}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}
