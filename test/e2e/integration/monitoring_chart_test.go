package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// With monitoring switched on, the chart renders one Grafana sidecar
// ConfigMap per generated dashboard (accepted by the API server in a
// server-side dry run), a PrometheusRule whose rules are exactly
// files/alerts.yaml (the file promtool tests), and a ServiceMonitor that
// selects the metrics Service and scrapes its port over HTTPS with a
// bearer token. The monitoring.coreos.com CRDs are not in the local control
// plane, so those two objects are checked for shape, not applied.
func TestChartRendersMonitoring(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	objects := harness.HelmTemplate(t, "--set", "clusterName="+harness.ClusterName,
		"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
		"--set", "metrics.dashboards.enabled=true")
	byKind := map[string][]*unstructured.Unstructured{}
	for _, object := range objects {
		byKind[object.GetKind()] = append(byKind[object.GetKind()], object)
	}

	dashboardFiles, err := filepath.Glob(filepath.Join(root, "charts", "claimscale", "dashboards", "*.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dashboardFiles).To(HaveLen(3), "overview, disruption, externalgrpc")
	dashboards := map[string]string{}
	for _, cm := range byKind["ConfigMap"] {
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		for name, content := range data {
			dashboards[name] = content
		}
		g.Expect(env.Client.Patch(context.Background(), cm, client.Apply, client.DryRunAll,
			client.FieldOwner("chart-test"), client.ForceOwnership)).To(Succeed(), "ConfigMap %s", cm.GetName())
	}
	for _, file := range dashboardFiles {
		want, err := os.ReadFile(file)
		g.Expect(err).NotTo(HaveOccurred())
		got, ok := dashboards[filepath.Base(file)]
		g.Expect(ok).To(BeTrue(), "no ConfigMap holds %s", filepath.Base(file))
		var parsed map[string]any
		g.Expect(json.Unmarshal([]byte(got), &parsed)).To(Succeed())
		g.Expect(got + "\n").To(Equal(string(want)))
	}

	g.Expect(byKind["PrometheusRule"]).To(HaveLen(1))
	rules, err := os.ReadFile(filepath.Join(root, "charts", "claimscale", "files", "alerts.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var want map[string]any
	g.Expect(yaml.Unmarshal(rules, &want)).To(Succeed())
	g.Expect(byKind["PrometheusRule"][0].Object["spec"]).To(Equal(want))

	g.Expect(byKind["ServiceMonitor"]).To(HaveLen(1))
	monitor := byKind["ServiceMonitor"][0]
	selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	g.Expect(endpoints).To(HaveLen(1))
	endpoint := endpoints[0].(map[string]any)
	g.Expect(endpoint).To(HaveKeyWithValue("scheme", "https"))
	g.Expect(endpoint).To(HaveKeyWithValue("bearerTokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token"))
	selected := 0
	for _, service := range byKind["Service"] {
		matches := true
		for k, v := range selector {
			matches = matches && service.GetLabels()[k] == v
		}
		if !matches {
			continue
		}
		selected++
		ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
		g.Expect(ports).To(ContainElement(HaveKeyWithValue("name", endpoint["port"])), "Service %s has no port %v", service.GetName(), endpoint["port"])
	}
	g.Expect(selected).To(BeNumerically(">=", 1), "the ServiceMonitor selects no Service")
}
