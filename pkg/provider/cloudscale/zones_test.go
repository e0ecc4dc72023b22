package cloudscale_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	cs "github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

func twoZones(s *v1alpha1.CloudscaleSettings) {
	s.Zone = ""
	s.Interfaces = []v1alpha1.CloudscaleInterface{{Network: "net-shared"}}
	s.ServerGroups = []string{"sg-shared"}
	s.Zones = []v1alpha1.CloudscaleZone{
		{Name: "lpg1"},
		{Name: "rma1", Interfaces: []v1alpha1.CloudscaleInterface{{Subnet: "subnet-rma1"}}, ServerGroups: []string{"sg-rma1"}},
	}
}

func inZones(c *v1alpha1.NodeClaim, op corev1.NodeSelectorOperator, zones ...string) *v1alpha1.NodeClaim {
	c.Spec.Requirements.NodeSelector = append(c.Spec.Requirements.NodeSelector,
		corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: op, Values: zones})
	return c
}

func TestServersAreMadeInTheClaimsZoneWithThatZonesSettings(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withSettings(twoZones), withServerGroups(
		cloudscaletest.ServerGroupSpec{UUID: "sg-shared", Name: "shared", Zone: "lpg1"},
		cloudscaletest.ServerGroupSpec{UUID: "sg-rma1", Name: "rma1", Zone: "rma1"},
	))

	inst, err := e.p.Create(e.ctx, inZones(claim("in-rma1", "workers", "flex-4-2"), corev1.NodeSelectorOpIn, "rma1"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "rma1"))
	g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyRegion, "rma"))

	inst, err = e.p.Create(e.ctx, inZones(claim("not-lpg1", "workers", "flex-4-2"), corev1.NodeSelectorOpNotIn, "lpg1"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "rma1"))

	inst, err = e.p.Create(e.ctx, claim("anywhere", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "lpg1"), "a claim without a zone goes to the first zone")

	bodies := postBodies(t, e.api)
	g.Expect(bodies).To(HaveLen(3))
	g.Expect(bodies[0]).To(HaveKeyWithValue("zone", "rma1"))
	g.Expect(bodies[0]).To(HaveKeyWithValue("server_groups", ConsistOf("sg-rma1")), "the zone's own server groups")
	g.Expect(bodies[0]).To(HaveKeyWithValue("interfaces", ContainElement(HaveKeyWithValue("addresses", ConsistOf(HaveKeyWithValue("subnet", "subnet-rma1"))))))
	g.Expect(bodies[2]).To(HaveKeyWithValue("zone", "lpg1"))
	g.Expect(bodies[2]).To(HaveKeyWithValue("server_groups", ConsistOf("sg-shared")), "a zone without its own inherits the shared ones")
	g.Expect(bodies[2]).To(HaveKeyWithValue("interfaces", ContainElement(HaveKeyWithValue("network", "net-shared"))))

	zones := map[string]string{}
	for _, srv := range e.api.Servers() {
		zones[srv.Name] = srv.Zone.Slug
	}
	g.Expect(zones).To(Equal(map[string]string{"in-rma1": "rma1", "not-lpg1": "rma1", "anywhere": "lpg1"}))
}

func TestClaimForAZoneTheProviderDoesNotServeIsTerminal(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withSettings(twoZones))
	_, err := e.p.Create(e.ctx, inZones(claim("c1", "workers", "flex-4-2"), corev1.NodeSelectorOpIn, "gva1"), provider.CreateOptions{})
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("makes servers in zones lpg1, rma1 only"))
	g.Expect(e.api.Servers()).To(BeEmpty())
}

func TestOldSingleZoneStillWorks(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withSettings(func(s *v1alpha1.CloudscaleSettings) { s.Zone = "rma1" }))
	inst, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "rma1"))
	g.Expect(postBodies(t, e.api)[0]).To(HaveKeyWithValue("zone", "rma1"))
}

func TestZoneSettingsAreChecked(t *testing.T) {
	for _, tt := range []struct {
		name    string
		mutate  func(*v1alpha1.CloudscaleSettings)
		wantErr string
	}{
		{"zone and zones together", func(s *v1alpha1.CloudscaleSettings) { s.Zones = []v1alpha1.CloudscaleZone{{Name: "rma1"}} }, "sets both zone and zones"},
		{"neither", func(s *v1alpha1.CloudscaleSettings) { s.Zone = "" }, "spec.cloudscale.zones is empty"},
		{"a zone twice", func(s *v1alpha1.CloudscaleSettings) {
			s.Zone = ""
			s.Zones = []v1alpha1.CloudscaleZone{{Name: "rma1"}, {Name: "rma1"}}
		}, "zone rma1 is listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := baseSettings()
			tt.mutate(&s)
			_, err := cs.New(t.Context(), nodeProvider(s), provider.Options{ClusterName: testCluster,
				Credentials: map[string][]byte{cs.CredentialToken: []byte(testToken)}, Secrets: secretStore{}})
			g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}

// A pool's shapes apply in every zone, so a flavor one zone lacks is named
// with that zone.
func TestShapesMustBeOfferedInEveryZone(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withSettings(twoZones), withAPIOptions(cloudscaletest.WithFlavors(
		cloudscaletest.Flavor{Slug: "flex-4-2", VCPUCount: 2, MemoryGB: 4, Zones: []string{"lpg1", "rma1"}},
		cloudscaletest.Flavor{Slug: "gpu-64-8", VCPUCount: 8, MemoryGB: 64, Zones: []string{"lpg1"}},
	)))
	shapes, err := e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shapes).To(HaveLen(1))

	_, err = e.p.Shapes(e.ctx, pool("gpus", v1alpha1.Shape{Name: "gpu-64-8"}))
	var unknown *cs.UnknownFlavorError
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(errors.As(err, &unknown)).To(BeTrue())
	g.Expect(unknown.Zone).To(Equal("rma1"))
	g.Expect(unknown.Flavors).To(ConsistOf("gpu-64-8"))
}
