package clusterapi_test

import (
	"context"
	"testing"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/clusterapi"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
)

// TestConformance runs the provider contract's checks on the clusterapi
// provider, its Machines provisioned by the test infrastructure provider.
func TestConformance(t *testing.T) {
	runProviders(t)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		f := newFixture(t)
		ours, theirs := f.provider(t, "conformance"), f.provider(t, "another-cluster")
		return conformance.Harness{
			Provider: ours, ClusterName: "conformance", Foreign: theirs,
			Pool:              pool(),
			UnknownProviderID: "clusterapi-test://" + f.namespace + "/no-such-machine",
			ErrorCases:        errorCases(t, f, ours),
		}
	})
}

func errorCases(t *testing.T, f fixture, p *clusterapi.Provider) []conformance.ErrorCase {
	broken := f.settings()
	broken.Shapes[0].InfrastructureTemplate.Name = "no-such-template"
	brokenProvider, err := clusterapi.New(t.Context(), clusterapi.Config{Kube: env.Client}, nodeProviderOf(broken), provider.Options{ClusterName: "conformance"})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	return []conformance.ErrorCase{
		{Name: "Create of a shape the NodeProvider does not map", Want: conformance.Terminal, Call: func(ctx context.Context) error {
			_, err := p.Create(ctx, claimOf("conformance-unmapped", "huge", "8", "16Gi"), provider.CreateOptions{})
			return err
		}},
		{Name: "Create from a template that does not exist", Want: conformance.Terminal, Call: func(ctx context.Context) error {
			_, err := brokenProvider.Create(ctx, claimOf("conformance-broken", "small", "2", "4Gi"), provider.CreateOptions{})
			return err
		}},
		{Name: "Create on a template whose machine fails for capacity", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
			_, err := failingProvider(t, f, "InsufficientResources", "no host has 4 free cores").Create(ctx, claimOf("conformance-full", "small", "2", "4Gi"), provider.CreateOptions{})
			return err
		}},
		{Name: "Get of a providerID that is none", Want: conformance.Terminal, Call: func(ctx context.Context) error {
			_, err := p.Get(ctx, "not-a-provider-id")
			return err
		}},
	}
}
