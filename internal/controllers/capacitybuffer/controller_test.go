package capacitybuffer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1beta1 "github.com/claimscale/claimscale/api/autoscaling/v1beta1"
	"github.com/claimscale/claimscale/internal/capacitybackoff"
	"github.com/claimscale/claimscale/internal/controllers/provisioning"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/internal/warmcapacity"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// The controller against a real API server with the CapacityBuffer CRD:
// each test writes a buffer and what it names, reconciles it, and reads
// its status and the placeholders it keeps.

var env *testenv.Environment

func TestMain(m *testing.M) {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.RunMain(m, testenv.Options{CRDPaths: []string{filepath.Join(root, "config", "crd", "autoscaling")}}, &env, nil)
}

type fixture struct {
	t          *testing.T
	g          *WithT
	ctx        context.Context
	namespace  string
	controller *Controller
	changes    int
}

func newFixture(t *testing.T) *fixture {
	expect.Cleared(t, env.Client, "default")
	g := NewWithT(t)
	ctx := context.Background()
	namespace := fmt.Sprintf("cb-%d", time.Now().UnixNano()%1_000_000_000)
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	clk := clocktesting.NewFakeClock(time.Now())
	c2 := provider.Shape{Name: "c2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.1}
	f := &fixture{t: t, g: g, ctx: ctx, namespace: namespace}
	f.controller = &Controller{
		Kube: env.Client, Workloads: env.Client, Buffers: &Buffers{}, Clock: clk, Recheck: time.Second,
		Pools:   provisioning.Resolve(env.Client, fake.Resolver{Provider: fake.NewInfrastructure(c2).Provider("test")}, capacitybackoff.NewBackoff(clk)),
		Changed: func() { f.changes++ },
	}
	expect.Applied(t, env.Client, expect.Provider("sim"), expect.Pool("general", "sim", "c2"))
	return f
}

func (f *fixture) template(name, cpu string) {
	f.g.Expect(env.Client.Create(f.ctx, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.namespace},
		Template:   corev1.PodTemplateSpec{Spec: podSpec(cpu)},
	})).To(Succeed())
}

func podSpec(cpu string) corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}
}

func (f *fixture) buffer(name string, spec autoscalingv1beta1.CapacityBufferSpec) {
	f.g.Expect(env.Client.Create(f.ctx, &autoscalingv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.namespace}, Spec: spec})).To(Succeed())
}

func (f *fixture) reconcile(name string) *autoscalingv1beta1.CapacityBuffer {
	f.t.Helper()
	key := client.ObjectKey{Namespace: f.namespace, Name: name}
	_, err := f.controller.Reconcile(f.ctx, reconcile.Request{NamespacedName: key})
	f.g.Expect(err).NotTo(HaveOccurred())
	var buffer autoscalingv1beta1.CapacityBuffer
	f.g.Expect(env.Client.Get(f.ctx, key, &buffer)).To(Succeed())
	return &buffer
}

func condition(buffer *autoscalingv1beta1.CapacityBuffer, conditionType string) metav1.Condition {
	if c := meta.FindStatusCondition(buffer.Status.Conditions, conditionType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func TestABufferOfATemplateKeepsItsReplicasAsHeadroom(t *testing.T) {
	f := newFixture(t)
	f.template("chunk", "1")
	f.buffer("spare", autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "chunk"}, Replicas: ptr.To[int32](3)})

	buffer := f.reconcile("spare")

	f.g.Expect(buffer.Status.Replicas).To(HaveValue(BeEquivalentTo(3)))
	f.g.Expect(buffer.Status.PodTemplateRef).To(HaveValue(Equal(autoscalingv1beta1.LocalObjectRef{Name: "chunk"})))
	f.g.Expect(buffer.Status.ProvisioningStrategy).To(HaveValue(Equal(autoscalingv1beta1.ActiveCapacity)))
	f.g.Expect(condition(buffer, autoscalingv1beta1.ConditionReadyForProvisioning).Status).To(Equal(metav1.ConditionTrue))
	f.g.Expect(condition(buffer, autoscalingv1beta1.ConditionProvisioning).Reason).To(Equal(autoscalingv1beta1.ReasonKeptAsHeadroom))
	pods := f.controller.Buffers.Placeholders(f.ctx)
	f.g.Expect(pods).To(HaveLen(3))
	f.g.Expect(warmcapacity.IsPlaceholder(pods[0])).To(BeTrue())
	f.g.Expect(warmcapacity.Owner(pods[0])).To(Equal("CapacityBuffer " + f.namespace + "/spare"))
	f.g.Expect(*pods[0].Spec.Priority).To(BeEquivalentTo(warmcapacity.BufferPriority), "after every real pod")
	f.g.Expect(f.changes).To(Equal(1), "provisioning and disruption are told")

	f.reconcile("spare")
	f.g.Expect(f.changes).To(Equal(1), "an unchanged buffer changes no room")
}

