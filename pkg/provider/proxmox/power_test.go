package proxmox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// sleeper is a provider with a VM of ours made through Create, with a
// cloud-init ISO, running on pve1.
type sleeper struct {
	api  *proxmoxtest.Server
	p    provider.PowerManager
	prov provider.Provider
	inst *provider.Instance
	vmid int
}

func newSleeper(t *testing.T, tuning proxmox.Tuning, np func(*v1alpha1.NodeProvider)) *sleeper {
	t.Helper()
	api := fakeAPI(t)
	api.AddStorage(proxmoxtest.Storage{Name: "local", Content: []string{"iso"}})
	settings := cloneProvider(api.Endpoint())
	if np != nil {
		np(settings)
	}
	prov, err := proxmox.NewFactory(tuning)(context.Background(), settings, provider.Options{ClusterName: clusterName, Credentials: tokenCredentials(api)})
	if err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	ctx, _ := loggingContext(t)
	inst, err := prov.Create(ctx, claim("workers-a1", "2", "4Gi"), provider.CreateOptions{UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	power, ok := prov.(provider.PowerManager)
	if !ok || !provider.CanManagePower(ctx, prov) {
		t.Fatal("the Proxmox provider does not manage power")
	}
	return &sleeper{api: api, p: power, prov: prov, inst: inst, vmid: 1000}
}

func (s *sleeper) vm(t *testing.T) proxmoxtest.VM {
	t.Helper()
	vm, ok := s.api.VM(s.vmid)
	if !ok {
		t.Fatalf("VM %d is gone", s.vmid)
	}
	return vm
}

// update changes the VM behind the provider's back.
func (s *sleeper) update(t *testing.T, change func(*proxmoxtest.VM)) {
	vm := s.vm(t)
	change(&vm)
	s.api.AddVM(vm)
}

func TestSuspendShutsDownAGuestThatActsOnACPI(t *testing.T) {
	s := newSleeper(t, fastTasks, nil)
	ctx, _ := loggingContext(t)
	before := s.vm(t)

	if err := s.p.Suspend(ctx, s.inst.ProviderID); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	after := s.vm(t)
	if after.Status != "stopped" {
		t.Fatalf("VM status after Suspend = %s, want stopped", after.Status)
	}
	shutdowns := s.api.RequestsTo(http.MethodPost, `/qemu/1000/status/shutdown$`)
	if len(shutdowns) != 1 || shutdowns[0].Params["timeout"] != "120" {
		t.Fatalf("shutdown calls = %+v, want one with the default timeout of 120 s", shutdowns)
	}
	if stops := s.api.RequestsTo(http.MethodPost, `/status/stop$`); len(stops) != 0 {
		t.Errorf("a guest that shut down was stopped as well: %d stop calls", len(stops))
	}
	if after.Config["tags"] != before.Config["tags"] || after.Config["ide3"] != before.Config["ide3"] || after.Config["ide3"] == "" {
		t.Errorf("the sleeping VM lost its tags or cloud-init drive: tags %q → %q, ide3 %q → %q", before.Config["tags"], after.Config["tags"], before.Config["ide3"], after.Config["ide3"])
	}
	got, err := s.prov.Get(ctx, s.inst.ProviderID)
	if err != nil || got.State != provider.InstanceSuspended || got.ClaimName() != "workers-a1" {
		t.Fatalf("Get of the sleeping VM = %+v, %v; want Suspended, of claim workers-a1", got, err)
	}

	if err := s.p.Suspend(ctx, s.inst.ProviderID); err != nil {
		t.Fatalf("Suspend of a sleeping VM: %v", err)
	}
	if n := len(s.api.RequestsTo(http.MethodPost, `/status/(shutdown|stop)$`)); n != 1 {
		t.Errorf("Suspend of a sleeping VM made another power call: %d in all", n)
	}
}

func TestSuspendStopsAGuestThatDoesNotShutDown(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, s *sleeper)
		// wantOverrule: the stop must abort the shutdown still running.
		wantOverrule bool
		wantStops    int
	}{
		{
			name: "a guest ignoring ACPI fails the shutdown at Proxmox's timeout, and is stopped",
			setup: func(t *testing.T, s *sleeper) {
				s.update(t, func(vm *proxmoxtest.VM) { vm.IgnoresShutdown = true })
			},
			wantStops: 1,
		},
		{
			name: "a shutdown still running past the deadline is overruled by the stop",
			setup: func(t *testing.T, s *sleeper) {
				s.api.FailTask(proxmoxtest.TaskFault{Type: "qmshutdown", Polls: 1 << 30})
			},
			wantOverrule: true,
			wantStops:    1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tuning := fastTasks
			tuning.ShutdownGrace = time.Millisecond
			s := newSleeper(t, tuning, func(np *v1alpha1.NodeProvider) {
				np.Spec.Proxmox.ShutdownTimeout = &metav1.Duration{Duration: 20 * time.Millisecond}
			})
			tt.setup(t, s)
			ctx, logs := loggingContext(t)

			if err := s.p.Suspend(ctx, s.inst.ProviderID); err != nil {
				t.Fatalf("Suspend: %v", err)
			}
			if vm := s.vm(t); vm.Status != "stopped" {
				t.Fatalf("VM status after Suspend = %s, want stopped", vm.Status)
			}
			if sd := s.api.RequestsTo(http.MethodPost, `/status/shutdown$`); len(sd) != 1 || sd[0].Params["timeout"] != "1" {
				t.Errorf("shutdown calls = %+v, want one with the timeout rounded up to 1 s", sd)
			}
			stops := s.api.RequestsTo(http.MethodPost, `/qemu/1000/status/stop$`)
			var overruling int
			for _, r := range stops {
				if r.Params["overrule-shutdown"] == "1" {
					overruling++
				}
			}
			if tt.wantOverrule && (len(stops) != 1 || overruling != 1) || !tt.wantOverrule && len(stops)-overruling != tt.wantStops {
				t.Errorf("stop calls = %+v, want %d (overruling the shutdown: %v)", stops, tt.wantStops, tt.wantOverrule)
			}
			if !strings.Contains(logs.String(), "did not shut down cleanly") {
				t.Errorf("the hard stop was not logged:\n%s", logs)
			}
		})
	}
}

