package proxmox_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/proxmox"
	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

const gpu = corev1.ResourceName("nvidia.com/gpu")

// gpuProvider is cloneProvider passing nvidia.com/gpu through by the
// cluster PCI mapping "gpu", on the PCI Express bus (so the VMs get the
// q35 machine type).
func gpuProvider(endpoint string) *v1alpha1.NodeProvider {
	np := cloneProvider(endpoint)
	np.Spec.Proxmox.PCIDevices = []v1alpha1.ProxmoxPCIDevice{{Resource: string(gpu), Mapping: "gpu", PCIe: ptr.To(true)}}
	np.Spec.Proxmox.ExtraOptions = append(np.Spec.Proxmox.ExtraOptions, v1alpha1.NameValue{Name: "machine", Value: "q35"})
	return np
}

// gpuClaim is a claim of a shape with n GPUs.
func gpuClaim(name string, n int64) *v1alpha1.NodeClaim {
	c := claim(name, "4", "8Gi")
	c.Spec.Shape.Name = fmt.Sprintf("gpu-%d", n)
	c.Spec.Shape.ExtendedResources = corev1.ResourceList{gpu: *resource.NewQuantity(n, resource.DecimalSI)}
	return c
}

// gpuMapping is the cluster mapping "gpu" with one entry per path, each
// "node/0000:01:00.0".
func gpuMapping(devices ...string) proxmoxtest.PCIMapping {
	m := proxmoxtest.PCIMapping{ID: "gpu", Description: "RTX 4090"}
	for i, d := range devices {
		node, path, _ := strings.Cut(d, "/")
		m.Map = append(m.Map, proxmoxtest.PCIMapEntry{Node: node, Path: path, ID: "10de:2684", SubsystemID: "1458:408c", IOMMUGroup: 10 + i})
	}
	return m
}

// runningGPUVM is someone else's VM that passes devices of the mapping
// through, running or stopped.
func runningGPUVM(vmid int, node, status string, hostpci ...string) proxmoxtest.VM {
	cfg := map[string]string{"memory": "1024", "machine": "q35"}
	for i, v := range hostpci {
		cfg[fmt.Sprintf("hostpci%d", i)] = v
	}
	return proxmoxtest.VM{VMID: vmid, Node: node, Name: fmt.Sprintf("other-%d", vmid), Status: status, Config: cfg}
}

