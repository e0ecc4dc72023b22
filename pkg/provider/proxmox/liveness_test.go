package proxmox_test

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// newClaim is a claim made at the given time (after the provider started,
// as every claim of a running controller is).
func newClaim(name string, at time.Time) *v1alpha1.NodeClaim {
	c := claim(name, "2", "4Gi")
	c.CreationTimestamp = metav1.NewTime(at)
	return c
}

func problemsOf(p provider.Provider) []provider.Problem {
	return p.(provider.ProblemReporter).Problems()
}

// A node that crashed mid-clone leaves qemu-server's temporary config
// ("lock: clone", no name, tags or description) in the ID range. Five
// claims made meanwhile get their VMs at once beside it; once the lock is
// older than the deadline it is reported as a problem of the provider.
func TestFiveClaimsAreNotHeldUpByAStaleCloneLock(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)
	api.AddVM(proxmoxtest.VM{VMID: 1000, Node: "pve1", Status: "stopped", Lock: "clone", Config: map[string]string{}})

	clk.Step(time.Second)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		made []string
	)
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := p.Create(ctx, newClaim("workers-"+string(rune('a'+i)), clk.Now()), provider.CreateOptions{})
			if err != nil {
				t.Errorf("Create beside a leftover clone lock: %v", err)
				return
			}
			mu.Lock()
			made = append(made, inst.ProviderID)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(made)
	want := []string{}
	for vmid := 1001; vmid <= 1005; vmid++ {
		want = append(want, proxmox.ProviderID(clusterName, vmid))
	}
	if !slices.Equal(made, want) {
		t.Fatalf("VMs made = %v, want %v beside the leftover", made, want)
	}
	if got := problemsOf(p); len(got) != 0 {
		t.Fatalf("problems before the deadline = %+v, want none (the lock may be a clone still running)", got)
	}

	clk.Step(5 * time.Minute)
	if _, err := p.Create(ctx, newClaim("workers-f", clk.Now()), provider.CreateOptions{}); err != nil {
		t.Fatalf("sixth Create: %v", err)
	}
	got := problemsOf(p)
	if len(got) != 1 || got[0].Reason != proxmox.ProblemStaleLock || !strings.Contains(got[0].Message, "VM 1000 on pve1") || !strings.Contains(got[0].Message, "qm unlock 1000") {
		t.Fatalf("problems past the deadline = %+v, want VM 1000's stale lock", got)
	}
	if vm, _ := api.VM(1000); vm.Lock != "clone" {
		t.Fatalf("the leftover was touched: %+v", vm)
	}
}

// A claim whose own clone crashed waits for it only until the deadline,
// then gets a VM of its own beside the leftover; another claim never
// waits on it.
func TestAClaimWaitsForItsOwnCrashedCloneOnlyUntilTheDeadline(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)
	api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", Crash: true})

	clk.Step(time.Second)
	crashed := newClaim("workers-crashed", clk.Now())
	if _, err := p.Create(ctx, crashed, provider.CreateOptions{}); err == nil {
		t.Fatal("the crashed clone succeeded")
	}
	if vm, _ := api.VM(1000); vm.Lock != "clone" || vm.Config["name"] != "" {
		t.Fatalf("leftover = %+v, want qemu-server's bare temporary config", vm)
	}
	if _, err := p.Create(ctx, newClaim("workers-other", clk.Now()), provider.CreateOptions{}); err != nil {
		t.Fatalf("another claim beside the crashed clone: %v", err)
	}
	_, err := p.Create(ctx, crashed, provider.CreateOptions{})
	if !provider.IsInProgress(err) || !strings.Contains(err.Error(), "VM 1000") {
		t.Fatalf("the claim's retry within the deadline = %v, want a wait on its own clone", err)
	}

	clk.Step(5 * time.Minute)
	inst, err := p.Create(ctx, crashed, provider.CreateOptions{})
	if err != nil {
		t.Fatalf("the claim's retry past the deadline: %v", err)
	}
	if inst.ProviderID == proxmox.ProviderID(clusterName, 1000) {
		t.Fatalf("the claim adopted the leftover %s", inst.ProviderID)
	}
	if got := problemsOf(p); len(got) != 1 || !strings.Contains(got[0].Message, "VM 1000") {
		t.Fatalf("problems = %+v, want VM 1000's stale lock", got)
	}

	// Unlocked and destroyed by a person: the problem goes.
	api.RemoveVM(1000)
	if _, err := p.Create(ctx, newClaim("workers-after", clk.Now()), provider.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := problemsOf(p); len(got) != 0 {
		t.Fatalf("problems once the leftover is gone = %+v", got)
	}
}

