package proxmox_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// guests is a Proxmox cluster with VMs of every kind of owner.
func guests() []proxmoxtest.VM {
	return []proxmoxtest.VM{
		{VMID: 1000, Node: "pve1", Name: "workers-a1", Status: "running",
			Config: map[string]string{"tags": strings.Join(ourTags, ";"), "cores": "2", "memory": "4352", "meta": "creation-qemu=9.0.2,ctime=1700000000"}},
		// A clone whose Create was cut short before the tags: in the range,
		// known by its description.
		{VMID: 1001, Node: "pve2", Name: "workers-b2", Lock: "",
			Config: map[string]string{"description": "claimscale.io/cluster=test-cluster\nclaimscale.io/nodepool=workers\nclaimscale.io/nodeclaim=workers-b2\n", "cores": "2", "memory": "2048"}},
		{VMID: 1002, Node: "pve1", Name: "other-c3", Status: "running",
			Config: map[string]string{"tags": "claimscale-claim.other-c3;claimscale-cluster.other-cluster;claimscale-pool.workers", "memory": "1024"}},
		{VMID: 1003, Node: "pve1", Name: "home-assistant", Status: "running", Config: map[string]string{"memory": "2048"}},
		// A VM of ours put to sleep: tagged (Create tags a VM before it
		// first starts it) and stopped.
		{VMID: 1004, Node: "pve2", Name: "workers-d4", Status: "stopped",
			Config: map[string]string{"tags": "claimscale-claim.workers-d4;claimscale-cluster.test-cluster;claimscale-pool.workers", "cores": "2", "memory": "4352"}},
		// Markers outside the range in the description only are not looked for.
		{VMID: 300, Node: "pve1", Name: "legacy",
			Config: map[string]string{"description": "claimscale.io/cluster=test-cluster\n", "memory": "1024"}},
	}
}

func TestListReturnsOnlyThisClustersVMs(t *testing.T) {
	api := fakeAPI(t)
	for _, vm := range guests() {
		api.AddVM(vm)
	}
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	ctx, _ := loggingContext(t)

	got, err := p.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var ids []string
	for _, inst := range got {
		ids = append(ids, inst.ProviderID)
	}
	want := []string{"proxmox://test-cluster/1000", "proxmox://test-cluster/1001", "proxmox://test-cluster/1004"}
	if !slices.Equal(ids, want) {
		t.Fatalf("List = %v, want %v", ids, want)
	}

	first := got[0]
	if first.Name != "workers-a1" || first.ClaimName() != "workers-a1" || first.State != provider.InstanceRunning {
		t.Errorf("first instance = %s, claim %s, %s", first.Name, first.ClaimName(), first.State)
	}
	if !first.CreatedAt.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("CreatedAt = %s, want the ctime of the VM's meta", first.CreatedAt)
	}
	if mem := first.Capacity[corev1.ResourceMemory]; mem.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("memory capacity = %s, want 4Gi (4352 MiB less the 256 MiB overhead)", mem.String())
	}
	// Stopped, both: the one whose Create was cut short is still being
	// made, the tagged one sleeps.
	if got[1].ClaimName() != "workers-b2" || got[1].State != provider.InstanceCreating {
		t.Errorf("second instance: claim %s, %s; want workers-b2, Creating", got[1].ClaimName(), got[1].State)
	}
	if got[2].ClaimName() != "workers-d4" || got[2].State != provider.InstanceSuspended {
		t.Errorf("third instance: claim %s, %s; want workers-d4, Suspended", got[2].ClaimName(), got[2].State)
	}
}

func TestGet(t *testing.T) {
	tests := []struct {
		name       string
		providerID string
		// wantNotFound, else the claim the instance belongs to.
		wantNotFound bool
		wantClaim    string
	}{
		{name: "a VM of ours", providerID: "proxmox://test-cluster/1000", wantClaim: "workers-a1"},
		{name: "a clone known by its description", providerID: "proxmox://test-cluster/1001", wantClaim: "workers-b2"},
		{name: "a VM of another cluster is not found", providerID: "proxmox://test-cluster/1002", wantNotFound: true},
		{name: "a VM without markers is not found", providerID: "proxmox://test-cluster/1003", wantNotFound: true},
		{name: "a VM that does not exist is not found", providerID: "proxmox://test-cluster/1009", wantNotFound: true},
		{name: "a providerID of another cluster is not found", providerID: "proxmox://other-cluster/1000", wantNotFound: true},
	}
	api := fakeAPI(t)
	for _, vm := range guests() {
		api.AddVM(vm)
	}
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, _ := loggingContext(t)
			inst, err := p.Get(ctx, tt.providerID)
			if tt.wantNotFound {
				if !provider.IsNotFound(err) {
					t.Fatalf("Get error = %v, want not found", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if inst.ProviderID != tt.providerID || inst.ClaimName() != tt.wantClaim {
				t.Errorf("Get = %s of claim %s, want %s of claim %s", inst.ProviderID, inst.ClaimName(), tt.providerID, tt.wantClaim)
			}
		})
	}
}
