package cloudscale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
)

// TestConformance runs the provider contract's checks on the cloudscale
// provider against the fake cloudscale.ch API.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		// Servers run once made: the sleep checks suspend a machine right
		// after its Create, and the API stops only a server that has booted
		// (a new one is "changing" until then).
		api := cloudscaletest.NewServer(cloudscaletest.WithToken(testToken), cloudscaletest.WithServersRunning())
		t.Cleanup(api.Close)
		build := func(cluster string) provider.Provider {
			p, err := cloudscale.NewWithConfig(t.Context(), nodeProvider(baseSettings()), provider.Options{
				ClusterName: cluster,
				Credentials: map[string][]byte{cloudscale.CredentialToken: []byte(testToken), cloudscale.CredentialAPIURL: []byte(api.URL)},
				Secrets:     secretStore{"claimscale-system/worker-user-data/user-data": []byte(userData)},
			}, cloudscale.Config{ListTTL: time.Millisecond})
			if err != nil {
				t.Fatalf("building the provider: %v", err)
			}
			return p
		}
		ours := build(testCluster)
		return conformance.Harness{
			Provider: ours, ClusterName: testCluster, Foreign: build("another-cluster"),
			Pool: &v1alpha1.NodePool{
				ObjectMeta: metav1.ObjectMeta{Name: "workers"},
				Spec:       v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "flex-4-2"}, {Name: "flex-8-4"}}}},
			},
			UnknownProviderID: cloudscale.ProviderID("6a2ad8d8-5d5c-4c5b-9a4e-000000000000"),
			TagsAtCreate: func(_ context.Context, providerID string) (map[string]string, error) {
				return tagsAtCreate(api, providerID)
			},
			ErrorCases: []conformance.ErrorCase{
				{Name: "Create when the zone is out of capacity", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
					api.InjectFault(cloudscaletest.OutOfCapacity("lpg1", ""))
					defer api.ClearFaults()
					_, err := ours.Create(ctx, claim("workers-full", "workers", "flex-4-2"), provider.CreateOptions{})
					return err
				}},
				{Name: "Create with a read-only token", Want: conformance.Terminal, Call: func(ctx context.Context) error {
					api.InjectFault(cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 403, Detail: "You do not have permission to perform this action."})
					defer api.ClearFaults()
					_, err := ours.Create(ctx, claim("workers-readonly", "workers", "flex-4-2"), provider.CreateOptions{})
					return err
				}},
			},
		}
	})
}

// tagsAtCreate reads, from the fake API's request log, the tags of the
// POST /v1/servers that made a server.
func tagsAtCreate(api *cloudscaletest.Server, providerID string) (map[string]string, error) {
	name := ""
	for _, server := range api.Servers() {
		if cloudscale.ProviderID(server.UUID) == providerID {
			name = server.Name
		}
	}
	for _, r := range api.Requests() {
		if r.Method != http.MethodPost || strings.TrimSuffix(r.Path, "/") != "/v1/servers" {
			continue
		}
		var body struct {
			Name string            `json:"name"`
			Tags map[string]string `json:"tags"`
		}
		if err := json.Unmarshal(r.Body, &body); err == nil && body.Name == name && name != "" {
			return body.Tags, nil
		}
	}
	return nil, fmt.Errorf("no POST /v1/servers made %s", providerID)
}
