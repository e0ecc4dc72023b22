package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// startClusterAPI runs the real Cluster API core manager (bin/, built by
// hack/tools.sh) against the test control plane until the test ends. Its
// webhooks are served (the manager will not start without) but never
// registered with the API server, so nothing calls them; its CRD migrator
// is off, as the CRDs are installed at the version the manager expects.
func startClusterAPI(t *testing.T, kubeconfigPath string) {
	t.Helper()
	binary, err := testenv.Tool("cluster-api-manager")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	writeSelfSignedCert(t, certDir)
	logs := &harness.LockedBuffer{}
	cmd := exec.Command(binary,
		"--kubeconfig="+kubeconfigPath,
		"--leader-elect=false",
		"--webhook-port="+strconv.Itoa(freeLoopbackPort(t)),
		"--webhook-cert-dir="+certDir,
		"--health-addr=127.0.0.1:"+strconv.Itoa(freeLoopbackPort(t)),
		"--diagnostics-address=127.0.0.1:"+strconv.Itoa(freeLoopbackPort(t)),
		"--insecure-diagnostics",
		"--skip-crd-migration-phases=StorageVersionMigration,CleanupManagedFields",
		"--sync-period=30s",
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the Cluster API manager: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() || os.Getenv("E2E_PROCESS_LOGS") != "" {
			t.Logf("Cluster API manager output (last 8 KiB):\n%s", tail(logs.String(), 8192))
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port
}

func writeSelfSignedCert(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cluster-api-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runTestInfrastructure runs the test infrastructure and bootstrap
// providers: machines in the management cluster, kwok Nodes in the
// workload cluster.
func runTestInfrastructure(t *testing.T, management, workload client.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&clusterapitest.Providers{Management: management, Workload: workload, Interval: 200 * time.Millisecond}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// capiCluster makes a CAPI Cluster named name in namespace, its test
// infrastructure and control plane, the kubeconfig Secret through which
// CAPI reaches the workload cluster, and a machine template per size.
func capiCluster(g *WithT, kube client.Client, namespace, name string, workloadKubeconfig []byte) {
	ctx := context.Background()
	objects := []*unstructured.Unstructured{
		capiObject(clusterapitest.ClusterKind.GroupVersion().String(), "TestCluster", namespace, name, map[string]any{}),
		capiObject(clusterapitest.ControlPlaneKind.GroupVersion().String(), "TestControlPlane", namespace, name, map[string]any{}),
		capiObject(clusterapi.ClusterKind.GroupVersion().String(), "Cluster", namespace, name, map[string]any{
			"infrastructureRef": map[string]any{"apiGroup": clusterapitest.InfraGroup, "kind": "TestCluster", "name": name},
			"controlPlaneRef":   map[string]any{"apiGroup": clusterapitest.ControlPlaneGroup, "kind": "TestControlPlane", "name": name},
		}),
		capiObject(clusterapitest.ConfigTmplKind.GroupVersion().String(), "TestConfigTemplate", namespace, "join", map[string]any{
			"template": map[string]any{"spec": map[string]any{}},
		}),
	}
	for _, obj := range objects {
		g.Expect(kube.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
	}
	g.Expect(kube.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-kubeconfig",
			Labels: map[string]string{clusterapi.LabelClusterName: name}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": workloadKubeconfig},
	})).To(Succeed())
}

// machineTemplate makes a TestMachineTemplate of a size, reporting it in
// status.capacity as the CAPI contract has templates do for scale from zero.
func machineTemplate(g *WithT, kube client.Client, namespace, name, cpu, memory string) {
	ctx := context.Background()
	template := capiObject(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", namespace, name, map[string]any{
		"template": map[string]any{"spec": map[string]any{"capacity": map[string]any{"cpu": cpu, "memory": memory}}},
	})
	g.Expect(kube.Create(ctx, template)).To(Succeed())
	_ = unstructured.SetNestedStringMap(template.Object, map[string]string{"cpu": cpu, "memory": memory}, "status", "capacity")
	g.Expect(kube.Status().Update(ctx, template)).To(Succeed())
}

func capiObject(apiVersion, kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetAPIVersion(apiVersion)
	obj.SetKind(kind)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

// capiMachines lists the Machines of a namespace.
func capiMachines(g Gomega, kube client.Client, namespace string) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(clusterapi.MachineKind.GroupVersion().WithKind("MachineList"))
	g.Expect(kube.List(context.Background(), list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

// clusterAPIProvider makes the scenario's clusterapi NodeProvider, shape
// c4 made from template, and its pool of that shape, priced by the pool.
func clusterAPIProvider(s *harness.Scenario, template string, credentials *v1alpha1.SecretReference) {
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeClusterAPI,
			CredentialsSecretRef: credentials,
			ClusterAPI: &v1alpha1.ClusterAPISettings{
				Cluster: v1alpha1.ClusterAPIClusterReference{Namespace: s.Namespace, Name: s.Name},
				Shapes: []v1alpha1.ClusterAPIShape{{
					Name:                    "c4",
					InfrastructureTemplate:  &v1alpha1.ClusterAPITemplateReference{APIGroup: clusterapitest.InfraGroup, Kind: "TestMachineTemplate", Name: template},
					BootstrapConfigTemplate: &v1alpha1.ClusterAPITemplateReference{APIGroup: clusterapitest.BootstrapGroup, Kind: "TestConfigTemplate", Name: "join"},
					Version:                 "v1.37.0",
				}},
			},
		},
	})).To(Succeed())
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		// No size: the template's status.capacity gives it.
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "c4", Price: "0.1"}}
	})
}

