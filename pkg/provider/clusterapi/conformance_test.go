package clusterapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
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
		created := env.RecordCreations(t, clusterapi.ClusterKind.GroupVersion().WithKind("Machine"), f.namespace)
		return conformance.Harness{
			Provider: ours, ClusterName: "conformance", Foreign: theirs,
			Pool:              pool(),
			UnknownProviderID: "clusterapi-test://" + f.namespace + "/no-such-machine",
			ErrorCases:        errorCases(t, f, ours),
			TagsAtCreate: func(ctx context.Context, providerID string) (map[string]string, error) {
				// Right after Create a Machine has no providerID of its
				// own yet: the provider names it by namespace and name.
				name := providerID[strings.LastIndex(providerID, "/")+1:]
				machine, err := created.Created(ctx, name)
				if err != nil {
					return nil, err
				}
				labels := machine.GetLabels()
				return map[string]string{
					v1alpha1.TagCluster:   labels[v1alpha1.TagCluster],
					v1alpha1.TagNodePool:  labels[v1alpha1.TagNodePool],
					v1alpha1.TagNodeClaim: labels[v1alpha1.TagNodeClaim],
				}, nil
			},
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