// TestSuspendOnProxmoxBefore82: a Proxmox VE without overrule-shutdown
// refuses the parameter; the stop is asked again without it, and fails on
// the VM's flock while the shutdown runs on, retryably.
func TestSuspendOnProxmoxBefore82(t *testing.T) {
	tuning := fastTasks
	tuning.ShutdownGrace = time.Millisecond
	s := newSleeper(t, tuning, func(np *v1alpha1.NodeProvider) {
		np.Spec.Proxmox.ShutdownTimeout = &metav1.Duration{Duration: 20 * time.Millisecond}
	})
	s.api.WithoutOverruleShutdown()
	s.api.FailTask(proxmoxtest.TaskFault{Type: "qmshutdown", Polls: 1 << 30})
	ctx, _ := loggingContext(t)

	err := s.p.Suspend(ctx, s.inst.ProviderID)
	if !provider.IsRetryable(err) || !strings.Contains(err.Error(), "can't lock file") {
		t.Fatalf("Suspend = %v, want a retryable error saying the VM's lock is held", err)
	}
	stops := s.api.RequestsTo(http.MethodPost, `/qemu/1000/status/stop$`)
	if len(stops) != 2 || stops[0].Params["overrule-shutdown"] != "1" || stops[1].Params["overrule-shutdown"] != "" {
		t.Fatalf("stop calls = %+v, want one overruling, refused, then one without", stops)
	}
}