// The hosts a VM may go to are the provider's zones: online nodes of the
// allow-list.
func TestTheZonesAreTheOnlineAllowedHosts(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	np := cloneProvider(api.Endpoint())
	zones, err := newProvider(t, api, np).(provider.Zoner).Zones(ctx)
	if err != nil || !slices.Equal(zones, []string{"pve1", "pve2"}) {
		t.Fatalf("Zones = %v, %v; want pve1 and pve2 (pve3 is offline)", zones, err)
	}
	np.Spec.Proxmox.Nodes = []string{"pve2", "pve3"}
	zones, err = newProvider(t, api, np).(provider.Zoner).Zones(ctx)
	if err != nil || !slices.Equal(zones, []string{"pve2"}) {
		t.Fatalf("Zones with the allow-list pve2, pve3 = %v, %v; want pve2", zones, err)
	}
}

// A datacenter tag policy that refuses our tags (pve-guest-common's
// assert_tag_permissions answers 403 "Permission check failed (/,
// Sys.Modify for modifying tag 'T')", as the fake does) leaves the first
// clone untagged; the provider reports it and makes no more VMs the policy
// would leave untagged, until a later look finds the policy changed.
func TestARefusingTagPolicyIsAProblemAndMakesNoMoreClones(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api.SetUserTagAccess(proxmoxtest.UserTagAccess{Allow: "none"})
	p := clockedProvider(t, api, cloneProvider(api.Endpoint()), clk)

	for i := range 3 {
		_, err := p.Create(ctx, newClaim("workers-"+string(rune('a'+i)), clk.Now()), provider.CreateOptions{})
		if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "tag policy") {
			t.Fatalf("Create %d under a refusing tag policy = %v, want a terminal error naming the tag policy", i, err)
		}
	}
	if got := vmsInRange(api); len(got) != 1 {
		t.Fatalf("VMs = %d, want the first claim's clone only", len(got))
	}
	got := problemsOf(p)
	if len(got) != 1 || got[0].Reason != proxmox.ProblemTagPolicy || !strings.Contains(got[0].Message, "claimscale-") {
		t.Fatalf("problems = %+v, want the tag policy's refusal", got)
	}

	api.SetUserTagAccess(proxmoxtest.UserTagAccess{Allow: "free"})
	clk.Step(10 * time.Minute)
	if _, err := p.Create(ctx, newClaim("workers-d", clk.Now()), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create once the policy allows our tags: %v", err)
	}
	if got := problemsOf(p); len(got) != 0 {
		t.Fatalf("problems once tags were written = %+v", got)
	}
}

// A cloud-init ISO whose VM was destroyed outside claimscale is swept by
// List; the ISO of a live VM stays.
func TestListSweepsCloudInitISOsNoVMUses(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	api.AddStorage(proxmoxtest.Storage{Name: "local", Content: []string{"iso"}})
	clk := clocktesting.NewFakeClock(time.Now())
	np := cloneProvider(api.Endpoint())
	p := clockedProvider(t, api, np, clk)
	userData := provider.CreateOptions{UserData: []byte("#cloud-config\n")}
	kept, err := p.Create(ctx, newClaim("workers-kept", clk.Now()), userData)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := p.Create(ctx, newClaim("workers-gone", clk.Now()), userData)
	if err != nil {
		t.Fatal(err)
	}
	if len(api.Volumes()) != 2 {
		t.Fatalf("volumes = %v, want two cloud-init ISOs", api.Volumes())
	}
	// Destroyed by a person, with qm destroy: the ISO stays behind.
	api.RemoveVM(vmidOf(t, gone.ProviderID))

	clk.Step(10 * time.Minute)
	if _, err := p.List(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	for volid := range api.Volumes() {
		left = append(left, volid)
	}
	want := "local:iso/claimscale-" + clusterName + "-" + strconv.Itoa(vmidOf(t, kept.ProviderID)) + "-workers-kept.iso"
	if len(left) != 1 || left[0] != want {
		t.Fatalf("volumes after the sweep = %v, want only %s", left, want)
	}
}

func vmidOf(t *testing.T, providerID string) int {
	t.Helper()
	vmid, err := strconv.Atoi(providerID[strings.LastIndex(providerID, "/")+1:])
	if err != nil {
		t.Fatal(err)
	}
	return vmid
}