// From zero to three pods on two CAPI Machines made by the real Cluster API
// controllers, a template change replacing every Machine, and back to zero
// with no Machine left.
func TestClusterAPIScaleFromZeroDriftAndToZero(t *testing.T) {
	s := harness.NewScenario(t, "capi-scale")
	kubeconfig, err := os.ReadFile(env.KubeconfigPath)
	s.G.Expect(err).NotTo(HaveOccurred())
	capiCluster(s.G, env.Client, s.Namespace, s.Name, kubeconfig)
	machineTemplate(s.G, env.Client, s.Namespace, "c4-v1", "4", "16Gi")
	startClusterAPI(t, env.KubeconfigPath)
	runTestInfrastructure(t, env.Client, env.Client)
	clusterAPIProvider(s, "c4-v1", nil)
	harness.StartOperator(t, harness.OperatorOptions{})

	// 1500m each: two pods per 4-cpu node, so three pods need two Machines.
	web := s.CreateDeployment("web", 3, "1500m", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(3))
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(2))
		machines := capiMachines(g, env.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(2), "one Machine per claim")
		for _, machine := range machines {
			nodeRef, _, _ := unstructured.NestedString(machine.Object, "status", "nodeRef", "name")
			g.Expect(nodeRef).To(Equal(machine.GetName()), "CAPI found the Machine's node")
			phase, _, _ := unstructured.NestedString(machine.Object, "status", "phase")
			g.Expect(phase).To(Equal("Running"))
		}
	}).Should(Succeed())

	// A new template for the shape drifts both claims; each is replaced by
	// a Machine made from it.
	machineTemplate(s.G, env.Client, s.Namespace, "c4-v2", "4", "16Gi")
	originals := map[string]bool{}
	for _, claim := range s.Claims() {
		originals[claim.Name] = true
	}
	s.G.Eventually(func() error {
		var np v1alpha1.NodeProvider
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &np); err != nil {
			return err
		}
		np.Spec.ClusterAPI.Shapes[0].InfrastructureTemplate.Name = "c4-v2"
		return env.Client.Update(s.Ctx, &np)
	}).Should(Succeed())
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).NotTo(BeEmpty())
		for _, claim := range claims {
			g.Expect(originals).NotTo(HaveKey(claim.Name), "claim %s is still an original", claim.Name)
		}
		machines := capiMachines(g, env.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(len(claims)))
		for _, machine := range machines {
			g.Expect(machine.GetAnnotations()[clusterapi.AnnotationTemplates]).To(ContainSubstring("/c4-v2"))
		}
		g.Expect(s.RunningPods("web")).To(Equal(3))
	}).Should(Succeed())

	// To zero: the empty nodes go, and so do their Machines.
	s.Scale(web, 0)
	s.G.Eventually(func(g Gomega) {
		g.Expect(s.Claims()).To(BeEmpty())
		g.Expect(capiMachines(g, env.Client, s.Namespace)).To(BeEmpty())
		g.Expect(s.Nodes()).To(BeEmpty())
	}).Should(Succeed())
	s.Cleanup()
}