func TestResume(t *testing.T) {
	tests := []struct {
		name string
		// asleep puts the VM to sleep first.
		asleep    bool
		setup     func(t *testing.T, s *sleeper)
		wantStart bool
		// wantCapacity: InsufficientCapacity, and the VM is kept for the
		// caller to delete.
		wantCapacity bool
	}{
		{name: "a sleeping VM is started where it is", asleep: true, wantStart: true},
		{name: "a running VM is left as it is", asleep: false},
		{
			name: "a start that ends with WARNINGS succeeds", asleep: true, wantStart: true,
			setup: func(t *testing.T, s *sleeper) {
				s.api.FailTask(proxmoxtest.TaskFault{Type: "qmstart", ExitStatus: "WARNINGS: 1"})
			},
		},
		{
			name: "a host without the memory to start it is insufficient capacity", asleep: true, wantCapacity: true,
			setup: func(t *testing.T, s *sleeper) {
				s.api.SetNode(proxmoxtest.Node{Name: "pve1", CPUs: 16, MemoryMiB: 64 << 10, UsedMemoryMiB: 8 << 10, StartableMemoryMiB: 10 << 10})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSleeper(t, fastTasks, nil)
			ctx, _ := loggingContext(t)
			if tt.asleep {
				if err := s.p.Suspend(ctx, s.inst.ProviderID); err != nil {
					t.Fatalf("Suspend: %v", err)
				}
			}
			if tt.setup != nil {
				tt.setup(t, s)
			}
			startsBefore := len(s.api.RequestsTo(http.MethodPost, `/qemu/1000/status/start$`))

			err := s.p.Resume(ctx, s.inst.ProviderID)
			if tt.wantCapacity {
				if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "pve1") {
					t.Fatalf("Resume = %v, want insufficient capacity naming node pve1", err)
				}
				if vm := s.vm(t); vm.Status != "stopped" {
					t.Errorf("VM status = %s, want stopped", vm.Status)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resume: %v", err)
			}
			if vm := s.vm(t); vm.Status != "running" {
				t.Fatalf("VM status after Resume = %s, want running", vm.Status)
			}
			if started := len(s.api.RequestsTo(http.MethodPost, `/qemu/1000/status/start$`)) > startsBefore; started != tt.wantStart {
				t.Errorf("start called: %v, want %v", started, tt.wantStart)
			}
			if got, err := s.prov.Get(ctx, s.inst.ProviderID); err != nil || got.State != provider.InstanceRunning {
				t.Errorf("Get after Resume = %+v, %v; want Running", got, err)
			}
		})
	}
}

// TestSleepingVMKeepsItsCloudInitISO: the ISO sweep leaves the ISO of a
// sleeping VM, which it boots with again (a start fails when a drive's
// volume is missing).
func TestSleepingVMKeepsItsCloudInitISO(t *testing.T) {
	s := newSleeper(t, fastTasks, nil)
	ctx, _ := loggingContext(t)
	iso := "local:iso/claimscale-test-cluster-1000-workers-a1.iso"
	if err := s.p.Suspend(ctx, s.inst.ProviderID); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if _, err := s.prov.List(ctx); err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(s.api.RequestsTo(http.MethodGet, `/storage/local/content$`)) == 0 {
		t.Fatal("List ran no ISO sweep")
	}
	if _, ok := s.api.Volumes()[iso]; !ok {
		t.Fatalf("the sleeping VM's ISO %s is gone: %v", iso, s.api.Volumes())
	}
	if err := s.p.Resume(ctx, s.inst.ProviderID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
}

func TestPowerCallsRefuseWhatIsNotOurs(t *testing.T) {
	tests := []struct {
		name       string
		providerID string
		want       func(error) bool
	}{
		{name: "a VM of another cluster is refused", providerID: "proxmox://test-cluster/1002", want: provider.IsTerminal},
		{name: "a VM without markers is refused", providerID: "proxmox://test-cluster/1003", want: provider.IsTerminal},
		{name: "a providerID of another cluster is refused", providerID: "proxmox://other-cluster/1000", want: provider.IsTerminal},
		{name: "a template is refused", providerID: "proxmox://test-cluster/9000", want: provider.IsTerminal},
		{name: "a VM that does not exist is not found", providerID: "proxmox://test-cluster/1009", want: provider.IsNotFound},
	}
	api := fakeAPI(t)
	for _, vm := range guests() {
		api.AddVM(vm)
	}
	p := newProvider(t, api, cloneProvider(api.Endpoint())).(provider.PowerManager)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, _ := loggingContext(t)
			for verb, call := range map[string]func(context.Context, string) error{"Suspend": p.Suspend, "Resume": p.Resume} {
				if err := call(ctx, tt.providerID); !tt.want(err) {
					t.Errorf("%s = %v", verb, err)
				}
			}
			if n := len(api.RequestsTo(http.MethodPost, `/status/`)); n != 0 {
				t.Errorf("%d power calls made", n)
			}
		})
	}
	for _, id := range []int{1002, 1003} {
		if vm, _ := api.VM(id); vm.Status != "running" {
			t.Errorf("VM %d is %s, want running", id, vm.Status)
		}
	}
}