// TestGPUsArePlacedWhereTheirMappingHasFreeDevices: a VM with GPUs goes
// only to a node where the mapping has as many free devices; pve1 (the
// node with the most free memory, where a VM without devices goes) loses
// when it lacks them.
func TestGPUsArePlacedWhereTheirMappingHasFreeDevices(t *testing.T) {
	tests := []struct {
		name    string
		mapping proxmoxtest.PCIMapping
		others  []proxmoxtest.VM
		gpus    int64
		// wantNode is where the VM goes; wantHeld the devices it holds.
		wantNode string
		wantHeld []string
	}{
		{
			name:     "several GPUs per VM go where the mapping has that many",
			mapping:  gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0", "pve2/0000:82:00.0"),
			gpus:     2,
			wantNode: "pve2",
			wantHeld: []string{"0000:81:00.0", "0000:82:00.0"},
		},
		{
			name:     "a host the mapping has no entry for is no candidate",
			mapping:  gpuMapping("pve2/0000:81:00.0"),
			gpus:     1,
			wantNode: "pve2",
			wantHeld: []string{"0000:81:00.0"},
		},
		{
			name:     "a device a running VM holds is not free",
			mapping:  gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0"),
			others:   []proxmoxtest.VM{runningGPUVM(200, "pve1", "running", "mapping=gpu")},
			gpus:     1,
			wantNode: "pve2",
			wantHeld: []string{"0000:81:00.0"},
		},
		{
			name:     "a device a running VM passes through by its address is not free",
			mapping:  gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0"),
			others:   []proxmoxtest.VM{runningGPUVM(200, "pve1", "running", "01:00.0,pcie=1")},
			gpus:     1,
			wantNode: "pve2",
			wantHeld: []string{"0000:81:00.0"},
		},
		{
			name:     "a stopped VM's device is free",
			mapping:  gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0"),
			others:   []proxmoxtest.VM{runningGPUVM(200, "pve1", "stopped", "mapping=gpu")},
			gpus:     1,
			wantNode: "pve1",
			wantHeld: []string{"0000:01:00.0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, _ := loggingContext(t)
			api := fakeAPI(t)
			api.AddPCIMapping(tt.mapping)
			for _, vm := range tt.others {
				api.AddVM(vm)
			}
			p := newProvider(t, api, gpuProvider(api.Endpoint()))

			inst, err := p.Create(ctx, gpuClaim("workers-gpu", tt.gpus), provider.CreateOptions{})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			vm, ok := api.VM(1000)
			if !ok || vm.Node != tt.wantNode || vm.Status != "running" {
				t.Fatalf("VM 1000 = %+v, want it running on %s", vm, tt.wantNode)
			}
			for i := range tt.gpus {
				if got := vm.Config[fmt.Sprintf("hostpci%d", i)]; got != "mapping=gpu,pcie=1" {
					t.Errorf("hostpci%d = %q, want mapping=gpu,pcie=1", i, got)
				}
			}
			if got, ok := vm.Config[fmt.Sprintf("hostpci%d", tt.gpus)]; ok {
				t.Errorf("hostpci%d = %q, want only %d devices", tt.gpus, got, tt.gpus)
			}
			if fmt.Sprint(vm.PCI) != fmt.Sprint(tt.wantHeld) {
				t.Errorf("the VM holds %v, want %v", vm.PCI, tt.wantHeld)
			}
			if got := inst.Capacity[gpu]; got.Value() != tt.gpus {
				t.Errorf("instance capacity %s = %s, want %d", gpu, got.String(), tt.gpus)
			}
			listed, err := p.Get(ctx, inst.ProviderID)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if got := listed.Capacity[gpu]; got.Value() != tt.gpus {
				t.Errorf("Get's capacity %s = %s, want %d (read from the VM's hostpci options)", gpu, got.String(), tt.gpus)
			}
		})
	}
}

// TestNoFreeDeviceIsInsufficientCapacity: when no allowed node has the
// devices free, nothing is made and the error says, per node, why.
func TestNoFreeDeviceIsInsufficientCapacity(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0"))
	api.AddVM(runningGPUVM(200, "pve1", "running", "mapping=gpu"))
	p := newProvider(t, api, gpuProvider(api.Endpoint()))

	_, err := p.Create(ctx, gpuClaim("workers-gpu", 2), provider.CreateOptions{})
	if !provider.IsInsufficientCapacity(err) {
		t.Fatalf("Create = %v, want insufficient capacity", err)
	}
	for _, want := range []string{"2 devices of PCI mapping gpu (nvidia.com/gpu)", "pve1: 0 of its 1 device of PCI mapping gpu free", "pve2: 1 of its 1 device of PCI mapping gpu free", "pve3: offline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Create = %v, want it to say %q", err, want)
		}
	}
	if got := vmsInRange(api); len(got) != 0 {
		t.Errorf("VMs = %+v, want none made", got)
	}
}

// TestAVMBeingMadeHoldsItsDevices: a second claim, while the first one's
// VM is being started, does not count that VM's device as free.
func TestAVMBeingMadeHoldsItsDevices(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0"))
	p := newProvider(t, api, gpuProvider(api.Endpoint()))

	// The second Create runs in the fake's handler of the first VM's
	// start, before the start is answered.
	secondDone := make(chan error, 1)
	api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `^/nodes/pve1/qemu/1000/status/start$`, Before: func() {
		_, err := p.Create(ctx, gpuClaim("workers-gpu-2", 1), provider.CreateOptions{})
		secondDone <- err
	}})
	if _, err := p.Create(ctx, gpuClaim("workers-gpu-1", 1), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create of the first claim: %v", err)
	}
	var second error
	select {
	case second = <-secondDone:
	default:
		t.Fatal("the second Create did not run during the first VM's start")
	}
	if !provider.IsInsufficientCapacity(second) || !strings.Contains(second.Error(), "pve1: 0 of its 1 device of PCI mapping gpu free") {
		t.Fatalf("Create of the second claim while the first VM was being started = %v, want insufficient capacity", second)
	}
	if got := vmsInRange(api); len(got) != 1 {
		t.Errorf("VMs = %+v, want only the first claim's", got)
	}
}

