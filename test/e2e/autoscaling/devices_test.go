package autoscaling

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// A pod asking nvidia.com/gpu: 1 gets a node of the pool's GPU shape, not
// of its cheaper shape without one; the simulated machine's Node
// advertises the GPU, and the kube-scheduler binds the pod there.
func TestAPodAskingAGPUGetsANodeOfTheGPUShape(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "devices-gpu")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed, v1alpha1.Shape{
			Name: "g1", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "1",
			ExtendedResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		})
	})
	s.CreateDeployment("train", 1, "1", asking("nvidia.com/gpu", "1"))

	s.G.Eventually(func() int { return s.RunningPods("train") }).Should(Equal(1))
	claims := s.Claims()
	s.G.Expect(claims).To(HaveLen(1))
	s.G.Expect(claims[0].Spec.Shape.Name).To(Equal("g1"))
	s.G.Expect(claims[0].Spec.Shape.ExtendedResources).To(HaveKey(corev1.ResourceName("nvidia.com/gpu")))
	pod := s.Pods("train")[0]
	node := &corev1.Node{}
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node)).To(Succeed())
	s.G.Expect(node.Status.Allocatable.Name("nvidia.com/gpu", resource.DecimalSI).Value()).To(BeEquivalentTo(1))
	s.G.Expect(node.Labels).To(HaveKeyWithValue(v1alpha1.LabelGPU, "g1"))
}

// A pod whose ResourceClaim, made from a template by kube-controller-
// manager, asks for an a100 through a DeviceClass gets a node of the
// shape whose template slices have one (not the t4 shape, not the plain
// one); the simulated machine's driver publishes the slices, and the
// kube-scheduler allocates the device and binds the pod.
func TestAPodWithAResourceClaimGetsANodeWhoseSlicesSatisfyIt(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "devices-dra")
	defer s.Cleanup()
	class := gpuDeviceClass(s)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed,
			v1alpha1.Shape{Name: "t4", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.5", ResourceSlices: gpuSlices("t4")},
			v1alpha1.Shape{Name: "a100", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "2", ResourceSlices: gpuSlices("a100")},
		)
	})
	claimTemplate(s, "a100", class)
	s.CreateDeployment("train", 1, "1", claiming("a100"))

	s.G.Eventually(func() int { return s.RunningPods("train") }).Should(Equal(1))
	claims := s.Claims()
	s.G.Expect(claims).To(HaveLen(1))
	s.G.Expect(claims[0].Spec.Shape.Name).To(Equal("a100"))
	pod := s.Pods("train")[0]
	s.G.Expect(pod.Status.ResourceClaimStatuses).To(HaveLen(1))
	allocated := &resourcev1.ResourceClaim{}
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Namespace: s.Namespace, Name: *pod.Status.ResourceClaimStatuses[0].ResourceClaimName}, allocated)).To(Succeed())
	s.G.Expect(allocated.Status.Allocation).NotTo(BeNil())
	s.G.Expect(allocated.Status.Allocation.Devices.Results).To(ConsistOf(And(
		HaveField("Driver", "gpu.example.com"), HaveField("Pool", pod.Spec.NodeName), HaveField("Device", "gpu-0"))))
}

// A pod asking for a device no pool has, as an extended resource or
// through a claim, gets no node, and why and its event name what it asks
// for.
func TestAPodAskingADeviceNoPoolHasGetsAWhyAndNoNode(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "devices-none")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	class := gpuDeviceClass(s)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed,
			v1alpha1.Shape{Name: "t4", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.5", ResourceSlices: gpuSlices("t4")})
	})
	claimTemplate(s, "h100", class)
	s.CreateDeployment("fpga", 1, "1", asking("example.com/fpga", "1"))
	s.CreateDeployment("h100", 1, "1", claiming("h100"))

	for app, want := range map[string]string{
		"fpga": `no shape of the pool has example.com/fpga`,
		"h100": `no shape of the pool has the devices the pod's resource claims ask for: claim ` + s.Namespace + `/`,
	} {
		var out string
		s.G.Eventually(func(g Gomega) {
			pods := s.Pods(app)
			g.Expect(pods).To(HaveLen(1))
			out = cli.Why(g, "pod/"+pods[0].Name, "-n", s.Namespace)
			g.Expect(out).To(ContainSubstring("Unschedulable"))
			g.Expect(out).To(ContainSubstring(want))
			g.Expect(harness.ContainsAny(harness.EventsOf(s.G, "Pod", pods[0].Name), want)).To(BeTrue(), "the pod's event says the same")
		}).Should(Succeed())
		t.Logf("kubectl claimscale why pod (%s):\n%s", app, out)
	}
	s.G.Expect(s.Claims()).To(BeEmpty(), "no node for a device no pool has")
}

// asking makes a Deployment's pods ask for an extended resource.
func asking(name corev1.ResourceName, count string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Resources.Requests[name] = resource.MustParse(count)
		c.Resources.Limits = corev1.ResourceList{name: resource.MustParse(count)}
	}
}

// claiming makes a Deployment's pods claim a device through the
// scenario's template for a model.
func claiming(model string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		spec := &d.Spec.Template.Spec
		spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: harness.Ptr(model)}}
		spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
}

// gpuDeviceClass is a DeviceClass of the scenario selecting the GPU
// driver's devices by a CEL selector, deleted with the test.
func gpuDeviceClass(s *harness.Scenario) string {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name + "-gpu"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`},
		}}},
	}
	s.G.Expect(env.Client.Create(s.Ctx, class)).To(Succeed())
	s.T.Cleanup(func() { _ = env.Client.Delete(s.Ctx, class) })
	return class.Name
}

// claimTemplate is a ResourceClaimTemplate, named after the model, whose
// claims ask for one device of the class with that model attribute.
func claimTemplate(s *harness.Scenario, model, class string) {
	s.G.Expect(env.Client.Create(s.Ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: model, Namespace: s.Namespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: class,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: `device.attributes["gpu.example.com"].model == "` + model + `"`,
				}}},
			}}},
		}}},
	})).To(Succeed())
}

// gpuSlices are the template slices of one GPU of a model.
func gpuSlices(model string) []v1alpha1.TemplateResourceSlice {
	return []v1alpha1.TemplateResourceSlice{{
		Driver: "gpu.example.com",
		Devices: []v1alpha1.TemplateDevice{{
			Name:       "gpu-0",
			Attributes: map[string]v1alpha1.TemplateDeviceAttribute{"model": {String: harness.Ptr(model)}},
			Capacity:   map[string]resource.Quantity{"memory": resource.MustParse("40Gi")},
		}},
	}}
}
