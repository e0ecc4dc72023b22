package proxmox_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// TestConformance runs the provider contract's checks on the Proxmox
// provider against the fake Proxmox VE API, cloning the template.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		api := fakeAPI(t)
		np := cloneProvider(api.Endpoint())
		build := func(cluster string) provider.Provider {
			p, err := proxmox.NewFactory(fastTasks)(context.Background(), np, provider.Options{ClusterName: cluster, Credentials: tokenCredentials(api)})
			if err != nil {
				t.Fatalf("building the provider: %v", err)
			}
			return p
		}
		ours := build(clusterName)
		q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
		return conformance.Harness{
			Provider: ours, ClusterName: clusterName, Foreign: build("another-cluster"),
			Pool: &v1alpha1.NodePool{
				ObjectMeta: metav1.ObjectMeta{Name: "workers"},
				Spec:       v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "small", CPU: q("2"), Memory: q("4Gi")}}}},
			},
			UnknownProviderID: proxmox.ProviderID(clusterName, 1009),
			TagsAtCreate: func(_ context.Context, providerID string) (map[string]string, error) {
				return markersAtCreate(api, providerID)
			},
			ErrorCases: []conformance.ErrorCase{
				{Name: "Create of a VM larger than any node's free memory", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
					_, err := ours.Create(ctx, claim("workers-huge", "2", "100Gi"), provider.CreateOptions{})
					return err
				}},
				{Name: "Get of a providerID of another provider", Want: conformance.Terminal, Call: func(ctx context.Context) error {
					_, err := ours.Get(ctx, "simulated://machine")
					return err
				}},
			},
		}
	})
}

// markersAtCreate reads, from the fake API's request log, the ownership
// markers of the call that made a VM: the clone call's description (it
// takes no tags) or the create call's tags.
func markersAtCreate(api *proxmoxtest.Server, providerID string) (map[string]string, error) {
	vmid := providerID[strings.LastIndex(providerID, "/")+1:]
	for _, r := range api.Requests() {
		if r.Method != http.MethodPost {
			continue
		}
		switch {
		case strings.HasSuffix(r.Path, "/clone") && r.Params["newid"] == vmid:
			out := map[string]string{}
			for _, line := range strings.Split(r.Params["description"], "\n") {
				if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "claimscale.io/") {
					out[k] = v
				}
			}
			return out, nil
		case strings.HasSuffix(r.Path, "/qemu") && r.Params["vmid"] == vmid:
			out := map[string]string{}
			for _, tag := range strings.Split(r.Params["tags"], ";") {
				for prefix, key := range map[string]string{"claimscale-cluster.": v1alpha1.TagCluster, "claimscale-pool.": v1alpha1.TagNodePool, "claimscale-claim.": v1alpha1.TagNodeClaim} {
					if v, ok := strings.CutPrefix(tag, prefix); ok {
						out[key] = v
					}
				}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("no call made VM %s", vmid)
}