// TestABusyDeviceAtStartMovesOn: a device taken between the placement and
// the start (another VM started with it) fails the start with
// qemu-server's message; the VM is removed and another node tried, and
// with none left the error is insufficient capacity with that message.
func TestABusyDeviceAtStartMovesOn(t *testing.T) {
	// takeDevice starts someone else's VM with pve1's device just before
	// our VM's start.
	takeDevice := func(api *proxmoxtest.Server) {
		api.InjectFault(proxmoxtest.Fault{Method: http.MethodPost, Path: `^/nodes/pve1/qemu/1000/status/start$`, Before: func() {
			api.AddVM(runningGPUVM(300, "pve1", "running", "mapping=gpu"))
		}})
	}

	t.Run("to another node", func(t *testing.T) {
		ctx, logs := loggingContext(t)
		api := fakeAPI(t)
		api.AddStorage(proxmoxtest.Storage{Name: "local", Content: []string{"iso"}})
		api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0"))
		takeDevice(api)
		p := newProvider(t, api, gpuProvider(api.Endpoint()))

		inst, err := p.Create(ctx, gpuClaim("workers-gpu", 1), provider.CreateOptions{UserData: []byte("#cloud-config\n")})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		got := vmsInRange(api)
		if len(got) != 1 || got[0].Node != "pve2" || got[0].Status != "running" || inst.Labels["topology.kubernetes.io/zone"] != "pve2" {
			t.Fatalf("VMs = %+v, want one running VM on pve2", got)
		}
		if got := api.RequestsTo(http.MethodDelete, `^/nodes/pve1/qemu/1000$`); len(got) != 1 {
			t.Errorf("the VM that could not start was destroyed %d times, want once", len(got))
		}
		if got := api.RequestsTo(http.MethodDelete, `^/nodes/pve1/storage/local/content/`); len(got) != 1 {
			t.Errorf("its cloud-init ISO was deleted %d times, want once", len(got))
		}
		if !strings.Contains(logs.String(), "PCI device '0000:01:00.0' already in use by VMID '300'") {
			t.Errorf("the log does not say why the VM could not start on pve1:\n%s", logs)
		}
	})

	t.Run("with no other node", func(t *testing.T) {
		ctx, _ := loggingContext(t)
		api := fakeAPI(t)
		api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0", "pve2/0000:81:00.0"))
		takeDevice(api)
		np := gpuProvider(api.Endpoint())
		np.Spec.Proxmox.Nodes = []string{"pve1"}
		p := newProvider(t, api, np)

		_, err := p.Create(ctx, gpuClaim("workers-gpu", 1), provider.CreateOptions{})
		if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "pve1: could not start the VM: PCI device '0000:01:00.0' already in use by VMID '300'") {
			t.Fatalf("Create = %v, want insufficient capacity with Proxmox's message", err)
		}
		if got := vmsInRange(api); len(got) != 0 {
			t.Errorf("VMs = %+v, want none left", got)
		}
	})
}

