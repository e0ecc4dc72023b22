package simulated

import (
	"testing"

	"github.com/onsi/gomega"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// A machine of a shape with template ResourceSlices publishes them once
// its Node registers, as a DRA driver's kubelet plugin would: local to the
// Node, in its own pool, owned by the Node; deleting the machine deletes
// them with its Node.
func TestAMachinesDriverPublishesItsShapesSlices(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "pool")},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "sim"},
			Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{
				Name: "s-4-8", CPU: ptr.To(resource.MustParse("4")), Memory: ptr.To(resource.MustParse("8Gi")),
				ResourceSlices: []v1alpha1.TemplateResourceSlice{{
					Driver: "gpu.example.com",
					Devices: []v1alpha1.TemplateDevice{{
						Name:       "gpu-0",
						Attributes: map[string]v1alpha1.TemplateDeviceAttribute{"model": {String: ptr.To("a100")}},
						Capacity:   map[string]resource.Quantity{"memory": resource.MustParse("80Gi")},
					}},
				}},
			}}},
		},
	}
	g.Expect(env.Client.Create(t.Context(), pool)).To(gomega.Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), pool) })

	p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, Config{})
	claim := newClaim(uniqueName(t, "gpu"), pool.Name)
	made, err := p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	slicesOf := func() []resourcev1.ResourceSlice {
		var list resourcev1.ResourceSliceList
		g.Expect(env.Client.List(t.Context(), &list, client.MatchingLabels{LabelDriverNode: claim.Name})).To(gomega.Succeed())
		return list.Items
	}
	g.Expect(slicesOf()).To(gomega.BeEmpty(), "no slices before the Node registers")

	g.Expect(NewRegistrar(env.Client, ns, "c1", Config{}).RegisterDue(t.Context())).To(gomega.Succeed())
	node := getNode(g, t, claim.Name)
	g.Expect(node).NotTo(gomega.BeNil())
	published := slicesOf()
	g.Expect(published).To(gomega.HaveLen(1))
	slice := published[0]
	g.Expect(slice.Spec.Driver).To(gomega.Equal("gpu.example.com"))
	g.Expect(slice.Spec.NodeName).To(gomega.Equal(ptr.To(claim.Name)))
	g.Expect(slice.Spec.Pool.Name).To(gomega.Equal(claim.Name))
	g.Expect(slice.OwnerReferences).To(gomega.ConsistOf(gomega.HaveField("UID", node.UID)))
	g.Expect(slice.Spec.Devices).To(gomega.HaveLen(1))
	g.Expect(*slice.Spec.Devices[0].Attributes["model"].StringValue).To(gomega.Equal("a100"))

	// Woken after a sleep, the machine registers a Node of the same name
	// anew: its driver hands the slice to that Node.
	records := machineRecords(t, ns)
	g.Expect(records).To(gomega.HaveLen(1))
	m, err := machineFromConfigMap(&records[0])
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(m.slices).To(gomega.HaveLen(1), "the record keeps the slices to publish")
	again := node.DeepCopy()
	again.UID = "a-later-node"
	g.Expect(publishSlices(t.Context(), env.Client, m, again)).To(gomega.Succeed())
	g.Expect(slicesOf()).To(gomega.ConsistOf(gomega.HaveField("OwnerReferences", gomega.ConsistOf(gomega.HaveField("UID", again.UID)))))

	g.Expect(p.Delete(t.Context(), made.ProviderID)).To(gomega.Succeed())
	g.Eventually(slicesOf).Should(gomega.BeEmpty())
}
