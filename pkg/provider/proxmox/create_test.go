package proxmox_test

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

var ourTags = []string{"claimscale-claim.workers-a1", "claimscale-cluster.test-cluster", "claimscale-pool.workers"}

func TestCreateClonesTheTemplate(t *testing.T) {
	tests := []struct {
		name string
		full bool
		// wantParams and absentParams are checked on the clone call.
		wantParams   map[string]string
		absentParams []string
	}{
		{
			name:         "a full clone copies the disks to the configured storage",
			full:         true,
			wantParams:   map[string]string{"newid": "1000", "name": "workers-a1", "full": "1", "storage": "local-lvm"},
			absentParams: []string{"tags", "target"},
		},
		{
			name:         "a linked clone stays on the template's storage",
			full:         false,
			wantParams:   map[string]string{"newid": "1000", "name": "workers-a1"},
			absentParams: []string{"tags", "target", "full", "storage"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			np := cloneProvider(api.Endpoint())
			np.Spec.Proxmox.Clone.Full = ptr.To(tt.full)
			p := newProvider(t, api, np)
			ctx, _ := loggingContext(t)

			inst, err := p.Create(ctx, claim("workers-a1", "1500m", "4Gi"), provider.CreateOptions{})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}

			clones := api.RequestsTo(http.MethodPost, `^/nodes/pve1/qemu/9000/clone$`)
			if len(clones) != 1 {
				t.Fatalf("want one clone call, got %d", len(clones))
			}
			for k, v := range tt.wantParams {
				if got := clones[0].Params[k]; got != v {
					t.Errorf("clone parameter %s = %q, want %q", k, got, v)
				}
			}
			for _, k := range tt.absentParams {
				if v, ok := clones[0].Params[k]; ok {
					t.Errorf("clone parameter %s = %q, want it absent", k, v)
				}
			}
			for _, marker := range []string{"claimscale.io/cluster=test-cluster", "claimscale.io/nodepool=workers", "claimscale.io/nodeclaim=workers-a1"} {
				if !strings.Contains(clones[0].Params["description"], marker) {
					t.Errorf("clone description %q lacks the marker %s", clones[0].Params["description"], marker)
				}
			}

			// The tags follow the clone before anything else changes the VM.
			var after []string
			seenClone := false
			for _, r := range api.Requests() {
				if strings.HasSuffix(r.Path, "/clone") {
					seenClone = true
					continue
				}
				if seenClone && r.Method != http.MethodGet {
					after = append(after, r.Method+" "+r.Path)
				}
			}
			wantOrder := []string{"PUT /nodes/pve1/qemu/1000/config", "POST /nodes/pve1/qemu/1000/config", "POST /nodes/pve1/qemu/1000/status/start"}
			if !slices.Equal(after, wantOrder) {
				t.Errorf("calls after the clone = %v, want %v", after, wantOrder)
			}

			vm, ok := api.VM(1000)
			if !ok {
				t.Fatal("VM 1000 was not made")
			}
			wantConfig := map[string]string{
				"name":      "workers-a1",
				"tags":      strings.Join(append(slices.Clone(ourTags), "ubuntu"), ";"),
				"cores":     "2",
				"sockets":   "1",
				"memory":    "4352", // 4 GiB and 256 MiB of overhead
				"net0":      "virtio,bridge=vmbr0,tag=20",
				"cicustom":  "vendor=local:snippets/k3s-join.yaml",
				"agent":     "1",
				"ipconfig0": "ip=dhcp",
			}
			for k, v := range wantConfig {
				if vm.Config[k] != v {
					t.Errorf("VM config %s = %q, want %q", k, vm.Config[k], v)
				}
			}
			if vm.Status != "running" || vm.Lock != "" {
				t.Errorf("VM status %q lock %q, want running and unlocked", vm.Status, vm.Lock)
			}
			checkSMBIOS(t, vm.Config["smbios1"], "workers-a1", "proxmox://test-cluster/1000")

			if inst.ProviderID != "proxmox://test-cluster/1000" || inst.Name != "workers-a1" || inst.State != provider.InstanceRunning {
				t.Errorf("instance = %s %s %s, want proxmox://test-cluster/1000 workers-a1 Running", inst.ProviderID, inst.Name, inst.State)
			}
			if cpu, mem := inst.Capacity[corev1.ResourceCPU], inst.Capacity[corev1.ResourceMemory]; cpu.Cmp(resource.MustParse("2")) != 0 || mem.Cmp(resource.MustParse("4Gi")) != 0 {
				t.Errorf("capacity = %s cpu, %s memory; want 2 and 4Gi (the shape's, without the overhead)", cpu.String(), mem.String())
			}
			if inst.Tags[v1alpha1.TagCluster] != clusterName || inst.Tags[v1alpha1.TagNodePool] != "workers" || inst.ClaimName() != "workers-a1" {
				t.Errorf("instance tags = %v", inst.Tags)
			}
			if inst.Labels[corev1.LabelTopologyZone] != "pve1" {
				t.Errorf("zone label = %q, want the Proxmox node pve1", inst.Labels[corev1.LabelTopologyZone])
			}
		})
	}
}

