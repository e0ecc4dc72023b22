package proxmox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cidata"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// The tests in this file follow behaviours of real Proxmox VE that the
// fake models with their sources (see the proxmoxtest package comment).

// clockedProvider builds the provider on a fake clock. Tasks answer on
// their first poll, so no task waits on the clock's ticker.
func clockedProvider(t *testing.T, api *proxmoxtest.Server, np *v1alpha1.NodeProvider, clk *clocktesting.FakeClock) provider.Provider {
	t.Helper()
	api.SetTaskPolls(0)
	p, err := proxmox.NewFactory(proxmox.Tuning{TaskPollInterval: time.Millisecond, TaskTimeout: time.Minute, StaleLockAfter: 5 * time.Minute, Clock: clk})(
		context.Background(), np, provider.Options{ClusterName: clusterName, Credentials: tokenCredentials(api)})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	return p
}

// vmsInRange are the guests in the NodeProvider's VM ID range.
func vmsInRange(api *proxmoxtest.Server) []proxmoxtest.VM {
	var out []proxmoxtest.VM
	for _, vm := range api.VMs() {
		if vm.VMID >= 1000 && vm.VMID <= 1009 {
			out = append(out, vm)
		}
	}
	return out
}

func TestCreateFindsItsVMWhileNamesLag(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api.SetStatsLag(clk, 10*time.Second)
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)

	// The start's answer is lost: the clone is made, tagged and sized,
	// and /cluster/resources still shows it without a name.
	api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/status/start$`, LoseResponse: true})
	if _, err := p.Create(ctx, claim("workers-lag", "2", "4Gi"), provider.CreateOptions{}); err == nil {
		t.Fatal("Create with a lost start answer succeeded")
	}
	inst, err := p.Create(ctx, claim("workers-lag", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("retried Create: %v", err)
	}
	if got := vmsInRange(api); len(got) != 1 || inst.ProviderID != proxmox.ProviderID(clusterName, got[0].VMID) {
		t.Fatalf("VMs after a retry inside the stats window = %+v, want the one VM of %s", got, inst.ProviderID)
	}
}

func TestCreateAfterALostCloneAnswerWaitsForItsOwnClone(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api.SetStatsLag(clk, 10*time.Second)
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)

	api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `/clone$`, LoseResponse: true})
	if _, err := p.Create(ctx, claim("workers-lost", "2", "4Gi"), provider.CreateOptions{}); err == nil {
		t.Fatal("Create with a lost clone answer succeeded")
	}
	// The clone runs on, locked and nameless; the retry waits for it.
	_, err := p.Create(ctx, claim("workers-lost", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsInProgress(err) || !strings.Contains(err.Error(), "is being made") {
		t.Fatalf("Create while its own clone runs = %v, want a retryable wait", err)
	}
	api.FinishTasks()
	if _, err := p.Create(ctx, claim("workers-lost", "2", "4Gi"), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create after the clone finished: %v", err)
	}
	if got := vmsInRange(api); len(got) != 1 || got[0].Status != "running" {
		t.Fatalf("VMs = %+v, want one running VM", got)
	}
}

func TestTasksEndingWithWarningsSucceed(t *testing.T) {
	for _, typ := range []string{"qmclone", "qmconfig", "qmstart", "qmstop", "qmdestroy"} {
		t.Run(typ, func(t *testing.T) {
			ctx, _ := loggingContext(t)
			api := fakeAPI(t)
			p := newProvider(t, api, cloneProvider(api.Endpoint()))
			api.FailTask(proxmoxtest.TaskFault{Type: typ, ExitStatus: "WARNINGS: 1"})
			inst, err := p.Create(ctx, claim("workers-warn", "2", "4Gi"), provider.CreateOptions{})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if err := p.Delete(ctx, inst.ProviderID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if got := vmsInRange(api); len(got) != 0 {
				t.Fatalf("VMs left = %+v", got)
			}
		})
	}
}

func TestAStaleCloneLockBlocksCreateOnlyUntilTheDeadline(t *testing.T) {
	ctx, sink := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)
	// A node crashed mid-clone: the temporary config, locked, no name.
	api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", Crash: true})
	other := proxmox.NewFactory(proxmox.Tuning{TaskPollInterval: time.Millisecond, TaskTimeout: time.Minute, Clock: clk})
	crashed, err := other(ctx, cloneProvider(api.Endpoint()), provider.Options{ClusterName: "other-cluster", Credentials: tokenCredentials(api)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.Create(ctx, claim("elsewhere", "2", "4Gi"), provider.CreateOptions{}); err == nil {
		t.Fatal("the crashed clone succeeded")
	}
	if vm, _ := api.VM(1000); vm.Lock != "clone" || vm.Name != "" {
		t.Fatalf("leftover = %+v, want a nameless VM locked for clone", vm)
	}

	_, err = p.Create(ctx, claim("workers-a", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsRetryable(err) {
		t.Fatalf("Create beside a fresh unmarked clone lock = %v, want a retryable wait", err)
	}
	clk.Step(5 * time.Minute)
	inst, err := p.Create(ctx, claim("workers-a", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("Create past the stale-lock deadline: %v", err)
	}
	if inst.ProviderID != proxmox.ProviderID(clusterName, 1001) {
		t.Errorf("VM = %s, want 1001 beside the leftover", inst.ProviderID)
	}
	if !strings.Contains(sink.String(), "stale locked VM") || !strings.Contains(sink.String(), `"vmid"=1000`) {
		t.Errorf("the leftover was not reported in the log:\n%s", sink.String())
	}
}

func TestTheClaimsOwnStaleLockedVMIsReported(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)
	// The claim's clone got its first disk and description, then its node
	// crashed (before a restart of claimscale).
	api.AddVM(proxmoxtest.VM{VMID: 1002, Node: "pve1", Lock: "clone", Config: map[string]string{
		"name": "workers-stuck", "description": "claimscale.io/cluster=" + clusterName + "\nclaimscale.io/nodepool=workers\nclaimscale.io/nodeclaim=workers-stuck\n",
	}})
	_, err := p.Create(ctx, claim("workers-stuck", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsInProgress(err) || !strings.Contains(err.Error(), "still working on it") {
		t.Fatalf("Create while the claim's clone is locked = %v, want a wait", err)
	}
	clk.Step(5 * time.Minute)
	_, err = p.Create(ctx, claim("workers-stuck", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsRetryable(err) || provider.IsInProgress(err) || !strings.Contains(err.Error(), "qm unlock 1002") {
		t.Fatalf("Create past the deadline = %v, want a report saying to run qm unlock 1002", err)
	}
	if got := vmsInRange(api); len(got) != 1 {
		t.Fatalf("VMs = %+v, want no second VM for the claim", got)
	}
}

func TestAStaleLockedVMOfOursIsListedAndDeletedOnceUnlocked(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	// The clone's first disk was copied (name and description written),
	// then its node crashed.
	api.AddVM(proxmoxtest.VM{VMID: 1003, Node: "pve1", Lock: "clone", Config: map[string]string{
		"name": "gone-claim", "memory": "4352", "cores": "2",
		"description": "Made by claimscale for NodeClaim gone-claim\nclaimscale.io/cluster=" + clusterName + "\nclaimscale.io/nodepool=workers\nclaimscale.io/nodeclaim=gone-claim\nclaimscale.io/created=2024-01-01T00:00:00Z\n",
		"meta":        "creation-qemu=9.0.2,ctime=1900000000",
	}})
	list, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ClaimName() != "gone-claim" || list[0].State != provider.InstanceCreating || !list[0].CreatedAt.Equal(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("List = %+v, want the locked leftover, Creating, made 2024-01-01", list)
	}
	err = p.Delete(ctx, list[0].ProviderID)
	if err == nil || !strings.Contains(err.Error(), "qm unlock 1003") {
		t.Fatalf("Delete of a locked leftover = %v, want an error saying to run qm unlock 1003", err)
	}
	vm, _ := api.VM(1003)
	vm.Lock = ""
	api.AddVM(vm)
	if err := p.Delete(ctx, list[0].ProviderID); err != nil {
		t.Fatalf("Delete once unlocked: %v", err)
	}
	if _, ok := api.VM(1003); ok {
		t.Fatal("the leftover is still there")
	}
}

func TestACloneIsAsOldAsItsCreateNotItsTemplate(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	tmpl := template()
	tmpl.Config["meta"] = "creation-qemu=6.1.0,ctime=1600000000"
	api.AddVM(tmpl)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	before := time.Now().Add(-time.Second)
	inst, err := p.Create(ctx, claim("workers-new", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vm, _ := api.VM(1000); !strings.Contains(vm.Config["meta"], "ctime=1600000000") {
		t.Fatalf("the fake did not copy the template's meta: %q", vm.Config["meta"])
	}
	got, err := p.Get(ctx, inst.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Before(before) {
		t.Fatalf("CreatedAt = %s, want the time of the Create (after %s), not the template's", got.CreatedAt, before)
	}
}

func TestAStartShortOfMemoryMovesToAnotherNode(t *testing.T) {
	ctx, _ := loggingContext(t)
	nodes := defaultNodes()
	nodes[0].StartableMemoryMiB = 9 << 10 // pve1 reports 56 GiB free, QEMU gets 1 GiB
	api := fakeAPI(t, nodes...)
	api.AddStorage(proxmoxtest.Storage{Name: "local", Content: []string{"iso"}})
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	inst, err := p.Create(ctx, claim("workers-mem", "2", "4Gi"), provider.CreateOptions{UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if got := api.RequestsTo(http.MethodDelete, `^/nodes/pve1/storage/local/content/`); len(got) != 1 {
		t.Errorf("the cloud-init ISO of the VM that could not start was deleted %d times, want once", len(got))
	}
	got := vmsInRange(api)
	if len(got) != 1 || got[0].Node != "pve2" || got[0].Status != "running" || inst.Labels["topology.kubernetes.io/zone"] != "pve2" {
		t.Fatalf("VMs = %+v, want one running VM on pve2", got)
	}

	nodes[1].StartableMemoryMiB = 3 << 10
	api.SetNode(nodes[1])
	_, err = p.Create(ctx, claim("workers-mem2", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "lack of memory") {
		t.Fatalf("Create with no node able to start it = %v, want insufficient capacity naming the memory", err)
	}
	if got := vmsInRange(api); len(got) != 1 {
		t.Fatalf("VMs = %+v, want only the first claim's", got)
	}
}

func TestAProtectedTemplatesClonesCanBeDeleted(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	tmpl := template()
	tmpl.Config["protection"] = "1"
	api.AddVM(tmpl)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	inst, err := p.Create(ctx, claim("workers-prot", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, inst.ProviderID); err != nil {
		t.Fatalf("Delete of a protected template's clone: %v", err)
	}

	// A VM someone protected by hand is refused with a message that says so.
	inst, err = p.Create(ctx, claim("workers-prot2", "2", "4Gi"), provider.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vm, _ := api.VM(1000)
	vm.Config["protection"] = "1"
	vm.Status = "stopped"
	api.AddVM(vm)
	err = p.Delete(ctx, inst.ProviderID)
	if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "protection") {
		t.Fatalf("Delete of a protected VM = %v, want a terminal error naming protection", err)
	}
}

func TestATagPolicyRefusalIsTerminalAndMakesNoSecondVM(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api.SetStatsLag(clk, 10*time.Second)
	api.SetUserTagAccess(proxmoxtest.UserTagAccess{Allow: "list", List: []string{"ubuntu"}})
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)
	for i := range 2 {
		_, err := p.Create(ctx, claim("workers-tags", "2", "4Gi"), provider.CreateOptions{})
		if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "tag policy") || !strings.Contains(err.Error(), "claimscale-claim.workers-tags") {
			t.Fatalf("Create %d under a refusing tag policy = %v, want a terminal error about the tag policy", i, err)
		}
	}
	if got := vmsInRange(api); len(got) != 1 {
		t.Fatalf("VMs = %+v, want the one clone, found again by its description", got)
	}
	list, err := p.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v; want the untagged clone", list, err)
	}
	if err := p.Delete(ctx, list[0].ProviderID); err != nil {
		t.Fatalf("Delete: %v", err)
	}

	np := netbootProvider(api.Endpoint())
	_, err = newProvider(t, api, np).Create(ctx, claim("workers-nb", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "tag policy") {
		t.Fatalf("netboot Create under a refusing tag policy = %v, want a terminal error about the tag policy", err)
	}
}

func TestPerNodeTemplates(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	second := template()
	second.VMID, second.Node = 9001, "pve2"
	api.AddVM(second)

	np := cloneProvider(api.Endpoint())
	np.Spec.Proxmox.Clone = &v1alpha1.ProxmoxClone{NodeTemplates: []v1alpha1.ProxmoxNodeTemplate{{Node: "pve1", TemplateID: 9000}, {Node: "pve2", TemplateID: 9001}}}
	p := newProvider(t, api, np)
	// Two claims of one pool: one on each node, each from its own template.
	for _, name := range []string{"workers-1", "workers-2"} {
		if _, err := p.Create(ctx, claim(name, "2", "4Gi"), provider.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range api.RequestsTo(http.MethodPost, `/clone$`) {
		if r.Params["target"] != "" {
			t.Errorf("clone %s went to another node (%s): local templates cannot", r.Path, r.Params["target"])
		}
	}
	if got := api.RequestsTo(http.MethodPost, `^/nodes/pve2/qemu/9001/clone$`); len(got) != 1 {
		t.Errorf("clones of pve2's template = %d, want 1", len(got))
	}

	byName := cloneProvider(api.Endpoint())
	byName.Spec.Proxmox.VMIDRange = v1alpha1.VMIDRange{Lower: 1005, Upper: 1009}
	byName.Spec.Proxmox.Nodes = []string{"pve2"}
	byName.Spec.Proxmox.Clone = &v1alpha1.ProxmoxClone{TemplateName: "ubuntu-2404-ci"}
	if _, err := newProvider(t, api, byName).Create(ctx, claim("workers-3", "2", "4Gi"), provider.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := api.RequestsTo(http.MethodPost, `^/nodes/pve2/qemu/9001/clone$`); len(got) != 2 {
		t.Errorf("clones of the template named ubuntu-2404-ci on pve2 = %d, want 2", len(got))
	}
}

func TestAPoolSpreadsOverNodes(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	perNode := map[string]int{}
	for _, name := range []string{"workers-1", "workers-2", "workers-3", "workers-4"} {
		inst, err := p.Create(ctx, claim(name, "1", "2Gi"), provider.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		perNode[inst.Labels["topology.kubernetes.io/zone"]]++
	}
	if perNode["pve1"] != 2 || perNode["pve2"] != 2 {
		t.Fatalf("VMs per node = %v, want 2 on each online node", perNode)
	}
}

func TestVMsGoIntoTheResourcePool(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	np := cloneProvider(api.Endpoint())
	np.Spec.Proxmox.Pool = "claimscale"
	p := newProvider(t, api, np)
	_, err := p.Create(ctx, claim("workers-pool", "2", "4Gi"), provider.CreateOptions{})
	if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "pool 'claimscale' does not exist") {
		t.Fatalf("Create into a missing pool = %v, want a terminal error naming the pool", err)
	}
	api.AddPool("claimscale")
	if _, err := p.Create(ctx, claim("workers-pool", "2", "4Gi"), provider.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := vmsInRange(api); len(got) != 1 || got[0].Pool != "claimscale" {
		t.Fatalf("VMs = %+v, want one in pool claimscale", got)
	}
}

func TestUserDataGoesOntoACloudInitDrive(t *testing.T) {
	ctx, sink := loggingContext(t)
	api := fakeAPI(t)
	api.AddStorage(proxmoxtest.Storage{Name: "local", Content: []string{"iso", "vztmpl", "snippets"}})
	api.AddStorage(proxmoxtest.Storage{Name: "local-lvm", Content: []string{"images"}})
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	userData := []byte("#cloud-config\nruncmd: [kubeadm join --token abcdef.0123456789abcdef]\n")

	inst, err := p.Create(ctx, claim("workers-ci", "2", "4Gi"), provider.CreateOptions{UserData: userData})
	if err != nil {
		t.Fatal(err)
	}
	const volume = "local:iso/claimscale-" + clusterName + "-1000-workers-ci.iso"
	image, ok := api.Volumes()[volume]
	if !ok {
		t.Fatalf("volumes = %v, want %s", api.Volumes(), volume)
	}
	label, files := readISO(t, image)
	if label != "cidata" || string(files["user-data"]) != string(userData) || !strings.Contains(string(files["meta-data"]), "instance-id: proxmox://") {
		t.Fatalf("ISO label %q files %q, want cidata with the user data and meta-data", label, files)
	}
	vm, _ := api.VM(1000)
	if vm.Config["ide3"] != volume+",media=cdrom" || vm.Config["cicustom"] != "vendor=local:snippets/k3s-join.yaml" {
		t.Fatalf("VM config ide3=%q cicustom=%q", vm.Config["ide3"], vm.Config["cicustom"])
	}
	if strings.Contains(sink.String(), "abcdef") {
		t.Fatal("the user data reached the log")
	}
	if err := p.Delete(ctx, inst.ProviderID); err != nil {
		t.Fatal(err)
	}
	if len(api.Volumes()) != 0 {
		t.Fatalf("volumes left after Delete: %v", api.Volumes())
	}

	noISO := cloneProvider(api.Endpoint())
	noISO.Spec.Proxmox.CloudInitStorage = "local-lvm"
	_, err = newProvider(t, api, noISO).Create(ctx, claim("workers-ci2", "2", "4Gi"), provider.CreateOptions{UserData: userData})
	if err == nil || !strings.Contains(err.Error(), "does not support 'iso' content") || strings.Contains(err.Error(), "abcdef") {
		t.Fatalf("Create uploading to a storage without iso = %v, want the storage's refusal", err)
	}
}

func readISO(t *testing.T, image []byte) (string, map[string][]byte) {
	t.Helper()
	label, files, err := cidata.Read(image)
	if err != nil {
		t.Fatal(err)
	}
	return label, files
}