// A controller restarted while its Machines are still provisioning finds
// them again: every claim ends with exactly the Machine it had before the
// restart, none lost and none doubled.
func TestClusterAPIRestartMidScaleUpKeepsOneMachinePerClaim(t *testing.T) {
	s := harness.NewScenario(t, "capi-restart")
	kubeconfig, err := os.ReadFile(env.KubeconfigPath)
	s.G.Expect(err).NotTo(HaveOccurred())
	capiCluster(s.G, env.Client, s.Namespace, s.Name, kubeconfig)
	machineTemplate(s.G, env.Client, s.Namespace, "c4", "4", "16Gi")
	startClusterAPI(t, env.KubeconfigPath)
	clusterAPIProvider(s, "c4", nil)
	stop := harness.StartOperator(t, harness.OperatorOptions{})

	// No infrastructure runs yet: the Machines are made and stay
	// unprovisioned, the claims wait for their providerIDs.
	s.CreateDeployment("web", 3, "1500m", nil)
	before := map[string]string{}
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(2))
		machines := capiMachines(g, env.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(2))
		for _, machine := range machines {
			before[machine.GetName()] = string(machine.GetUID())
		}
		for _, claim := range claims {
			g.Expect(before).To(HaveKey(claim.Name))
			g.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched)).To(BeFalse())
		}
	}).Should(Succeed())
	stop()

	harness.StartOperator(t, harness.OperatorOptions{})
	runTestInfrastructure(t, env.Client, env.Client)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(3))
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	after := map[string]string{}
	for _, machine := range capiMachines(s.G, env.Client, s.Namespace) {
		after[machine.GetName()] = string(machine.GetUID())
	}
	s.G.Expect(after).To(Equal(before), "the same Machines, no more and no fewer")
	s.Cleanup()
}

// Hub and spoke: the Machines live in a management cluster (a second
// control plane, where the CAPI controllers run), the pods and nodes in the
// workload cluster where claimscale runs. The NodeProvider reaches the
// management cluster through a kubeconfig in its credentials Secret; CAPI
// reaches the workload cluster through the Cluster's kubeconfig Secret.
func TestClusterAPIHubAndSpoke(t *testing.T) {
	s := harness.NewScenario(t, "capi-hub")
	root, err := testenv.RepoRoot()
	s.G.Expect(err).NotTo(HaveOccurred())
	crds, err := clusterapitest.CRDPaths(root)
	s.G.Expect(err).NotTo(HaveOccurred())
	management, err := testenv.Start(testenv.Options{CRDPaths: crds, Logs: harness.ProcessLogs()})
	t.Cleanup(func() { _ = management.Stop() })
	s.G.Expect(err).NotTo(HaveOccurred())

	// The Cluster, templates and Machines exist only in the management
	// cluster, in a namespace of the same name.
	s.G.Expect(management.Client.Create(s.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace}})).To(Succeed())
	workloadKubeconfig, err := os.ReadFile(env.KubeconfigPath)
	s.G.Expect(err).NotTo(HaveOccurred())
	capiCluster(s.G, management.Client, s.Namespace, s.Name, workloadKubeconfig)
	machineTemplate(s.G, management.Client, s.Namespace, "c4", "4", "16Gi")
	startClusterAPI(t, management.KubeconfigPath)
	runTestInfrastructure(t, management.Client, env.Client)

	managementKubeconfig, err := os.ReadFile(management.KubeconfigPath)
	s.G.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: harness.ControllerNamespace, Name: s.Name + "-management"},
		Data:       map[string][]byte{"kubeconfig": managementKubeconfig},
	}
	s.G.Expect(env.Client.Create(s.Ctx, secret)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), secret) })
	clusterAPIProvider(s, "c4", &v1alpha1.SecretReference{Namespace: harness.ControllerNamespace, Name: secret.Name})
	harness.StartOperator(t, harness.OperatorOptions{})

	web := s.CreateDeployment("web", 2, "1500m", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(2))
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		machines := capiMachines(g, management.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(1))
		g.Expect(machines[0].GetName()).To(Equal(claims[0].Name))
		nodeRef, _, _ := unstructured.NestedString(machines[0].Object, "status", "nodeRef", "name")
		g.Expect(nodeRef).To(Equal(claims[0].Status.NodeName), "CAPI in the management cluster found the workload node")
	}).Should(Succeed())
	s.G.Expect(capiMachines(s.G, env.Client, s.Namespace)).To(BeEmpty(), "no Machine in the workload cluster")

	s.Scale(web, 0)
	s.G.Eventually(func(g Gomega) {
		g.Expect(s.Claims()).To(BeEmpty())
		g.Expect(capiMachines(g, management.Client, s.Namespace)).To(BeEmpty())
	}).Should(Succeed())
	s.Cleanup()
}