func TestCreateNetbootsABlankVM(t *testing.T) {
	api := fakeAPI(t)
	p := newProvider(t, api, netbootProvider(api.Endpoint()))
	ctx, _ := loggingContext(t)

	inst, err := p.Create(ctx, claim("workers-a1", "4", "8Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(api.RequestsTo("", `/clone$`)) != 0 {
		t.Error("netboot cloned the template")
	}
	creates := api.RequestsTo(http.MethodPost, `^/nodes/pve1/qemu$`)
	if len(creates) != 1 {
		t.Fatalf("want one create call on pve1, got %d", len(creates))
	}
	want := map[string]string{
		"vmid": "1000", "name": "workers-a1", "tags": strings.Join(ourTags, ";"),
		"boot": "order=net0", "scsi0": "local-lvm:32", "ostype": "l26",
		"cores": "4", "sockets": "1", "memory": "8448", "net0": "virtio,bridge=vmbr0,tag=20", "cpu": "host",
	}
	for k, v := range want {
		if got := creates[0].Params[k]; got != v {
			t.Errorf("create parameter %s = %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(creates[0].Params["description"], "claimscale.io/cluster=test-cluster") {
		t.Errorf("create description %q lacks the cluster marker", creates[0].Params["description"])
	}
	if n := len(api.RequestsTo(http.MethodPut, `/config$`)) + len(api.RequestsTo(http.MethodPost, `/config$`)); n != 0 {
		t.Errorf("netboot changed the config after create %d times; everything belongs in the create call", n)
	}
	vm, _ := api.VM(1000)
	if vm.Status != "running" {
		t.Errorf("VM status = %q, want running", vm.Status)
	}
	if inst.ProviderID != "proxmox://test-cluster/1000" {
		t.Errorf("providerID = %s", inst.ProviderID)
	}
	checkSMBIOS(t, creates[0].Params["smbios1"], "workers-a1", "proxmox://test-cluster/1000")
}

// checkSMBIOS checks that the guest can read its name and providerID from
// SMBIOS, next to a UUID.
func checkSMBIOS(t *testing.T, smbios1, name, providerID string) {
	t.Helper()
	fields := map[string]string{}
	for _, f := range strings.Split(smbios1, ",") {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	decode := func(k string) string {
		b, err := base64.StdEncoding.DecodeString(fields[k])
		if err != nil {
			t.Errorf("smbios1 %s %q is not base64", k, fields[k])
		}
		return string(b)
	}
	if fields["base64"] != "1" || decode("serial") != name || decode("sku") != providerID || len(fields["uuid"]) != 36 {
		t.Errorf("smbios1 = %q, want a UUID, serial %s and sku %s, base64-encoded", smbios1, name, providerID)
	}
}

func TestCreatePlacesTheVM(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []proxmoxtest.Node
		allowed  []string
		existing []proxmoxtest.VM
		claim    *v1alpha1.NodeClaim
		wantNode string
		// wantCapacityError is a substring of the insufficient-capacity error.
		wantCapacityError string
	}{
		{
			name:     "the node with the most free memory wins",
			nodes:    defaultNodes(),
			claim:    claim("workers-a1", "2", "4Gi"),
			wantNode: "pve1",
		},
		{
			name:     "nodes outside the allow-list are never used",
			nodes:    defaultNodes(),
			allowed:  []string{"pve2", "pve3"},
			claim:    claim("workers-a1", "2", "4Gi"),
			wantNode: "pve2",
		},
		{
			name: "an offline node is skipped",
			nodes: []proxmoxtest.Node{
				{Name: "pve1", CPUs: 16, MemoryMiB: 64 << 10, Offline: true},
				{Name: "pve2", CPUs: 8, MemoryMiB: 32 << 10},
			},
			claim:    claim("workers-a1", "2", "4Gi"),
			wantNode: "pve2",
		},
		{
			name: "a node without enough idle CPUs is skipped",
			nodes: []proxmoxtest.Node{
				{Name: "pve1", CPUs: 16, MemoryMiB: 64 << 10, CPULoad: 0.9},
				{Name: "pve2", CPUs: 8, MemoryMiB: 32 << 10, CPULoad: 0.1},
			},
			claim:    claim("workers-a1", "4", "4Gi"),
			wantNode: "pve2",
		},
		{
			name:  "running VMs count with the memory they were given",
			nodes: []proxmoxtest.Node{{Name: "pve1", CPUs: 16, MemoryMiB: 64 << 10}, {Name: "pve2", CPUs: 8, MemoryMiB: 32 << 10}},
			existing: []proxmoxtest.VM{
				{VMID: 200, Node: "pve1", Name: "db", Status: "running", Config: map[string]string{"memory": "49152"}},
			},
			claim:    claim("workers-a1", "2", "4Gi"),
			wantNode: "pve2",
		},
		{
			name:     "the claim's zone requirement narrows the nodes",
			nodes:    defaultNodes(),
			claim:    withZone(claim("workers-a1", "2", "4Gi"), corev1.NodeSelectorOpIn, "pve2"),
			wantNode: "pve2",
		},
		{
			name:              "no node with room is insufficient capacity",
			nodes:             defaultNodes(),
			claim:             claim("workers-a1", "2", "100Gi"),
			wantCapacityError: "pve1: 57344 MiB free; pve2: 30720 MiB free; pve3: offline",
		},
		{
			name:              "a VM with more cores than any node has is insufficient capacity",
			nodes:             defaultNodes(),
			allowed:           []string{"pve2"},
			claim:             claim("workers-a1", "12", "4Gi"),
			wantCapacityError: "pve2: has 8 CPUs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t, tt.nodes...)
			for _, vm := range tt.existing {
				api.AddVM(vm)
			}
			np := netbootProvider(api.Endpoint())
			np.Spec.Proxmox.Nodes = tt.allowed
			p := newProvider(t, api, np)
			ctx, _ := loggingContext(t)

			inst, err := p.Create(ctx, tt.claim, provider.CreateOptions{})
			if tt.wantCapacityError != "" {
				if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), tt.wantCapacityError) {
					t.Fatalf("Create error = %v, want insufficient capacity mentioning %q", err, tt.wantCapacityError)
				}
				if n := len(api.RequestsTo(http.MethodPost, `/qemu$`)); n != 0 {
					t.Errorf("%d VMs were made anyway", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			vm, _ := api.VMByName("workers-a1")
			if vm.Node != tt.wantNode || inst.Labels[corev1.LabelTopologyZone] != tt.wantNode {
				t.Errorf("VM placed on %s (zone label %s), want %s", vm.Node, inst.Labels[corev1.LabelTopologyZone], tt.wantNode)
			}
		})
	}
}

func withZone(c *v1alpha1.NodeClaim, op corev1.NodeSelectorOperator, zones ...string) *v1alpha1.NodeClaim {
	c.Spec.Requirements.NodeSelector = append(c.Spec.Requirements.NodeSelector, corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: op, Values: zones})
	return c
}

func TestCreateClonesToTheChosenNode(t *testing.T) {
	api := fakeAPI(t)
	np := cloneProvider(api.Endpoint())
	np.Spec.Proxmox.Nodes = []string{"pve2"}
	p := newProvider(t, api, np)
	ctx, _ := loggingContext(t)

	if _, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	clones := api.RequestsTo(http.MethodPost, `/clone$`)
	if len(clones) != 1 || clones[0].Params["target"] != "pve2" {
		t.Fatalf("clone calls = %v, want one with target pve2", clones)
	}
	if vm, _ := api.VM(1000); vm.Node != "pve2" || vm.Status != "running" {
		t.Errorf("VM on %s, %s; want running on pve2", vm.Node, vm.Status)
	}
}

func TestCreateMovesOnWhenAVMIDIsTaken(t *testing.T) {
	foreign := proxmoxtest.VM{VMID: 1000, Node: "pve2", Name: "someone-else", Status: "running", Config: map[string]string{"memory": "1024"}}
	tests := []struct {
		name    string
		prepare func(api *proxmoxtest.Server)
		upper   int32
		wantID  int
		// wantCapacityError is set when no ID is left.
		wantCapacityError bool
	}{
		{
			name: "IDs other guests use are skipped",
			prepare: func(api *proxmoxtest.Server) {
				api.AddVM(foreign)
				api.AddVM(proxmoxtest.VM{VMID: 1001, Node: "pve1", Name: "ct"})
			},
			wantID: 1002,
		},
		{
			name: "an ID taken between the listing and the clone moves on to the next",
			prepare: func(api *proxmoxtest.Server) {
				api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/clone$`, Before: func() { api.AddVM(foreign) }})
			},
			wantID: 1001,
		},
		{
			name: "an ID found taken inside the clone task moves on to the next",
			prepare: func(api *proxmoxtest.Server) {
				api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", ExitStatus: "unable to create VM 1000: config file already exists"})
			},
			wantID: 1001,
		},
		{
			name: "no free ID in the range is insufficient capacity",
			prepare: func(api *proxmoxtest.Server) {
				api.AddVM(foreign)
				api.AddVM(proxmoxtest.VM{VMID: 1001, Node: "pve1", Name: "ct"})
			},
			upper:             1001,
			wantCapacityError: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			tt.prepare(api)
			np := cloneProvider(api.Endpoint())
			if tt.upper != 0 {
				np.Spec.Proxmox.VMIDRange.Upper = tt.upper
			}
			p := newProvider(t, api, np)
			ctx, _ := loggingContext(t)

			inst, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
			if tt.wantCapacityError {
				if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "no free VM ID") {
					t.Fatalf("Create error = %v, want insufficient capacity for VM IDs", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if want := "proxmox://test-cluster/" + strconv.Itoa(tt.wantID); inst.ProviderID != want {
				t.Errorf("providerID = %s, want %s", inst.ProviderID, want)
			}
			if vm, ok := api.VM(1000); ok && vm.Name == "someone-else" && vm.Status != "running" {
				t.Error("the other VM with the taken ID was touched")
			}
			if vm, _ := api.VMByName("workers-a1"); vm.VMID != tt.wantID || vm.Status != "running" {
				t.Errorf("claim's VM is %d (%s), want %d running", vm.VMID, vm.Status, tt.wantID)
			}
			named := 0
			for _, vm := range api.VMs() {
				if vm.Name == "workers-a1" {
					named++
				}
			}
			if named != 1 {
				t.Errorf("%d VMs are named after the claim, want 1", named)
			}
		})
	}
}

func TestCreateAdoptsTheClaimsVM(t *testing.T) {
	description := "Made by claimscale for NodeClaim workers-a1.\nclaimscale.io/cluster=test-cluster\nclaimscale.io/nodepool=workers\nclaimscale.io/nodeclaim=workers-a1\n"
	tests := []struct {
		name     string
		existing proxmoxtest.VM
		// wantRetry is set when Create must wait for Proxmox.
		wantRetry  bool
		wantID     int
		wantConfig map[string]string
	}{
		{
			name: "a clone cut short before its tags is tagged, sized and started, not cloned again",
			existing: proxmoxtest.VM{VMID: 1003, Node: "pve2", Name: "workers-a1",
				Config: map[string]string{"description": description, "tags": "ubuntu", "cores": "2", "memory": "2048"}},
			wantID: 1003,
			wantConfig: map[string]string{
				"tags": strings.Join(append(slices.Clone(ourTags), "ubuntu"), ";"), "memory": "4352", "net0": "virtio,bridge=vmbr0,tag=20",
			},
		},
		{
			name: "a running, tagged VM of the claim is returned as it is",
			existing: proxmoxtest.VM{VMID: 1004, Node: "pve1", Name: "workers-a1", Status: "running",
				Config: map[string]string{"description": description, "tags": strings.Join(ourTags, ";"), "cores": "2", "memory": "4352"}},
			wantID:     1004,
			wantConfig: map[string]string{"memory": "4352"},
		},
		{
			name: "a VM Proxmox is still cloning is waited for",
			existing: proxmoxtest.VM{VMID: 1005, Node: "pve1", Name: "workers-a1", Lock: "clone",
				Config: map[string]string{"description": description, "cores": "2", "memory": "2048"}},
			wantRetry: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := fakeAPI(t)
			api.AddVM(tt.existing)
			p := newProvider(t, api, cloneProvider(api.Endpoint()))
			ctx, _ := loggingContext(t)

			inst, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
			if n := len(api.RequestsTo(http.MethodPost, `/clone$`)); n != 0 {
				t.Errorf("the template was cloned %d times although the claim's VM exists", n)
			}
			if tt.wantRetry {
				if !provider.IsRetryable(err) || provider.RetryAfter(err) == 0 || !strings.Contains(err.Error(), "locked (clone)") {
					t.Fatalf("Create error = %v, want a retryable error with a wait, saying the VM is locked", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if want := "proxmox://test-cluster/" + strconv.Itoa(tt.wantID); inst.ProviderID != want {
				t.Errorf("providerID = %s, want %s", inst.ProviderID, want)
			}
			vm, _ := api.VM(tt.wantID)
			if vm.Status != "running" {
				t.Errorf("VM status = %q, want running", vm.Status)
			}
			for k, v := range tt.wantConfig {
				if vm.Config[k] != v {
					t.Errorf("VM config %s = %q, want %q", k, vm.Config[k], v)
				}
			}
		})
	}
}

func TestCreateTwiceMakesOneVM(t *testing.T) {
	api := fakeAPI(t)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	ctx, _ := loggingContext(t)

	first, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("first Create: %v", err)
	}
	second, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if first.ProviderID != second.ProviderID {
		t.Errorf("second Create returned %s, want the first VM %s", second.ProviderID, first.ProviderID)
	}
	if n := len(api.RequestsTo(http.MethodPost, `/clone$`)); n != 1 {
		t.Errorf("the template was cloned %d times, want once", n)
	}
}

func TestCreateLeavesSameNamedVMsOfOthersAlone(t *testing.T) {
	api := fakeAPI(t)
	other := proxmoxtest.VM{VMID: 1000, Node: "pve1", Name: "workers-a1", Status: "running",
		Config: map[string]string{"tags": "claimscale-claim.workers-a1;claimscale-cluster.other-cluster;claimscale-pool.workers", "memory": "1024"}}
	api.AddVM(other)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	ctx, _ := loggingContext(t)

	inst, err := p.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if inst.ProviderID != "proxmox://test-cluster/1001" {
		t.Errorf("providerID = %s, want a new VM 1001", inst.ProviderID)
	}
	if vm, _ := api.VM(1000); vm.Config["tags"] != other.Config["tags"] || vm.Config["memory"] != "1024" {
		t.Errorf("the other cluster's VM was changed: %v", vm.Config)
	}
}

func TestConcurrentCreatesTakeDifferentIDsAndCountEachOther(t *testing.T) {
	// pve1 has room for one 40 GiB VM, pve2 for one more; a third does not
	// fit anywhere once the first two are counted.
	api := fakeAPI(t,
		proxmoxtest.Node{Name: "pve1", CPUs: 16, MemoryMiB: 64 << 10, UsedMemoryMiB: 8 << 10},
		proxmoxtest.Node{Name: "pve2", CPUs: 16, MemoryMiB: 48 << 10, UsedMemoryMiB: 2 << 10},
	)
	api.SetTaskPolls(5)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	ctx, _ := loggingContext(t)

	names := []string{"workers-a1", "workers-b2", "workers-c3"}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			_, errs[i] = p.Create(ctx, claim(name, "2", "40Gi"), provider.CreateOptions{})
		})
	}
	wg.Wait()

	made, short := map[string]int{}, 0
	for i, err := range errs {
		switch {
		case err == nil:
			vm, _ := api.VMByName(names[i])
			made[vm.Node]++
		case provider.IsInsufficientCapacity(err):
			short++
		default:
			t.Errorf("Create %s: %v", names[i], err)
		}
	}
	if made["pve1"] != 1 || made["pve2"] != 1 || short != 1 {
		t.Errorf("VMs per node = %v and %d short of capacity; want one on each node and one short", made, short)
	}
	ids := map[int]bool{}
	for _, vm := range api.VMs() {
		if ids[vm.VMID] {
			t.Errorf("VM ID %d used twice", vm.VMID)
		}
		ids[vm.VMID] = true
	}
}
