package proxmox_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

func TestDelete(t *testing.T) {
	foreign := proxmoxtest.VM{VMID: 1005, Node: "pve1", Name: "workers-a1", Status: "running", Config: map[string]string{"memory": "1024"}}
	otherCluster := proxmoxtest.VM{VMID: 1006, Node: "pve1", Name: "workers-b2", Status: "running",
		Config: map[string]string{"tags": "claimscale-claim.workers-b2;claimscale-cluster.other-cluster;claimscale-pool.workers", "memory": "1024"}}
	tests := []struct {
		name string
		// prepare returns the providerID to delete.
		prepare func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string
		// wantRefusal is a substring of the terminal error; empty means success.
		wantRefusal string
		// wantGone is the VM ID that must be gone afterwards; keep is one that must remain.
		wantGone int
		keep     int
		// wantStopped says the VM was stopped before it was destroyed.
		wantStopped bool
	}{
		{
			name: "a running VM of ours is stopped, then destroyed with its disks",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				ctx, _ := loggingContext(t)
				inst, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				return inst.ProviderID
			},
			wantGone:    1000,
			wantStopped: true,
		},
		{
			name: "a stopped clone known only by its description is destroyed",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				api.AddVM(proxmoxtest.VM{VMID: 1002, Node: "pve2", Name: "workers-a1",
					Config: map[string]string{"description": "claimscale.io/cluster=test-cluster\nclaimscale.io/nodeclaim=workers-a1\n"}})
				return "proxmox://test-cluster/1002"
			},
			wantGone: 1002,
		},
		{
			name: "a VM without our marker is refused",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				api.AddVM(foreign)
				return "proxmox://test-cluster/1005"
			},
			wantRefusal: "refusing to delete VM 1005 on pve1: it carries no claimscale.io/cluster marker of cluster test-cluster",
			keep:        1005,
		},
		{
			name: "a VM of another cluster is refused",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				api.AddVM(otherCluster)
				return "proxmox://test-cluster/1006"
			},
			wantRefusal: "refusing to delete VM 1006",
			keep:        1006,
		},
		{
			name: "a providerID of another cluster is refused",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				api.AddVM(otherCluster)
				return "proxmox://other-cluster/1006"
			},
			wantRefusal: `belongs to cluster "other-cluster"`,
			keep:        1006,
		},
		{
			name: "the template is refused",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				return "proxmox://test-cluster/9000"
			},
			wantRefusal: "template",
			keep:        templateID,
		},
		{
			name: "a VM that is already gone is success",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				return "proxmox://test-cluster/1009"
			},
		},
		{
			name: "a VM that vanishes while it is destroyed is success",
			prepare: func(t *testing.T, api *proxmoxtest.Server, p provider.Provider) string {
				api.AddVM(proxmoxtest.VM{VMID: 1002, Node: "pve2", Name: "workers-a1", Config: map[string]string{"tags": strings.Join(ourTags, ";")}})
				api.InjectFault(proxmoxtest.Fault{Method: http.MethodDelete, Status: 500, Message: "Configuration file 'nodes/pve2/qemu-server/1002.conf' does not exist",
					Before: func() { api.RemoveVM(1002) }})
				return "proxmox://test-cluster/1002"
			},
			wantGone: 1002,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			p := newProvider(t, api, cloneProvider(api.Endpoint()))
			providerID := tt.prepare(t, api, p)
			ctx, _ := loggingContext(t)

			err := p.Delete(ctx, providerID)
			if tt.wantRefusal != "" {
				if !provider.IsTerminal(err) || !strings.Contains(err.Error(), tt.wantRefusal) {
					t.Fatalf("Delete error = %v, want a terminal refusal mentioning %q", err, tt.wantRefusal)
				}
				if n := len(api.RequestsTo(http.MethodDelete, "")) + len(api.RequestsTo(http.MethodPost, `/status/stop$`)); n != 0 {
					t.Errorf("%d stop or destroy calls were made on a VM that is not ours", n)
				}
			} else if err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if tt.keep != 0 {
				if _, ok := api.VM(tt.keep); !ok {
					t.Errorf("VM %d was destroyed", tt.keep)
				}
			}
			if tt.wantGone != 0 {
				if _, ok := api.VM(tt.wantGone); ok {
					t.Errorf("VM %d still exists", tt.wantGone)
				}
				destroys := api.RequestsTo(http.MethodDelete, "")
				if len(destroys) != 1 || destroys[0].Query.Get("purge") != "1" || destroys[0].Query.Get("destroy-unreferenced-disks") != "1" {
					t.Errorf("destroy calls = %+v, want one with purge=1 and destroy-unreferenced-disks=1", destroys)
				}
			}
			if stopped := len(api.RequestsTo(http.MethodPost, `/status/stop$`)) == 1; stopped != tt.wantStopped {
				t.Errorf("VM stopped before destroy: %v, want %v", stopped, tt.wantStopped)
			}
		})
	}
}