// TestADeletedVMFreesItsDevices: the only device is taken by the first
// claim's VM; once it is deleted the next claim gets it.
func TestADeletedVMFreesItsDevices(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	api.AddPCIMapping(gpuMapping("pve2/0000:81:00.0"))
	p := newProvider(t, api, gpuProvider(api.Endpoint()))

	first, err := p.Create(ctx, gpuClaim("workers-gpu-1", 1), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("Create of the first claim: %v", err)
	}
	again, err := p.Create(ctx, gpuClaim("workers-gpu-1", 1), provider.CreateOptions{})
	if err != nil || again.ProviderID != first.ProviderID {
		t.Fatalf("Create of the first claim again = %v, %v; want its VM %s (its own device does not count against it)", again, err, first.ProviderID)
	}
	if _, err := p.Create(ctx, gpuClaim("workers-gpu-2", 1), provider.CreateOptions{}); !provider.IsInsufficientCapacity(err) {
		t.Fatalf("Create of a second claim while the first holds the device = %v, want insufficient capacity", err)
	}
	if err := p.Delete(ctx, first.ProviderID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	second, err := p.Create(ctx, gpuClaim("workers-gpu-2", 1), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("Create after the first VM was deleted: %v", err)
	}
	if vm := mustVMOf(t, api, second); vm.Node != "pve2" || fmt.Sprint(vm.PCI) != "[0000:81:00.0]" {
		t.Errorf("second VM on %s holding %v, want pve2's device", vm.Node, vm.PCI)
	}
}

// TestAnUnmappedResourceIsRefused: a shape whose extended resource no
// entry of spec.proxmox.pciDevices maps is a terminal error, in Shapes and
// in Create, and nothing is made; a mapping the cluster does not have is
// a terminal error and a problem of the NodeProvider until it appears.
func TestAnUnmappedResourceIsRefused(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	p := newProvider(t, api, gpuProvider(api.Endpoint()))

	fpga := claim("workers-fpga", "4", "8Gi")
	fpga.Spec.Shape.ExtendedResources = corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}
	_, err := p.Create(ctx, fpga, provider.CreateOptions{})
	if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "spec.proxmox.pciDevices maps no Proxmox PCI mapping to that resource") || !strings.Contains(err.Error(), "example.com/fpga") {
		t.Fatalf("Create = %v, want a terminal error naming the resource and pciDevices", err)
	}
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
		{Name: "gpu-1", CPU: q("4"), Memory: q("8Gi"), ExtendedResources: corev1.ResourceList{gpu: resource.MustParse("1")}},
		{Name: "fpga-1", CPU: q("4"), Memory: q("8Gi"), ExtendedResources: corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}},
	}}}}
	if _, err := p.Shapes(ctx, pool); !provider.IsTerminal(err) || !strings.Contains(err.Error(), `shape "fpga-1" of NodePool workers`) {
		t.Fatalf("Shapes = %v, want a terminal error naming the shape", err)
	}

	// The mapping is configured but the cluster has none of that ID.
	_, err = p.Create(ctx, gpuClaim("workers-gpu", 1), provider.CreateOptions{})
	if !provider.IsTerminal(err) || !strings.Contains(err.Error(), "PCI mapping gpu, which the Proxmox cluster does not list") {
		t.Fatalf("Create without the mapping in the cluster = %v, want a terminal error", err)
	}
	problems := p.(provider.ProblemReporter).Problems()
	if len(problems) != 1 || problems[0].Reason != proxmox.ProblemPCIMappingMissing || !strings.Contains(problems[0].Message, "Mapping.Use on /mapping/pci/gpu") {
		t.Fatalf("Problems = %+v, want the missing mapping", problems)
	}
	api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0"))
	if _, err := p.Create(ctx, gpuClaim("workers-gpu", 1), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create once the mapping exists: %v", err)
	}
	if problems := p.(provider.ProblemReporter).Problems(); len(problems) != 0 {
		t.Errorf("Problems = %+v, want none once the mapping exists", problems)
	}
	if got := vmsInRange(api); len(got) != 1 {
		t.Errorf("VMs = %+v, want only the GPU claim's", got)
	}
}

