package simulated

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
)

// TestConformance runs the provider contract's checks on the simulated
// provider, its machines kept in a namespace of the test API server.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		ns := newNamespace(t)
		ours := newTestProvider(t, ns, "conformance", nil, Config{})
		theirs := newTestProvider(t, ns, "another-cluster", nil, Config{})
		failing := newTestProvider(t, ns, "conformance", &v1alpha1.SimulatedSettings{CreateFailurePercent: 100}, Config{})
		created := env.RecordCreations(t, corev1.SchemeGroupVersion.WithKind("ConfigMap"), ns)
		return conformance.Harness{
			Provider: ours, ClusterName: "conformance", Foreign: theirs,
			Pool:              ConformancePool(),
			UnknownProviderID: ProviderID("no-such-machine"),
			ErrorCases:        ConformanceErrorCases(ours, failing),
			TagsAtCreate:      tagsAtCreate(created),
		}
	})
}

// tagsAtCreate reads a machine's tags from its ConfigMap as the API server
// stored it on create, the way the provider reads them.
func tagsAtCreate(created *testenv.Creations) func(context.Context, string) (map[string]string, error) {
	return func(ctx context.Context, providerID string) (map[string]string, error) {
		object, err := created.Created(ctx, strings.TrimPrefix(providerID, ProviderIDPrefix))
		if err != nil {
			return nil, err
		}
		var cm corev1.ConfigMap
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object.Object, &cm); err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s: %w", object.GetName(), err)
		}
		m, err := machineFromConfigMap(&cm)
		if err != nil {
			return nil, err
		}
		return m.tags, nil
	}
}

// ConformancePool is a pool of two fixed shapes.
func ConformancePool() *v1alpha1.NodePool {
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	bigCPU, bigMemory := resource.MustParse("4"), resource.MustParse("8Gi")
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "conformance"},
		Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
			{Name: "small", CPU: &cpu, Memory: &memory, Price: "0.05"},
			{Name: "large", CPU: &bigCPU, Memory: &bigMemory, Price: "0.1"},
		}}},
	}
}

// ConformanceErrorCases are the simulated provider's error kinds: a
// claim without a size and a providerID of another provider are Terminal,
// an injected create failure Retryable.
func ConformanceErrorCases(p, failing provider.Provider) []conformance.ErrorCase {
	zero := newClaim("conformance-zero-size", "conformance")
	zero.Spec.Shape.CPU = resource.MustParse("0")
	return []conformance.ErrorCase{
		{Name: "Create of a claim with zero cpu", Want: conformance.Terminal, Call: func(ctx context.Context) error {
			_, err := p.Create(ctx, zero, provider.CreateOptions{})
			return err
		}},
		{Name: "Create with createFailurePercent 100", Want: conformance.Retryable, Call: func(ctx context.Context) error {
			_, err := failing.Create(ctx, newClaim("conformance-failing", "conformance"), provider.CreateOptions{})
			return err
		}},
		{Name: "Get of a providerID of another provider", Want: conformance.Terminal, Call: func(ctx context.Context) error {
			_, err := p.Get(ctx, "proxmox://pve/100")
			return err
		}},
	}
}