func TestABufferWhoseTemplateIsGoneKeepsNothingAndSaysSo(t *testing.T) {
	f := newFixture(t)
	f.template("chunk", "1")
	f.buffer("spare", autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "chunk"}, Replicas: ptr.To[int32](2)})
	f.reconcile("spare")
	f.g.Expect(f.controller.Buffers.Placeholders(f.ctx)).To(HaveLen(2))

	f.g.Expect(env.Client.Delete(f.ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chunk", Namespace: f.namespace}})).To(Succeed())
	buffer := f.reconcile("spare")

	ready := condition(buffer, autoscalingv1beta1.ConditionReadyForProvisioning)
	f.g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(ready.Reason).To(Equal(autoscalingv1beta1.ReasonPodTemplateNotFound))
	f.g.Expect(ready.Message).To(ContainSubstring(f.namespace + "/chunk"))
	f.g.Expect(buffer.Status.Replicas).To(HaveValue(BeEquivalentTo(0)))
	f.g.Expect(f.controller.Buffers.Placeholders(f.ctx)).To(BeEmpty(), "its room goes")
}

func TestABufferOfAWorkloadIsAPercentageOfItsReplicasWithinItsLimits(t *testing.T) {
	f := newFixture(t)
	labels := map[string]string{"app": "web"}
	f.g.Expect(env.Client.Create(f.ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.namespace},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("500m")}},
	})).To(Succeed())
	limits := autoscalingv1beta1.ResourceList{"cpu": resource.MustParse("1")}
	f.buffer("web-spare", autoscalingv1beta1.CapacityBufferSpec{
		ScalableRef: &autoscalingv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}, Percentage: ptr.To[int32](25),
	})
	f.buffer("web-capped", autoscalingv1beta1.CapacityBufferSpec{
		ScalableRef: &autoscalingv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}, Percentage: ptr.To[int32](25), Limits: &limits,
	})
	f.buffer("gone", autoscalingv1beta1.CapacityBufferSpec{
		ScalableRef: &autoscalingv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "old"}, Replicas: ptr.To[int32](1),
	})

	f.g.Expect(f.reconcile("web-spare").Status.Replicas).To(HaveValue(BeEquivalentTo(3)), "a quarter of 10, rounded up")
	f.g.Expect(f.reconcile("web-capped").Status.Replicas).To(HaveValue(BeEquivalentTo(2)), "1 cpu holds two 500m chunks")
	gone := f.reconcile("gone")
	f.g.Expect(condition(gone, autoscalingv1beta1.ConditionReadyForProvisioning).Reason).To(Equal(autoscalingv1beta1.ReasonScalableNotFound))
	f.g.Expect(f.controller.Buffers.Placeholders(f.ctx)).To(HaveLen(5))
}

func TestABufferNoPoolCanHoldSaysSo(t *testing.T) {
	f := newFixture(t)
	f.template("huge", "8")
	f.buffer("too-big", autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "huge"}, Replicas: ptr.To[int32](1)})

	buffer := f.reconcile("too-big")

	provisioning := condition(buffer, autoscalingv1beta1.ConditionProvisioning)
	f.g.Expect(provisioning.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(provisioning.Reason).To(Equal(autoscalingv1beta1.ReasonNoPoolFits))
	f.g.Expect(f.controller.Buffers.Placeholders(f.ctx)).To(BeEmpty())
}
