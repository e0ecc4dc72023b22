package clusterapi_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi/clusterapitest"
)

// env is one API server with the Cluster API CRDs and the test providers'
// installed; each test keeps to its own namespace and Cluster.
var env *testenv.Environment

func TestMain(m *testing.M) {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	paths, err := clusterapitest.CRDPaths(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.RunMain(m, testenv.Options{CRDPaths: paths}, &env, nil)
}

var names atomic.Int64

// fixture is one test's CAPI Cluster with two infrastructure templates
// ("sized" with status.capacity, "annotated" with cluster-autoscaler's
// capacity annotations), a bootstrap config template, and a
// MachineDeployment using the sized ones.
type fixture struct {
	namespace, cluster string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "capi-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	f := fixture{namespace: ns.Name, cluster: fmt.Sprintf("workload-%d", names.Add(1))}
	objects := []*unstructured.Unstructured{
		object(clusterapi.ClusterKind.GroupVersion().String(), "Cluster", f.namespace, f.cluster, map[string]any{
			"infrastructureRef": map[string]any{"apiGroup": clusterapitest.InfraGroup, "kind": "TestCluster", "name": f.cluster},
		}),
		object(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", f.namespace, "sized", map[string]any{
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"from-template": "sized"}},
				"spec":     map[string]any{"capacity": map[string]any{"cpu": "4", "memory": "8Gi"}},
			},
		}),
		object(clusterapitest.TemplateKind.GroupVersion().String(), "TestMachineTemplate", f.namespace, "annotated", map[string]any{
			"template": map[string]any{"spec": map[string]any{"capacity": map[string]any{"cpu": "2", "memory": "4Gi"}}},
		}),
		object(clusterapitest.ConfigTmplKind.GroupVersion().String(), "TestConfigTemplate", f.namespace, "join", map[string]any{
			"template": map[string]any{"spec": map[string]any{"joinWith": "test"}},
		}),
		object(clusterapi.MachineDeploymentKind.GroupVersion().String(), "MachineDeployment", f.namespace, "workers", map[string]any{
			"clusterName": f.cluster,
			"replicas":    int64(0),
			"selector":    map[string]any{"matchLabels": map[string]any{"pool": "workers"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"pool": "workers", "tier": "batch"}},
				"spec": map[string]any{
					"clusterName":       f.cluster,
					"version":           "v1.37.0",
					"bootstrap":         map[string]any{"configRef": map[string]any{"apiGroup": clusterapitest.BootstrapGroup, "kind": "TestConfigTemplate", "name": "join"}},
					"infrastructureRef": map[string]any{"apiGroup": clusterapitest.InfraGroup, "kind": "TestMachineTemplate", "name": "sized"},
				},
			},
		}),
	}
	objects[2].SetAnnotations(map[string]string{
		"capacity.cluster-autoscaler.kubernetes.io/cpu":    "2",
		"capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi",
	})
	for _, obj := range objects {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	// The sized template reports its capacity as the CAPI contract says
	// an infrastructure template does for scale from zero.
	sized := objects[1]
	_ = unstructured.SetNestedStringMap(sized.Object, map[string]string{"cpu": "4", "memory": "8Gi"}, "status", "capacity")
	if err := env.Client.Status().Update(ctx, sized); err != nil {
		t.Fatalf("writing the template's status: %v", err)
	}
	return f
}

func object(apiVersion, kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetAPIVersion(apiVersion)
	obj.SetKind(kind)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

// settings map shape "small" to the annotated template named directly,
// "large" to the MachineDeployment.
func (f fixture) settings() *v1alpha1.ClusterAPISettings {
	return &v1alpha1.ClusterAPISettings{
		Cluster: v1alpha1.ClusterAPIClusterReference{Namespace: f.namespace, Name: f.cluster},
		Shapes: []v1alpha1.ClusterAPIShape{
			{
				Name:                    "small",
				InfrastructureTemplate:  &v1alpha1.ClusterAPITemplateReference{APIGroup: clusterapitest.InfraGroup, Kind: "TestMachineTemplate", Name: "annotated"},
				BootstrapConfigTemplate: &v1alpha1.ClusterAPITemplateReference{APIGroup: clusterapitest.BootstrapGroup, Kind: "TestConfigTemplate", Name: "join"},
				Version:                 "v1.37.0",
			},
			{Name: "large", MachineDeployment: "workers"},
		},
	}
}

func nodeProviderOf(settings *v1alpha1.ClusterAPISettings) *v1alpha1.NodeProvider {
	return &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "capi"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeClusterAPI, ClusterAPI: settings},
	}
}

func (f fixture) provider(t *testing.T, clusterName string) *clusterapi.Provider {
	t.Helper()
	return f.providerWith(t, clusterName, clusterapi.Config{Kube: env.Client})
}

func (f fixture) providerWith(t *testing.T, clusterName string, cfg clusterapi.Config) *clusterapi.Provider {
	t.Helper()
	p, err := clusterapi.New(t.Context(), cfg, nodeProviderOf(f.settings()), provider.Options{ClusterName: clusterName})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	return p
}

// runProviders runs the test infrastructure and bootstrap providers, with
// the stand-in for CAPI's Machine controller, until the test ends.
func runProviders(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&clusterapitest.Providers{Management: env.Client, CoreStandIn: true, Interval: 50 * time.Millisecond}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func pool() *v1alpha1.NodePool {
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
			{Name: "small", Price: "0.05"},
			{Name: "large", Price: "0.1"},
		}}},
	}
}

func claimOf(name, shape string, cpu, memory string) *v1alpha1.NodeClaim {
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
			Shape:       v1alpha1.ClaimShape{Name: shape, CPU: resource.MustParse(cpu), Memory: resource.MustParse(memory)},
		},
	}
}
