package clusterapi_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
)

// failingProvider maps shape "small" to a template whose machines fail
// with reason and message, as an infrastructure provider reports it.
func failingProvider(t *testing.T, f fixture, reason, message string) *clusterapi.Provider {
	t.Helper()
	name := fmt.Sprintf("failing-%d", names.Add(1))
	template := object(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", f.namespace, name, map[string]any{
		"template": map[string]any{"spec": map[string]any{
			"capacity": map[string]any{"cpu": "2", "memory": "4Gi"}, "failureReason": reason, "failureMessage": message,
		}},
	})
	if err := env.Client.Create(t.Context(), template); err != nil {
		t.Fatalf("creating template: %v", err)
	}
	settings := f.settings()
	settings.Shapes[0].InfrastructureTemplate.Name = name
	p, err := clusterapi.New(t.Context(), clusterapi.Config{Kube: env.Client}, nodeProviderOf(settings), provider.Options{ClusterName: "conformance"})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	return p
}

func getObject(t *testing.T, g gomega.Gomega, apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(apiVersion)
	obj.SetKind(kind)
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, obj)).To(gomega.Succeed())
	return obj
}

// A claim's Machine is cloned from the shape's templates, labelled for the
// claim and the Cluster, owned by no MachineSet, and owns its clones.
func TestCreateMakesAMachineFromTheShapesTemplates(t *testing.T) {
	g := gomega.NewWithT(t)
	runProviders(t)
	f := newFixture(t)
	p := f.provider(t, "c1")

	instance, err := p.Create(t.Context(), claimOf("direct-1", "small", "2", "4Gi"), provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(instance.ProviderID).To(gomega.Equal(clusterapitest.ProviderIDOf(f.namespace, "direct-1")))
	g.Expect(instance.Tags).To(gomega.Equal(map[string]string{v1alpha1.TagCluster: "c1", v1alpha1.TagNodePool: "workers", v1alpha1.TagNodeClaim: "direct-1"}))

	machine := getObject(t, g, "cluster.x-k8s.io/v1beta2", "Machine", f.namespace, "direct-1")
	g.Expect(machine.GetLabels()).To(gomega.HaveKeyWithValue(clusterapi.LabelClusterName, f.cluster))
	g.Expect(machine.GetOwnerReferences()).To(gomega.BeEmpty(), "nothing may scale the Machine back")
	spec, _, _ := unstructured.NestedMap(machine.Object, "spec")
	g.Expect(spec).To(gomega.HaveKeyWithValue("clusterName", f.cluster))
	g.Expect(spec).To(gomega.HaveKeyWithValue("version", "v1.37.0"))
	g.Expect(spec["infrastructureRef"]).To(gomega.Equal(map[string]any{"apiGroup": clusterapitest.InfraGroup, "kind": "TestMachine", "name": "direct-1"}))
	g.Expect(spec["bootstrap"]).To(gomega.HaveKeyWithValue("configRef", map[string]any{"apiGroup": clusterapitest.BootstrapGroup, "kind": "TestConfig", "name": "direct-1"}))

	for _, kind := range []string{"TestMachine", "TestConfig"} {
		group := clusterapitest.InfraGroup
		if kind == "TestConfig" {
			group = clusterapitest.BootstrapGroup
		}
		clone := getObject(t, g, group+"/v1alpha1", kind, f.namespace, "direct-1")
		g.Expect(clone.GetOwnerReferences()).To(gomega.HaveLen(1))
		g.Expect(clone.GetOwnerReferences()[0].UID).To(gomega.Equal(machine.GetUID()))
		g.Expect(clone.GetLabels()).To(gomega.HaveKeyWithValue(v1alpha1.TagNodeClaim, "direct-1"))
		g.Expect(clone.GetAnnotations()).To(gomega.HaveKeyWithValue("cluster.x-k8s.io/cloned-from-groupkind", kind+"Template."+group))
	}
	infra := getObject(t, g, clusterapitest.InfraGroup+"/v1alpha1", "TestMachine", f.namespace, "direct-1")
	capacity, _, _ := unstructured.NestedStringMap(infra.Object, "spec", "capacity")
	g.Expect(capacity).To(gomega.Equal(map[string]string{"cpu": "2", "memory": "4Gi"}), "the template's spec is cloned")
}

// A Create cut off after the Machine and before its clones (a restart
// mid-scale-up) is finished by the next Create of the claim, which finds
// the Machine and makes what it references.
func TestCreateFinishesAMachineWhoseClonesAreMissing(t *testing.T) {
	g := gomega.NewWithT(t)
	f := newFixture(t)
	p := f.provider(t, "c1")
	claim := claimOf("cut-off-1", "small", "2", "4Gi")
	// No test providers run: the Machine gets no providerID, so Create
	// answers retryable after making everything.
	_, err := p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(provider.IsRetryable(err)).To(gomega.BeTrue(), "no providerID yet: %v", err)
	clones := map[string]string{"TestMachine": clusterapitest.InfraGroup, "TestConfig": clusterapitest.BootstrapGroup}
	for kind, group := range clones {
		g.Expect(env.Client.Delete(t.Context(), getObject(t, g, group+"/v1alpha1", kind, f.namespace, "cut-off-1"))).To(gomega.Succeed())
	}

	_, err = p.Create(t.Context(), claim, provider.CreateOptions{})
	g.Expect(provider.IsRetryable(err)).To(gomega.BeTrue(), "still no providerID: %v", err)
	machine := getObject(t, g, "cluster.x-k8s.io/v1beta2", "Machine", f.namespace, "cut-off-1")
	for kind, group := range clones {
		clone := getObject(t, g, group+"/v1alpha1", kind, f.namespace, "cut-off-1")
		g.Expect(clone.GetOwnerReferences()).To(gomega.HaveLen(1))
		g.Expect(clone.GetOwnerReferences()[0].UID).To(gomega.Equal(machine.GetUID()), "%s made again for the same Machine", kind)
	}
}

// A shape taken from a MachineDeployment uses its templates, version and
// machine labels (but those its selector matches), and records which
// templates it was made from.
func TestCreateTakesTheTemplatesOfAMachineDeployment(t *testing.T) {
	g := gomega.NewWithT(t)
	runProviders(t)
	f := newFixture(t)
	_, err := f.provider(t, "c1").Create(t.Context(), claimOf("from-md-1", "large", "4", "8Gi"), provider.CreateOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	machine := getObject(t, g, "cluster.x-k8s.io/v1beta2", "Machine", f.namespace, "from-md-1")
	g.Expect(machine.GetLabels()).To(gomega.HaveKeyWithValue("tier", "batch"))
	g.Expect(machine.GetLabels()).NotTo(gomega.HaveKey("pool"), "a label the MachineDeployment selects by would let its MachineSets adopt the Machine")
	g.Expect(machine.GetAnnotations()).To(gomega.HaveKeyWithValue(clusterapi.AnnotationTemplates,
		"TestMachineTemplate."+clusterapitest.InfraGroup+"/sized,TestConfigTemplate."+clusterapitest.BootstrapGroup+"/join"))
	infra := getObject(t, g, clusterapitest.InfraGroup+"/v1alpha1", "TestMachine", f.namespace, "from-md-1")
	g.Expect(infra.GetLabels()).To(gomega.HaveKeyWithValue("from-template", "sized"))
	md := getObject(t, g, "cluster.x-k8s.io/v1beta2", "MachineDeployment", f.namespace, "workers")
	replicas, _, _ := unstructured.NestedInt64(md.Object, "spec", "replicas")
	g.Expect(replicas).To(gomega.BeZero(), "the MachineDeployment is read, never scaled")
}

// Shapes are sized by the template's status.capacity, else by
// cluster-autoscaler's capacity annotations, else by the pool; priced by
// the pool.
func TestShapesComeFromTheCAPIContract(t *testing.T) {
	g := gomega.NewWithT(t)
	f := newFixture(t)
	shapes, err := f.provider(t, "c1").Shapes(t.Context(), pool())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(shapes).To(gomega.HaveLen(2))
	g.Expect(shapes[0].Name).To(gomega.Equal("small"))
	g.Expect(shapes[0].Capacity.Cpu().String()).To(gomega.Equal("2"), "from the capacity annotations")
	g.Expect(shapes[0].Capacity.Memory().String()).To(gomega.Equal("4Gi"))
	g.Expect(shapes[0].Price).To(gomega.Equal(0.05))
	g.Expect(shapes[1].Capacity.Cpu().String()).To(gomega.Equal("4"), "from status.capacity")
	g.Expect(shapes[1].Capacity.Memory().String()).To(gomega.Equal("8Gi"))

	// A template with neither: the pool's size, else a clear error.
	bare := object(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", f.namespace, "bare", map[string]any{"template": map[string]any{"spec": map[string]any{}}})
	g.Expect(env.Client.Create(t.Context(), bare)).To(gomega.Succeed())
	settings := f.settings()
	settings.Shapes[0].InfrastructureTemplate.Name = "bare"
	p, err := clusterapi.New(t.Context(), clusterapi.Config{Kube: env.Client}, nodeProviderOf(settings), provider.Options{ClusterName: "c1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = p.Shapes(t.Context(), pool())
	g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "%v", err)
	g.Expect(err.Error()).To(gomega.ContainSubstring("capacity.cluster-autoscaler.kubernetes.io/cpu"))
	sizedPool := pool()
	cpu, memory := resource.MustParse("3"), resource.MustParse("6Gi")
	sizedPool.Spec.Shapes.Fixed[0].CPU, sizedPool.Spec.Shapes.Fixed[0].Memory = &cpu, &memory
	shapes, err = p.Shapes(t.Context(), sizedPool)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(shapes[0].Capacity.Cpu().String()).To(gomega.Equal("3"))

	flexible := pool()
	flexible.Spec.Shapes = v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{MinCPU: cpu, MaxCPU: cpu, MinMemory: memory, MaxMemory: memory}}
	_, err = p.Shapes(t.Context(), flexible)
	g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "%v", err)
}

// Until CAPI gives the Machine a providerID, Create says what it waits
// for and asks to be retried; List and Delete know the Machine by a
// placeholder, so a claim deleted meanwhile leaves nothing behind.
func TestCreateWaitsForTheProviderID(t *testing.T) {
	g := gomega.NewWithT(t)
	f := newFixture(t)
	p, err := clusterapi.New(t.Context(), clusterapi.Config{Kube: env.Client, ProvisionWait: 300 * time.Millisecond}, nodeProviderOf(f.settings()), provider.Options{ClusterName: "c1"})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	_, err = p.Create(t.Context(), claimOf("waiting-1", "small", "2", "4Gi"), provider.CreateOptions{})
	g.Expect(provider.IsRetryable(err)).To(gomega.BeTrue(), "%v", err)
	g.Expect(provider.RetryAfter(err)).To(gomega.BeNumerically(">", 0))
	g.Expect(err.Error()).To(gomega.ContainSubstring("has no providerID yet"))

	instances, err := p.List(t.Context())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(instances).To(gomega.HaveLen(1))
	g.Expect(instances[0].ProviderID).To(gomega.Equal("clusterapi:///" + f.namespace + "/waiting-1"))
	g.Expect(instances[0].State).To(gomega.Equal(provider.InstanceCreating))

	g.Expect(p.Delete(t.Context(), instances[0].ProviderID)).To(gomega.Succeed())
	instances, err = p.List(t.Context())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(instances).To(gomega.BeEmpty())
}

// Failures the infrastructure reports become error kinds: capacity-like
// ones InsufficientCapacity (the pool and shape back off), others
// Terminal, both with CAPI's reason and message.
func TestCreateTurnsCAPIFailuresIntoErrorKinds(t *testing.T) {
	runProviders(t)
	f := newFixture(t)
	for _, c := range []struct {
		reason, message string
		capacity        bool
	}{
		{"InsufficientResources", "no Proxmox node has 8 GiB free", true},
		{"CreateError", "server quota exceeded for project", true},
		{"CreateError", "image ubuntu-24.04 not found", false},
	} {
		t.Run(c.message, func(t *testing.T) {
			g := gomega.NewWithT(t)
			p := failingProvider(t, f, c.reason, c.message)
			claim := claimOf(fmt.Sprintf("failing-claim-%d", names.Add(1)), "small", "2", "4Gi")
			g.Eventually(func() error {
				_, err := p.Create(t.Context(), claim, provider.CreateOptions{})
				if provider.IsRetryable(err) {
					return nil
				}
				return err
			}).WithTimeout(30 * time.Second).Should(gomega.HaveOccurred())
			_, err := p.Create(t.Context(), claim, provider.CreateOptions{})
			g.Expect(provider.IsInsufficientCapacity(err)).To(gomega.Equal(c.capacity), "%v", err)
			g.Expect(provider.IsTerminal(err)).To(gomega.Equal(!c.capacity), "%v", err)
			g.Expect(err.Error()).To(gomega.ContainSubstring(c.message))
		})
	}
}

// The Machines may live in a management cluster reached through a
// kubeconfig in the credentials Secret; a kubeconfig that cannot be read
// is a Terminal error that shows none of it.
func TestManagementClusterFromAKubeconfig(t *testing.T) {
	g := gomega.NewWithT(t)
	f := newFixture(t)
	kubeconfig, err := os.ReadFile(env.KubeconfigPath)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	np := nodeProviderOf(f.settings())
	np.Spec.CredentialsSecretRef = &v1alpha1.SecretReference{Namespace: "default", Name: "management"}

	// No same-cluster client at all: only the kubeconfig reaches it.
	p, err := clusterapi.New(t.Context(), clusterapi.Config{}, np, provider.Options{ClusterName: "c1", Credentials: map[string][]byte{"value": kubeconfig}})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	shapes, err := p.Shapes(t.Context(), pool())
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(shapes).To(gomega.HaveLen(2))

	secretish := "token: do-not-leak-4711"
	_, err = clusterapi.New(t.Context(), clusterapi.Config{}, np, provider.Options{ClusterName: "c1", Credentials: map[string][]byte{"kubeconfig": []byte(secretish + "\n\t: [")}})
	g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "%v", err)
	g.Expect(err.Error()).NotTo(gomega.ContainSubstring("do-not-leak"))

	_, err = clusterapi.New(t.Context(), clusterapi.Config{}, np, provider.Options{ClusterName: "c1", Credentials: map[string][]byte{}})
	g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "%v", err)

	missing := f.settings()
	missing.Cluster.Name = "no-such-cluster"
	_, err = clusterapi.New(t.Context(), clusterapi.Config{Kube: env.Client}, nodeProviderOf(missing), provider.Options{ClusterName: "c1"})
	g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "%v", err)
	g.Expect(strings.Contains(err.Error(), "no-such-cluster")).To(gomega.BeTrue())
}
