package redfish_test

import (
	"context"
	"testing"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
	"github.com/claimscale/claimscale/pkg/provider/redfish"
	"github.com/claimscale/claimscale/pkg/provider/redfish/redfishtest"
)

// TestConformance runs the provider contract on an inventory of four
// servers in two shapes; another cluster's provider shares the inventory,
// as two clusters may share a room, and never a server.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		r := newRack(t, "s1", "small", "s2", "small", "s3", "small", "l1", "large", "l2", "large", "l3", "large")
		ours := r.provider(testCluster, r.settings(), redfish.Config{})
		return conformance.Harness{
			Provider: ours, ClusterName: testCluster, Foreign: r.provider("another-cluster", r.settings(), redfish.Config{}),
			Pool:              pool(),
			UnknownProviderID: redfish.ProviderIDPrefix + "00000000-0000-0000-0000-000000000000",
			ErrorCases: []conformance.ErrorCase{
				{Name: "Create when every server of the shape is on", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
					for _, name := range []string{"l1", "l2", "l3"} {
						r.bmcs[name].SetPower("1", redfishtest.On)
					}
					defer func() {
						for _, name := range []string{"l1", "l2", "l3"} {
							r.bmcs[name].SetPower("1", redfishtest.Off)
						}
					}()
					_, err := ours.Create(ctx, claim("conformance-all-on", "large"), provider.CreateOptions{})
					return err
				}},
				{Name: "Create when the BMCs refuse the credentials", Want: conformance.InsufficientCapacity, Call: func(ctx context.Context) error {
					// A server whose BMC cannot be read is not offered: with
					// every server of the shape unreadable, the shape has
					// no capacity.
					for _, name := range []string{"s1", "s2", "s3"} {
						r.bmcs[name].Fail(redfishtest.Failure{Status: 401})
					}
					defer func() {
						for _, name := range []string{"s1", "s2", "s3"} {
							r.bmcs[name].ClearFailures()
						}
					}()
					_, err := r.provider(testCluster, r.settings(), redfish.Config{}).Create(ctx, claim("conformance-refused", "small"), provider.CreateOptions{})
					return err
				}},
			},
		}
	})
}