// A shape taken from a MachineDeployment: the real CAPI controllers run
// that MachineDeployment at zero replicas beside claimscale's Machines
// without adopting them, and pointing it at a new template (a CAPI
// rollout's first step) drifts and replaces claimscale's Machines too.
func TestClusterAPIMachineDeploymentRolloutDriftsClaims(t *testing.T) {
	s := harness.NewScenario(t, "capi-md")
	kubeconfig, err := os.ReadFile(env.KubeconfigPath)
	s.G.Expect(err).NotTo(HaveOccurred())
	capiCluster(s.G, env.Client, s.Namespace, s.Name, kubeconfig)
	machineTemplate(s.G, env.Client, s.Namespace, "c4-v1", "4", "16Gi")
	md := capiObject(clusterapi.MachineDeploymentKind.GroupVersion().String(), "MachineDeployment", s.Namespace, "workers", map[string]any{
		"clusterName": s.Name,
		"replicas":    int64(0),
		"selector":    map[string]any{"matchLabels": map[string]any{"md": "workers"}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"md": "workers"}},
			"spec": map[string]any{
				"clusterName":       s.Name,
				"version":           "v1.37.0",
				"bootstrap":         map[string]any{"configRef": map[string]any{"apiGroup": clusterapitest.BootstrapGroup, "kind": "TestConfigTemplate", "name": "join"}},
				"infrastructureRef": map[string]any{"apiGroup": clusterapitest.InfraGroup, "kind": "TestMachineTemplate", "name": "c4-v1"},
			},
		},
	})
	s.G.Expect(env.Client.Create(s.Ctx, md)).To(Succeed())
	startClusterAPI(t, env.KubeconfigPath)
	runTestInfrastructure(t, env.Client, env.Client)
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type: v1alpha1.ProviderTypeClusterAPI,
			ClusterAPI: &v1alpha1.ClusterAPISettings{
				Cluster: v1alpha1.ClusterAPIClusterReference{Namespace: s.Namespace, Name: s.Name},
				Shapes:  []v1alpha1.ClusterAPIShape{{Name: "c4", MachineDeployment: "workers"}},
			},
		},
	})).To(Succeed())
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "c4", Price: "0.1"}}
	})
	harness.StartOperator(t, harness.OperatorOptions{})

	s.CreateDeployment("web", 2, "1500m", nil)
	var original string
	s.G.Eventually(func(g Gomega) {
		g.Expect(s.RunningPods("web")).To(Equal(2))
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		machines := capiMachines(g, env.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(1))
		for _, owner := range machines[0].GetOwnerReferences() {
			// CAPI makes the Cluster an owner; a MachineSet must not be.
			g.Expect(owner.Kind).NotTo(Equal("MachineSet"), "a MachineSet adopted the Machine")
		}
		original = claims[0].Name
	}).Should(Succeed())

	machineTemplate(s.G, env.Client, s.Namespace, "c4-v2", "4", "16Gi")
	s.G.Eventually(func() error {
		current := &unstructured.Unstructured{}
		current.SetGroupVersionKind(clusterapi.MachineDeploymentKind)
		if err := env.Client.Get(s.Ctx, client.ObjectKeyFromObject(md), current); err != nil {
			return err
		}
		_ = unstructured.SetNestedField(current.Object, "c4-v2", "spec", "template", "spec", "infrastructureRef", "name")
		return env.Client.Update(s.Ctx, current)
	}).Should(Succeed())
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).NotTo(Equal(original))
		machines := capiMachines(g, env.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(1))
		g.Expect(machines[0].GetAnnotations()[clusterapi.AnnotationTemplates]).To(ContainSubstring("/c4-v2"))
		g.Expect(s.RunningPods("web")).To(Equal(2))
	}).Should(Succeed())
	s.G.Expect(harness.ContainsAny(harness.EventsOf(s.G, "NodeClaim", original), clusterapi.DriftMachineDeployment) ||
		harness.ContainsAny(harness.EventsOf(s.G, "NodeClaim", original), "now makes Machines from")).To(BeTrue(), "claim %s was Drifted by the rollout", original)
	s.Cleanup()
}

