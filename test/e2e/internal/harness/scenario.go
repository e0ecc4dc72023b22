package harness

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	autoscalingv1beta1 "github.com/claimscale/claimscale/api/autoscaling/v1beta1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

// Scenario holds one test's provider, pool and namespace, all named after
// the test so tests never see each other's objects.
type Scenario struct {
	T         *testing.T
	G         *WithT
	Name      string
	Namespace string
	Ctx       context.Context
}

// NewScenario makes the test's namespace, named name like its provider
// and pool; Eventually waits up to 3 minutes by default.
func NewScenario(t *testing.T, name string) *Scenario {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	s := &Scenario{T: t, G: g, Name: name, Namespace: name, Ctx: context.Background()}
	g.Expect(env.Client.Create(s.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return s
}

// CreateProvider makes the scenario's simulated NodeProvider.
func (s *Scenario) CreateProvider(settings v1alpha1.SimulatedSettings) {
	if settings.BootDelay == nil {
		settings.BootDelay = &metav1.Duration{Duration: time.Second}
	}
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &settings},
	})).To(Succeed())
}

// CreatePool makes the scenario's pool; mutate adjusts the defaults: one
// shape of 4 cpu and 16Gi, nodes removed 5s after they empty.
func (s *Scenario) CreatePool(mutate func(*v1alpha1.NodePool)) *v1alpha1.NodePool {
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: s.Name},
			Template: v1alpha1.NodeTemplate{
				Labels: map[string]string{"scenario": s.Name},
			},
			Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "c4", CPU: Qty("4"), Memory: Qty("16Gi"), Price: "0.1"},
			}},
			Limits: &v1alpha1.Limits{Nodes: Ptr(int32(20))},
			Disruption: v1alpha1.Disruption{
				ConsolidationPolicy: v1alpha1.ConsolidationWhenEmpty,
				ConsolidateAfter:    &metav1.Duration{Duration: 5 * time.Second},
				Budgets:             []v1alpha1.Budget{{Nodes: "100%"}},
			},
		},
	}
	if mutate != nil {
		mutate(pool)
	}
	s.G.Expect(env.Client.Create(s.Ctx, pool)).To(Succeed())
	return pool
}

// CreateDeployment makes a Deployment whose pods land only on the
// scenario's pool (by its template label) and request cpu each.
func (s *Scenario) CreateDeployment(name string, replicas int32, cpu string, mutate func(*appsv1.Deployment)) *appsv1.Deployment {
	deployment := s.DeploymentObject(name, replicas, cpu)
	if mutate != nil {
		mutate(deployment)
	}
	s.G.Expect(env.Client.Create(s.Ctx, deployment)).To(Succeed())
	return deployment
}

// DeploymentObject is the Deployment CreateDeployment makes, unwritten.
func (s *Scenario) DeploymentObject(name string, replicas int32, cpu string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	deployment := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: Ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"scenario": s.Name},
					Tolerations:  []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.example/app:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi"),
						}},
					}},
				},
			},
		},
	}
	return deployment
}

// Scale sets the Deployment's replicas.
func (s *Scenario) Scale(deployment *appsv1.Deployment, replicas int32) {
	s.G.Eventually(func() error {
		if err := env.Client.Get(s.Ctx, client.ObjectKeyFromObject(deployment), deployment); err != nil {
			return err
		}
		deployment.Spec.Replicas = Ptr(replicas)
		return env.Client.Update(s.Ctx, deployment)
	}).Should(Succeed())
}

// Claims returns the scenario pool's claims.
func (s *Scenario) Claims() []v1alpha1.NodeClaim {
	var list v1alpha1.NodeClaimList
	s.G.Expect(env.Client.List(s.Ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: s.Name})).To(Succeed())
	return list.Items
}

// Nodes returns the scenario pool's nodes.
func (s *Scenario) Nodes() []corev1.Node {
	var list corev1.NodeList
	s.G.Expect(env.Client.List(s.Ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: s.Name})).To(Succeed())
	return list.Items
}

