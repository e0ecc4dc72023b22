// Package expect is what the API-server test suites share: builders for
// the objects a scenario starts from (a pending pod, a ready node, a pool,
// a NodeProvider), Applied to write them with their status, Claims to read
// what a controller wrote, and Cleared to leave the API server as the next
// test expects it. A suite reads like its scenario:
//
//	expect.Applied(t, kube, expect.Provider("sim"), expect.Pool("general", "sim", "c2"), expect.PendingPod("default", "web", "1", "1Gi"))
//	provisioner.Provision(ctx)
//	claims := expect.Claims(t, kube, "general")
package expect

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Provider is a NodeProvider named name. Its type is simulated, so the API
// server accepts it without credentials; what answers for it is whatever
// provider the test's resolver hands out.
func Provider(name string, zones ...string) *v1alpha1.NodeProvider {
	return &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeProviderSpec{
			Type: v1alpha1.ProviderTypeSimulated, Simulated: &v1alpha1.SimulatedSettings{Zones: zones},
		},
	}
}

// Pool is a NodePool of provider offering the named shapes, which resolve
// against the provider's catalog.
func Pool(name, provider string, shapes ...string) *v1alpha1.NodePool {
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.NodePoolSpec{ProviderRef: v1alpha1.ProviderReference{Name: provider}},
	}
	for _, shape := range shapes {
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed, v1alpha1.Shape{Name: shape})
	}
	return pool
}

// PendingPod is a pod the scheduler found no node for (PodScheduled=False,
// Unschedulable), requesting cpu and memory.
func PendingPod(namespace, name, cpu, memory string) *corev1.Pod {
	pod := pod(namespace, name, cpu, memory)
	pod.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
	}}
	return pod
}

// BoundPod is a running pod on node, requesting cpu and memory.
func BoundPod(namespace, name, node, cpu, memory string) *corev1.Pod {
	pod := pod(namespace, name, cpu, memory)
	pod.Spec.NodeName = node
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	return pod
}

func pod(namespace, name, cpu, memory string) *corev1.Pod {
	controller := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			// Owned, as a workload's pods are: disruption treats a pod
			// without a controller as one that would not come back.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "ReplicaSet", Name: name, UID: "00000000-0000-0000-0000-000000000001", Controller: &controller,
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
			}},
		}}},
	}
}

// ReadyNode is a Ready node with providerID, cpu and memory allocatable
// (and room for 110 pods), and labels.
func ReadyNode(name, providerID, cpu, memory string, labels map[string]string) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	all := map[string]string{corev1.LabelHostname: name}
	for k, v := range labels {
		all[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// Applied creates each object and then writes its status as given (a
// create drops the status). The objects are updated from the API server's
// answers.
func Applied(t testing.TB, kube client.Client, objects ...client.Object) {
	t.Helper()
	ctx := context.Background()
	for _, object := range objects {
		status := statusOf(object)
		if err := kube.Create(ctx, object); err != nil {
			t.Fatalf("creating %T %s: %v", object, object.GetName(), err)
		}
		if status == nil {
			continue
		}
		status(object)
		if err := kube.Status().Update(ctx, object); err != nil {
			t.Fatalf("writing the status of %T %s: %v", object, object.GetName(), err)
		}
	}
}

// statusOf returns what puts object's status back after a create, for the
// kinds whose status a scenario sets.
func statusOf(object client.Object) func(client.Object) {
	switch o := object.(type) {
	case *corev1.Pod:
		status := *o.Status.DeepCopy()
		return func(object client.Object) { object.(*corev1.Pod).Status = status }
	case *corev1.Node:
		status := *o.Status.DeepCopy()
		return func(object client.Object) { object.(*corev1.Node).Status = status }
	case *v1alpha1.NodeClaim:
		if o.Status.ProviderID == "" && o.Status.NodeName == "" && len(o.Status.Conditions) == 0 {
			return nil
		}
		status := *o.Status.DeepCopy()
		return func(object client.Object) { object.(*v1alpha1.NodeClaim).Status = status }
	}
	return nil
}

// Claims returns the claims of pool, oldest first, then by name.
func Claims(t testing.TB, kube client.Reader, pool string) []v1alpha1.NodeClaim {
	t.Helper()
	var list v1alpha1.NodeClaimList
	if err := kube.List(context.Background(), &list); err != nil {
		t.Fatalf("listing claims: %v", err)
	}
	var out []v1alpha1.NodeClaim
	for _, claim := range list.Items {
		if claim.Spec.NodePoolRef.Name == pool {
			out = append(out, claim)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.NodeClaim) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Cleared deletes, when the test ends, every object of the cluster-scoped
// kinds a scenario makes (nodes, claims, pools, NodeProviders) and the pods
// of namespace, finalizers and grace periods notwithstanding, and waits
// until they are gone, so the next test of the package starts from an
// empty cluster. The suites share one API server, and a round reads all of
// it.
func Cleared(t testing.TB, kube client.Client, namespace string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		g := gomega.NewWithT(t)
		lists := []client.ObjectList{&corev1.PodList{}, &v1alpha1.NodeClaimList{}, &corev1.NodeList{}, &v1alpha1.NodePoolList{}, &v1alpha1.NodeProviderList{}}
		for _, list := range lists {
			var opts []client.ListOption
			if _, pods := list.(*corev1.PodList); pods {
				opts = append(opts, client.InNamespace(namespace))
			}
			g.Eventually(func(g gomega.Gomega) {
				g.Expect(kube.List(ctx, list, opts...)).To(gomega.Succeed())
				objects := items(list)
				for _, object := range objects {
					g.Expect(remove(ctx, kube, object)).To(gomega.Succeed())
				}
				g.Expect(objects).To(gomega.BeEmpty())
			}).WithTimeout(30*time.Second).WithPolling(20*time.Millisecond).Should(gomega.Succeed(), "clearing %T", list)
		}
	})
}

func items(list client.ObjectList) []client.Object {
	objects, _ := meta.ExtractList(list)
	out := make([]client.Object, 0, len(objects))
	for _, object := range objects {
		out = append(out, object.(client.Object))
	}
	return out
}

// Events drains the events recorder has recorded so far, as the fake
// recorder formats them ("Normal Nominated pod should schedule on …").
func Events(recorder *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case event := <-recorder.Events:
			out = append(out, event)
		default:
			return out
		}
	}
}

// remove deletes object at once: its finalizers dropped, no grace period.
func remove(ctx context.Context, kube client.Client, object client.Object) error {
	if len(object.GetFinalizers()) > 0 {
		patch := client.MergeFrom(object.DeepCopyObject().(client.Object))
		object.SetFinalizers(nil)
		if err := kube.Patch(ctx, object, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("dropping the finalizers of %T %s: %w", object, object.GetName(), err)
		}
	}
	if err := kube.Delete(ctx, object, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %T %s: %w", object, object.GetName(), err)
	}
	return nil
}
