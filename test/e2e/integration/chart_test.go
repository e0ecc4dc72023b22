package integration

import (
	"context"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/memlimit"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The chart's manifests apply to a real API server, and the controller,
// running with the chart's ServiceAccount and nothing else, scales a pool up
// and down: a permission the chart lacks fails this test.
func TestChartInstallsAndItsRBACIsEnough(t *testing.T) {
	g := NewWithT(t)
	objects := harness.HelmTemplate(t, "--set", "clusterName="+harness.ClusterName, "--set", "simulatedProvider.enabled=true")
	kinds := map[string]int{}
	for _, object := range objects {
		kinds[object.GetKind()]++
		g.Expect(env.Client.Create(context.Background(), object)).To(Succeed(), "applying %s %s", object.GetKind(), object.GetName())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), object) })
	}
	g.Expect(kinds).To(HaveKeyWithValue("Deployment", 1))
	g.Expect(kinds).To(HaveKeyWithValue("ClusterRole", 10), "the controller's, the simulated provider's, the metrics reader's and the decisions reader's, and the six for people (view, edit, one per plugin command)")

	serviceAccount := rest.CopyConfig(env.Config)
	serviceAccount.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + harness.ControllerNamespace + ":claimscale",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + harness.ControllerNamespace, "system:authenticated"},
	}
	harness.StartOperator(t, harness.OperatorOptions{Config: serviceAccount, LeaderElection: true})

	s := harness.NewScenario(t, "chart")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	// Bootstrap needs kube-system's Secrets and kube-public's cluster-info.
	// Node repair reads the heartbeat Leases in kube-node-lease.
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
		pool.Spec.Repair = &v1alpha1.Repair{}
	})
	deployment := s.CreateDeployment("rbac", 3, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("rbac") }).Should(Equal(3))
	s.G.Eventually(s.ReadyClaims).Should(BeNumerically(">=", 1))
	s.G.Eventually(func() string {
		if condition := s.RepairAllowed(); condition != nil {
			return string(condition.Status) + " " + condition.Message
		}
		return ""
	}).Should(MatchRegexp("^True 0 of [1-9]"), "a node was judged: its lease was read")
	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero())
}

// By default the chart grants no right to create Nodes or write ConfigMaps:
// only the simulated provider needs them. Its metrics are served over
// HTTPS to callers the API server authorizes.
func TestChartGrantsNodeCreationAndConfigMapWritesOnlyWithTheSimulatedProvider(t *testing.T) {
	g := NewWithT(t)
	grants := func(objects []*unstructured.Unstructured) []string {
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
						if (resource == "nodes" && verb == "create") || (resource == "configmaps" && verb != "get" && verb != "list" && verb != "watch") {
							found = append(found, object.GetKind()+"/"+object.GetName()+": "+verb.(string)+" "+resource.(string))
						}
					}
				}
			}
		}
		return found
	}
	defaults := harness.HelmTemplate(t, "--set", "clusterName=x")
	g.Expect(grants(defaults)).To(BeEmpty())
	g.Expect(grants(harness.HelmTemplate(t, "--set", "clusterName=x", "--set", "simulatedProvider.enabled=true"))).To(ContainElements(
		"ClusterRole/claimscale-simulated: create nodes", "Role/claimscale-simulated: create configmaps"))
	for _, object := range defaults {
		if object.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(object.Object, "spec", "template", "spec", "containers")
			g.Expect(containers[0].(map[string]any)["args"]).To(ContainElements("--metrics-bind-address=:8443", "--metrics-secure=true"))
			g.Expect(containers[0].(map[string]any)["args"]).NotTo(ContainElement("--simulated-provider"))
		}
	}
}

// The chart renders for cluster-autoscaler mode: a gRPC Service, the
// certificates and the CA's cloud-config.
func TestChartRendersExternalGRPCMode(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	objects := harness.HelmTemplate(t, "-f", filepath.Join(root, "charts", "claimscale", "values-externalgrpc.yaml"))
	names := map[string]bool{}
	for _, object := range objects {
		names[object.GetKind()+"/"+object.GetName()] = true
	}
	for _, want := range []string{
		"Service/claimscale-grpc", "Certificate/claimscale-grpc-server", "Certificate/claimscale-grpc-client",
		"Issuer/claimscale-grpc-ca", "ConfigMap/claimscale-cloud-config",
	} {
		g.Expect(names).To(HaveKey(want))
	}
	for _, object := range objects {
		if object.GetKind() != "Deployment" {
			continue
		}
		args, _, _ := unstructured.NestedSlice(object.Object, "spec", "template", "spec", "containers")
		g.Expect(args).NotTo(BeEmpty())
		container := args[0].(map[string]any)
		g.Expect(container["args"]).To(ContainElements("--mode=externalgrpc", "--grpc-client-ca=/etc/claimscale/grpc/ca.crt"))
	}
}

// config/default installs the same thing without Helm: every object it
// renders is accepted by the API server (server-side dry run).
func TestKustomizeInstallIsAccepted(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	objects := harness.Kustomize(t, filepath.Join(root, "config", "default"))
	kinds := map[string]int{}
	for _, object := range objects {
		kinds[object.GetKind()]++
		g.Expect(env.Client.Patch(context.Background(), object, client.Apply, client.DryRunAll,
			client.FieldOwner("kustomize-test"), client.ForceOwnership)).To(Succeed(), "%s %s", object.GetKind(), object.GetName())
	}
	// A Role and its binding in each namespace the controller reads or
	// writes: its own, kube-system (bootstrap tokens), kube-public
	// (cluster-info) and kube-node-lease (heartbeats, for repair); a
	// binding to kube-system's extension-apiserver-authentication-reader
	// (the client CA) and the decisions reader's Role (port-forward).
	// ClusterRoles: the controller's, the decisions reader's, and the six
	// for people (view, edit, one per plugin command).
	g.Expect(kinds).To(Equal(map[string]int{
		"CustomResourceDefinition": 3, "Namespace": 1, "ServiceAccount": 1, "ClusterRole": 8, "ClusterRoleBinding": 3,
		"Role": 5, "RoleBinding": 8, "Deployment": 1, "Service": 1,
	}))
}

// The controller sets Go's memory limit from the container's (see
// internal/memlimit): both installs must hand it over, or a controller
// near its limit is killed instead of collecting harder.
func TestChartAndKustomizeHandTheContainersMemoryLimitToTheController(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	kustomized := harness.Kustomize(t, filepath.Join(root, "config", "default"))
	for install, objects := range map[string][]*unstructured.Unstructured{"chart": harness.HelmTemplate(t, "--set", "clusterName=x"), "kustomize": kustomized} {
		found := false
		for _, object := range objects {
			if object.GetKind() != "Deployment" {
				continue
			}
			containers, _, _ := unstructured.NestedSlice(object.Object, "spec", "template", "spec", "containers")
			for _, container := range containers {
				container := container.(map[string]any)
				env, _, _ := unstructured.NestedSlice(container, "env")
				for _, variable := range env {
					variable := variable.(map[string]any)
					if variable["name"] != memlimit.EnvContainerLimit {
						continue
					}
					ref, _, _ := unstructured.NestedStringMap(variable, "valueFrom", "resourceFieldRef")
					g.Expect(ref).To(Equal(map[string]string{"containerName": container["name"].(string), "resource": "limits.memory"}), install)
					found = true
				}
			}
		}
		g.Expect(found).To(BeTrue(), "%s: no container is handed %s", install, memlimit.EnvContainerLimit)
	}
}