// Machines returns the simulated machines of the scenario's pool.
func (s *Scenario) Machines() []corev1.ConfigMap {
	return MachinesOf(s.G, client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodePool: s.Name})
}

// MachinesOf returns the simulated machines the selector picks.
func MachinesOf(g *WithT, selector client.MatchingLabels) []corev1.ConfigMap {
	var list corev1.ConfigMapList
	g.Expect(env.Client.List(context.Background(), &list, client.InNamespace(ControllerNamespace), selector)).To(Succeed())
	return list.Items
}

// Pods returns the pods of the scenario's namespace with a label app=name,
// or all of them for "".
func (s *Scenario) Pods(app string) []corev1.Pod {
	options := []client.ListOption{client.InNamespace(s.Namespace)}
	if app != "" {
		options = append(options, client.MatchingLabels{"app": app})
	}
	var list corev1.PodList
	s.G.Expect(env.Client.List(s.Ctx, &list, options...)).To(Succeed())
	return list.Items
}

// RunningPods counts the pods of an app ("": any) that are Running on a
// node.
func (s *Scenario) RunningPods(app string) int {
	running := 0
	for _, pod := range s.Pods(app) {
		if pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero() {
			running++
		}
	}
	return running
}

// ReadyClaims counts the pool's claims with Ready=True.
func (s *Scenario) ReadyClaims() int {
	ready := 0
	for _, claim := range s.Claims() {
		for _, condition := range claim.Status.Conditions {
			if condition.Type == v1alpha1.ConditionReady && condition.Status == metav1.ConditionTrue {
				ready++
			}
		}
	}
	return ready
}

// Cleanup removes the scenario's workloads and waits until the pool has
// no claims, nodes or machines left, then removes the pool and provider.
func (s *Scenario) Cleanup() {
	s.T.Helper()
	g := s.G
	g.Expect(client.IgnoreNotFound(env.Client.Delete(s.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace}}))).To(Succeed())
	// Requests and buffers keep room, which would keep nodes.
	g.Expect(env.Client.DeleteAllOf(s.Ctx, &autoscalingv1.ProvisioningRequest{}, client.InNamespace(s.Namespace))).To(Succeed())
	g.Expect(env.Client.DeleteAllOf(s.Ctx, &autoscalingv1beta1.CapacityBuffer{}, client.InNamespace(s.Namespace))).To(Succeed())
	var deployments appsv1.DeploymentList
	g.Expect(env.Client.List(s.Ctx, &deployments, client.InNamespace(s.Namespace))).To(Succeed())
	for i := range deployments.Items {
		g.Expect(client.IgnoreNotFound(env.Client.Delete(s.Ctx, &deployments.Items[i]))).To(Succeed())
	}
	// No namespace controller runs here, and the API server refuses an
	// eviction in a namespace being deleted: pods of no owner are deleted
	// by hand, or the drains of the claims below would wait for them.
	g.Expect(env.Client.DeleteAllOf(s.Ctx, &corev1.Pod{}, client.InNamespace(s.Namespace), client.GracePeriodSeconds(0))).To(Succeed())
	for _, claim := range s.Claims() {
		g.Expect(client.IgnoreNotFound(env.Client.Delete(s.Ctx, &claim))).To(Succeed())
	}
	g.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero(),
		"claims, nodes and machines of pool %s left after cleanup", s.Name)
	g.Expect(client.IgnoreNotFound(env.Client.Delete(s.Ctx, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: s.Name}}))).To(Succeed())
	g.Expect(client.IgnoreNotFound(env.Client.Delete(s.Ctx, &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: s.Name}}))).To(Succeed())
}

// Qty is a parsed quantity, for the pointer fields of shapes and limits.
func Qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// Ptr points at a copy of v.
func Ptr[T any](v T) *T { return &v }