// TestGPUShapesCarryTheirDevices: Shapes reports a fixed shape's devices
// in its capacity, beside cpu and memory.
func TestGPUShapesCarryTheirDevices(t *testing.T) {
	api := fakeAPI(t)
	p := newProvider(t, api, gpuProvider(api.Endpoint()))
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
		{Name: "cpu-only", CPU: q("4"), Memory: q("8Gi")},
		{Name: "gpu-2", CPU: q("8"), Memory: q("32Gi"), Price: "1.5", ExtendedResources: corev1.ResourceList{gpu: resource.MustParse("2")}},
	}}}}
	shapes, err := p.Shapes(context.Background(), pool)
	if err != nil {
		t.Fatalf("Shapes: %v", err)
	}
	got := map[string]string{}
	for _, s := range shapes {
		g := s.Capacity[gpu]
		got[s.Name] = fmt.Sprintf("%s/%s/%s@%g", s.Capacity.Cpu(), s.Capacity.Memory(), g.String(), s.Price)
	}
	want := map[string]string{"cpu-only": "4/8Gi/0@6", "gpu-2": "8/32Gi/2@1.5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("shapes = %v, want %v", got, want)
	}
}

// TestNetbootVMsGetTheirDevicesInTheCreateCall: a netboot VM's hostpciN
// options go into the call that makes it.
func TestNetbootVMsGetTheirDevicesInTheCreateCall(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0", "pve1/0000:02:00.0"))
	np := netbootProvider(api.Endpoint())
	np.Spec.Proxmox.PCIDevices = []v1alpha1.ProxmoxPCIDevice{{Resource: string(gpu), Mapping: "gpu", ROMBar: ptr.To(false), XVGA: ptr.To(true), VendorID: "0x10de"}}
	p := newProvider(t, api, np)

	if _, err := p.Create(ctx, gpuClaim("workers-gpu", 2), provider.CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	creates := api.RequestsTo(http.MethodPost, `^/nodes/pve1/qemu$`)
	if len(creates) != 1 {
		t.Fatalf("want one create call, got %d", len(creates))
	}
	for _, k := range []string{"hostpci0", "hostpci1"} {
		if got := creates[0].Params[k]; got != "mapping=gpu,rombar=0,x-vga=1,vendor-id=0x10de" {
			t.Errorf("create parameter %s = %q", k, got)
		}
	}
	if vm, _ := api.VM(1000); vm.Status != "running" || len(vm.PCI) != 2 {
		t.Errorf("VM 1000 %s holding %v, want running with both devices", vm.Status, vm.PCI)
	}
}

// TestASleepingVMWhoseDeviceWasTakenIsReplaced: a VM put to sleep gives
// its device up; when another VM started with it meanwhile, Resume is
// insufficient capacity with Proxmox's message, so the claim is replaced.
func TestASleepingVMWhoseDeviceWasTakenIsReplaced(t *testing.T) {
	ctx, _ := loggingContext(t)
	api := fakeAPI(t)
	api.AddPCIMapping(gpuMapping("pve1/0000:01:00.0"))
	p := newProvider(t, api, gpuProvider(api.Endpoint()))
	inst, err := p.Create(ctx, gpuClaim("workers-gpu", 1), provider.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	power := p.(provider.PowerManager)
	if err := power.Suspend(ctx, inst.ProviderID); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	api.AddVM(runningGPUVM(300, "pve1", "running", "mapping=gpu"))

	err = power.Resume(ctx, inst.ProviderID)
	if !provider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "its PCI devices") || !strings.Contains(err.Error(), "PCI device '0000:01:00.0' already in use by VMID '300'") {
		t.Fatalf("Resume = %v, want insufficient capacity with Proxmox's message", err)
	}
}

func mustVMOf(t *testing.T, api *proxmoxtest.Server, inst *provider.Instance) proxmoxtest.VM {
	t.Helper()
	for _, vm := range api.VMs() {
		if proxmox.ProviderID(clusterName, vm.VMID) == inst.ProviderID {
			return vm
		}
	}
	t.Fatalf("no VM of %s", inst.ProviderID)
	return proxmoxtest.VM{}
}
