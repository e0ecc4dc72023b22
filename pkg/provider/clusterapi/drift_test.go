package clusterapi_test

import (
	"testing"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
)

// A Machine made from a MachineDeployment's templates drifts when the
// MachineDeployment is pointed at new ones (a CAPI rollout's first step),
// though the NodeProvider did not change; one made from templates the
// NodeProvider names is left to the NodeProvider's own drift.
func TestDriftWhenTheMachineDeploymentMovesToNewTemplates(t *testing.T) {
	g := gomega.NewWithT(t)
	runProviders(t)
	f := newFixture(t)
	p := f.provider(t, "c1")
	fromMD := claimOf("drift-md-1", "large", "4", "8Gi")
	direct := claimOf("drift-direct-1", "small", "2", "4Gi")
	_, err := p.Create(t.Context(), fromMD, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = p.Create(t.Context(), direct, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	reason, _, err := p.Drifted(t.Context(), fromMD)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.BeEmpty(), "nothing changed yet")

	v2 := object(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", f.namespace, "sized-v2", map[string]any{
		"template": map[string]any{"spec": map[string]any{"capacity": map[string]any{"cpu": "4", "memory": "8Gi"}}},
	})
	g.Expect(env.Client.Create(t.Context(), v2)).To(gomega.Succeed())
	md := getObject(t, g, "cluster.x-k8s.io/v1beta2", "MachineDeployment", f.namespace, "workers")
	g.Expect(unstructured.SetNestedField(md.Object, "sized-v2", "spec", "template", "spec", "infrastructureRef", "name")).To(gomega.Succeed())
	g.Expect(env.Client.Update(t.Context(), md)).To(gomega.Succeed())

	reason, message, err := p.Drifted(t.Context(), fromMD)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.Equal(clusterapi.DriftMachineDeployment))
	g.Expect(message).To(gomega.ContainSubstring("/sized-v2"))
	g.Expect(message).To(gomega.ContainSubstring("/sized,"))

	reason, _, err = p.Drifted(t.Context(), direct)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.BeEmpty())
}
