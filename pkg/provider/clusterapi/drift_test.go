package clusterapi_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
)

// A Machine made from a MachineDeployment's templates drifts when the
// MachineDeployment is pointed at new ones (a CAPI rollout's first step),
// though the NodeProvider did not change; one made from templates the
// NodeProvider names is left to the NodeProvider's own drift. Disruption
// asks every round, so the management cluster is read once per Machine
// and once per MachineDeployment per recheck, not on every question.
func TestDriftWhenTheMachineDeploymentMovesToNewTemplates(t *testing.T) {
	g := gomega.NewWithT(t)
	runProviders(t)
	f := newFixture(t)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	var reads atomic.Int64
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	counting := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
	})
	p := f.providerWith(t, "c1", clusterapi.Config{Kube: counting, Clock: clock})
	fromMD := claimOf("drift-md-1", "large", "4", "8Gi")
	fromTemplates := claimOf("drift-direct-1", "small", "2", "4Gi")
	instance, err := p.Create(t.Context(), fromMD, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	fromMD.Status.ProviderID = instance.ProviderID
	_, err = p.Create(t.Context(), fromTemplates, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	reason, _, err := p.Drifted(t.Context(), fromMD)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.BeEmpty(), "nothing changed yet")
	before := reads.Load()
	for range 5 {
		reason, _, err = p.Drifted(t.Context(), fromMD)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(reason).To(gomega.BeEmpty())
	}
	g.Expect(reads.Load()).To(gomega.Equal(before), "a question within the recheck reads nothing")

	v2 := object(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", f.namespace, "sized-v2", map[string]any{
		"template": map[string]any{"spec": map[string]any{"capacity": map[string]any{"cpu": "4", "memory": "8Gi"}}},
	})
	g.Expect(env.Client.Create(t.Context(), v2)).To(gomega.Succeed())
	md := getObject(t, g, "cluster.x-k8s.io/v1beta2", "MachineDeployment", f.namespace, "workers")
	g.Expect(unstructured.SetNestedField(md.Object, "sized-v2", "spec", "template", "spec", "infrastructureRef", "name")).To(gomega.Succeed())
	g.Expect(env.Client.Update(t.Context(), md)).To(gomega.Succeed())

	reason, _, err = p.Drifted(t.Context(), fromMD)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.BeEmpty(), "the MachineDeployment read before is trusted until the recheck")
	clock.SetTime(clock.Now().Add(31 * time.Second))
	before = reads.Load()
	reason, message, err := p.Drifted(t.Context(), fromMD)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.Equal(clusterapi.DriftMachineDeployment))
	g.Expect(message).To(gomega.ContainSubstring("/sized-v2"))
	g.Expect(message).To(gomega.ContainSubstring("/sized,"))
	g.Expect(reads.Load()-before).To(gomega.Equal(int64(1)), "only the MachineDeployment is read again; the Machine's templates never change")

	reason, _, err = p.Drifted(t.Context(), fromTemplates)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.BeEmpty())
}

// A MachineDeployment moved to a new Kubernetes version with the same
// templates (the usual upgrade) drifts the Machines made for the old one.
func TestDriftWhenTheMachineDeploymentMovesToANewVersion(t *testing.T) {
	g := gomega.NewWithT(t)
	runProviders(t)
	f := newFixture(t)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	p := f.providerWith(t, "c1", clusterapi.Config{Kube: env.Client, Clock: clock})
	claim := claimOf("drift-version-1", "large", "4", "8Gi")
	instance, err := p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	claim.Status.ProviderID = instance.ProviderID
	reason, _, err := p.Drifted(t.Context(), claim)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.BeEmpty())

	md := getObject(t, g, "cluster.x-k8s.io/v1beta2", "MachineDeployment", f.namespace, "workers")
	g.Expect(unstructured.SetNestedField(md.Object, "v1.38.0", "spec", "template", "spec", "version")).To(gomega.Succeed())
	g.Expect(env.Client.Update(t.Context(), md)).To(gomega.Succeed())
	clock.SetTime(clock.Now().Add(31 * time.Second))

	reason, message, err := p.Drifted(t.Context(), claim)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(reason).To(gomega.Equal(clusterapi.DriftMachineDeployment))
	g.Expect(message).To(gomega.And(gomega.ContainSubstring("Kubernetes v1.38.0"), gomega.ContainSubstring("runs v1.37.0")))
}
