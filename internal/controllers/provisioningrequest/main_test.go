package provisioningrequest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "github.com/claimscale/claimscale/api/autoscaling/v1"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/capacitybackoff"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/internal/warmcapacity"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// The controller against a real API server with the autoscaling CRDs: each
// test writes the cluster and the request, reconciles the request as the
// manager would, and reads the request's status and the claims it bought.
// The pools resolve through a real Provisioner over pkg/provider/fake.

var env *testenv.Environment

func TestMain(m *testing.M) {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.RunMain(m, testenv.Options{CRDPaths: []string{filepath.Join(root, "config", "crd", "autoscaling")}}, &env, nil)
}

var c2 = provider.Shape{Name: "c2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.1}

// fixture is one test's namespace, clock, provisioner and controller.
type fixture struct {
	t           *testing.T
	g           *WithT
	ctx         context.Context
	namespace   string
	clock       *clocktesting.FakeClock
	provisioner *provisioning.Provisioner
	controller  *Controller
	changes     int
}

func newFixture(t *testing.T) *fixture {
	expect.Cleared(t, env.Client, "default")
	g := NewWithT(t)
	ctx := context.Background()
	namespace := fmt.Sprintf("req-%d", time.Now().UnixNano()%1_000_000_000)
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	clk := clocktesting.NewFakeClock(time.Now())
	bookings := &Bookings{Kube: env.Client}
	f := &fixture{t: t, g: g, ctx: ctx, namespace: namespace, clock: clk}
	f.provisioner = &provisioning.Provisioner{
		Kube: env.Client, Providers: fake.Resolver{Provider: fake.NewInfrastructure(c2).Provider("test")},
		Capacity: capacitybackoff.NewBackoff(clk), Recorder: events.NewFakeRecorder(1000), Clock: clk,
		WarmCapacity: &warmcapacity.Source{Clock: clk, Reservations: []warmcapacity.Reservations{bookings}},
	}
	f.controller = &Controller{
		Kube: env.Client, Rounds: f.provisioner, Bookings: bookings, Recorder: events.NewFakeRecorder(1000), Clock: clk,
		BookingTime: 10 * time.Minute, Recheck: time.Second, Changed: func() { f.changes++ },
	}
	t.Cleanup(func() {
		for _, object := range []client.Object{&autoscalingv1.ProvisioningRequest{}, &corev1.PodTemplate{}, &corev1.ResourceQuota{}, &corev1.Pod{}} {
			_ = env.Client.DeleteAllOf(ctx, object, client.InNamespace(namespace), client.GracePeriodSeconds(0))
		}
	})
	return f
}

// pool makes the pool "general" of c2 nodes (2 cpu) with at most nodes
// nodes.
func (f *fixture) pool(nodes int32) {
	pool := expect.Pool("general", "sim", "c2")
	pool.Spec.Limits = &v1alpha1.Limits{Nodes: &nodes}
	expect.Applied(f.t, env.Client, expect.Provider("sim"), pool)
}

// template makes a PodTemplate whose pods request cpu.
func (f *fixture) template(name, cpu string) {
	f.g.Expect(env.Client.Create(f.ctx, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.namespace},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "train", Image: "train",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		}}}},
	})).To(Succeed())
}

// request makes a request of class for count pods of template.
func (f *fixture) request(name, class, template string, count int32, parameters map[string]autoscalingv1.Parameter) *autoscalingv1.ProvisioningRequest {
	request := &autoscalingv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.namespace},
		Spec: autoscalingv1.ProvisioningRequestSpec{
			ProvisioningClassName: class, Parameters: parameters,
			PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: template}, Count: count}},
		},
	}
	f.g.Expect(env.Client.Create(f.ctx, request)).To(Succeed())
	return request
}

// reconcile runs the controller on the request once.
func (f *fixture) reconcile(name string) reconcile.Result {
	f.t.Helper()
	result, err := f.controller.Reconcile(f.ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: f.namespace, Name: name}})
	f.g.Expect(err).NotTo(HaveOccurred())
	return result
}

// condition is the request's condition of type, empty when it has none.
func (f *fixture) condition(name, conditionType string) metav1.Condition {
	f.t.Helper()
	var request autoscalingv1.ProvisioningRequest
	f.g.Expect(env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.namespace, Name: name}, &request)).To(Succeed())
	if c := meta.FindStatusCondition(request.Status.Conditions, conditionType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// ready marks a claim's node Ready, as the lifecycle does once its node
// joined: registered, named, Ready.
func (f *fixture) ready(claim *v1alpha1.NodeClaim) {
	f.t.Helper()
	node := expect.ReadyNode(claim.Name, "fake://test/"+claim.Name, "2", "4Gi", map[string]string{v1alpha1.LabelNodePool: claim.Spec.NodePoolRef.Name})
	expect.Applied(f.t, env.Client, node)
	now := metav1.NewTime(f.clock.Now())
	claim.Status.ProviderID, claim.Status.NodeName = node.Spec.ProviderID, node.Name
	for _, conditionType := range []string{v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady} {
		meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: conditionType, Status: metav1.ConditionTrue, Reason: conditionType, LastTransitionTime: now})
	}
	f.g.Expect(env.Client.Status().Update(f.ctx, claim)).To(Succeed())
}

// consumer is a pod of the workload that uses the request, bound to node.
func (f *fixture) consumer(name, request, node, cpu string) {
	pod := expect.BoundPod(f.namespace, name, node, cpu, "1Gi")
	pod.Annotations = map[string]string{autoscalingv1.AnnotationConsumeProvisioningRequest: request}
	expect.Applied(f.t, env.Client, pod)
}