// The chart grants rights on Cluster API Machines only with
// clusterAPIProvider.enabled.
func TestChartGrantsMachinesOnlyWithTheClusterAPIProvider(t *testing.T) {
	g := NewWithT(t)
	machineVerbs := func(objects []*unstructured.Unstructured) []string {
		var found []string
		for _, object := range objects {
			if object.GetKind() != "ClusterRole" && object.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(object.Object, "rules")
			for _, r := range rules {
				rule := r.(map[string]any)
				resources, _ := rule["resources"].([]any)
				verbs, _ := rule["verbs"].([]any)
				for _, resource := range resources {
					for _, verb := range verbs {
						if resource == "machines" {
							found = append(found, object.GetKind()+"/"+object.GetName()+": "+verb.(string)+" "+resource.(string))
						}
					}
				}
			}
		}
		return found
	}
	g.Expect(machineVerbs(harness.HelmTemplate(t, "--set", "clusterName=x"))).To(BeEmpty())
	g.Expect(machineVerbs(harness.HelmTemplate(t, "--set", "clusterName=x", "--set", "clusterAPIProvider.enabled=true"))).To(ContainElements(
		"ClusterRole/claimscale-clusterapi: create machines", "ClusterRole/claimscale-clusterapi: delete machines"))
}

// A Machine whose infrastructure reports running out of capacity fails
// its claim with CAPI's own words, backs that shape off, and the pods go
// to the pool's other shape; the failed Machine is deleted with its claim.
func TestClusterAPICapacityFailureBacksTheShapeOff(t *testing.T) {
	s := harness.NewScenario(t, "capi-full")
	kubeconfig, err := os.ReadFile(env.KubeconfigPath)
	s.G.Expect(err).NotTo(HaveOccurred())
	capiCluster(s.G, env.Client, s.Namespace, s.Name, kubeconfig)
	machineTemplate(s.G, env.Client, s.Namespace, "c8", "8", "32Gi")
	full := capiObject(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", s.Namespace, "c4-full", map[string]any{
		"template": map[string]any{"spec": map[string]any{
			"capacity":      map[string]any{"cpu": "4", "memory": "16Gi"},
			"failureReason": "InsufficientResources", "failureMessage": "no Proxmox node has 16 GiB of memory free",
		}},
	})
	s.G.Expect(env.Client.Create(s.Ctx, full)).To(Succeed())
	_ = unstructured.SetNestedStringMap(full.Object, map[string]string{"cpu": "4", "memory": "16Gi"}, "status", "capacity")
	s.G.Expect(env.Client.Status().Update(s.Ctx, full)).To(Succeed())
	startClusterAPI(t, env.KubeconfigPath)
	runTestInfrastructure(t, env.Client, env.Client)
	template := func(name string) *v1alpha1.ClusterAPITemplateReference {
		return &v1alpha1.ClusterAPITemplateReference{APIGroup: clusterapitest.InfraGroup, Kind: "TestMachineTemplate", Name: name}
	}
	join := &v1alpha1.ClusterAPITemplateReference{APIGroup: clusterapitest.BootstrapGroup, Kind: "TestConfigTemplate", Name: "join"}
	s.G.Expect(env.Client.Create(s.Ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: v1alpha1.NodeProviderSpec{
			Type: v1alpha1.ProviderTypeClusterAPI,
			ClusterAPI: &v1alpha1.ClusterAPISettings{
				Cluster: v1alpha1.ClusterAPIClusterReference{Namespace: s.Namespace, Name: s.Name},
				Shapes: []v1alpha1.ClusterAPIShape{
					{Name: "c4", InfrastructureTemplate: template("c4-full"), BootstrapConfigTemplate: join},
					{Name: "c8", InfrastructureTemplate: template("c8"), BootstrapConfigTemplate: join},
				},
			},
		},
	})).To(Succeed())
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		// c4 is cheaper, so it is tried first.
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "c4", Price: "0.1"}, {Name: "c8", Price: "0.3"}}
	})
	harness.StartOperator(t, harness.OperatorOptions{})

	s.CreateDeployment("web", 1, "1", nil)
	s.G.Eventually(func(g Gomega) {
		g.Expect(s.RunningPods("web")).To(Equal(1))
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Spec.Shape.Name).To(Equal("c8"))
		machines := capiMachines(g, env.Client, s.Namespace)
		g.Expect(machines).To(HaveLen(1), "the failed c4 Machine went with its claim")
	}).Should(Succeed())
	var events corev1.EventList
	s.G.Expect(env.Client.List(s.Ctx, &events)).To(Succeed())
	var capacity []string
	for _, event := range events.Items {
		if event.InvolvedObject.Kind == "NodeClaim" && event.Reason == "InsufficientCapacity" {
			capacity = append(capacity, event.Message)
		}
	}
	s.G.Expect(capacity).To(ContainElement(And(
		ContainSubstring("InsufficientResources: no Proxmox node has 16 GiB of memory free"),
		ContainSubstring("shape c4"))), "the claim's event carries CAPI's failure")
	s.Cleanup()
}
