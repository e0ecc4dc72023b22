package proxmoxtest_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/pkg/provider/proxmox/proxmoxtest"
)

// TestServerAnswersLikeProxmox checks the wire format the provider relies
// on, independently of any client library.
func TestServerAnswersLikeProxmox(t *testing.T) {
	api := proxmoxtest.NewServer(proxmoxtest.Node{Name: "pve", CPUs: 4, MemoryMiB: 8192})
	defer api.Close()
	api.SetAPIToken("root@pam!test", "secret")
	api.AddTemplate(9000, "pve", "tmpl")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: api.CertPool()}}}

	call := func(method, path, body string, token bool) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, api.Endpoint()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token {
			req.Header.Set("Authorization", "PVEAPIToken=root@pam!test=secret")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		var envelope map[string]any
		if err := json.Unmarshal(raw, &envelope); err != nil {
			t.Fatalf("%s %s answered %q, not JSON", method, path, raw)
		}
		return resp, envelope
	}

	if resp, _ := call(http.MethodGet, "/version", "", false); resp.StatusCode != http.StatusUnauthorized || resp.Status != "401 No ticket" {
		t.Errorf("without a token: %q, want 401 No ticket", resp.Status)
	}
	if _, env := call(http.MethodGet, "/version", "", true); env["data"].(map[string]any)["version"] == nil {
		t.Errorf("version answer %v lacks data.version", env)
	}

	resp, env := call(http.MethodPost, "/nodes/pve/qemu/9000/clone", `{"newid":100,"name":"vm1"}`, true)
	upid, _ := env["data"].(string)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(upid, "UPID:pve:") || !strings.Contains(upid, ":qmclone:9000:root@pam!test:") {
		t.Fatalf("clone answered %s with %v, want a UPID", resp.Status, env)
	}
	if vm, _ := api.VM(100); vm.Lock != "clone" {
		t.Errorf("the clone's lock is %q while its task runs, want clone", vm.Lock)
	}
	var statuses []string
	for range 2 {
		_, env := call(http.MethodGet, "/nodes/pve/tasks/"+upid+"/status", "", true)
		data := env["data"].(map[string]any)
		statuses = append(statuses, data["status"].(string))
		if data["status"] == "stopped" && data["exitstatus"] != "OK" {
			t.Errorf("exit status = %v, want OK", data["exitstatus"])
		}
	}
	if strings.Join(statuses, ",") != "running,stopped" {
		t.Errorf("task statuses = %v, want running then stopped", statuses)
	}
	if vm, _ := api.VM(100); vm.Lock != "" || vm.Name != "vm1" {
		t.Errorf("clone after its task: lock %q name %q", vm.Lock, vm.Name)
	}

	resp, env = call(http.MethodPost, "/nodes/pve/qemu/9000/clone", `{"newid":100}`, true)
	if resp.StatusCode != http.StatusInternalServerError || resp.Status != "500 unable to create VM 100: config file already exists" || env["data"] != nil {
		t.Errorf("cloning onto a taken ID answered %q with %v, want the reason in the status line and data null", resp.Status, env)
	}
}

// TestServerFollowsProxmoxSources checks the behaviours the package comment
// cites, on the wire.
func TestServerFollowsProxmoxSources(t *testing.T) {
	api := proxmoxtest.NewServer(proxmoxtest.Node{Name: "pve", CPUs: 4, MemoryMiB: 8192}, proxmoxtest.Node{Name: "pve2", CPUs: 4, MemoryMiB: 8192})
	defer api.Close()
	api.AddTemplate(9000, "pve", "tmpl")
	api.SetTaskPolls(0)
	clk := clocktesting.NewFakeClock(time.Now())
	api.SetStatsLag(clk, 10*time.Second)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: api.CertPool()}}}
	call := func(method, path, contentType string, body io.Reader) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, api.Endpoint()+path, body)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		var envelope map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &envelope)
		return resp, envelope
	}
	taskExit := func(upid string) string {
		t.Helper()
		node := strings.Split(upid, ":")[1]
		_, env := call(http.MethodGet, "/nodes/"+node+"/tasks/"+upid+"/status", "", nil)
		return env["data"].(map[string]any)["exitstatus"].(string)
	}
	resource := func(vmid float64) map[string]any {
		_, env := call(http.MethodGet, "/cluster/resources?type=vm", "", nil)
		for _, e := range env["data"].([]any) {
			if m := e.(map[string]any); m["vmid"] == vmid {
				return m
			}
		}
		return nil
	}

	api.FailTask(proxmoxtest.TaskFault{Type: "qmclone", ExitStatus: "WARNINGS: 1"})
	_, env := call(http.MethodPost, "/nodes/pve/qemu/9000/clone", "application/json", strings.NewReader(`{"newid":100,"name":"vm1","description":"d"}`))
	if exit := taskExit(env["data"].(string)); exit != "WARNINGS: 1" {
		t.Fatalf("exit status %q", exit)
	}
	if vm, _ := api.VM(100); vm.Name != "vm1" || vm.Lock != "" || vm.Config["meta"] == "" || vm.Config["meta"] != mustVM(t, api, 9000).Config["meta"] {
		t.Errorf("a clone ending with warnings is made, with its template's meta: %+v", vm)
	}
	call(http.MethodPut, "/nodes/pve/qemu/100/config", "application/json", strings.NewReader(`{"tags":"Mine"}`))
	if r := resource(100); r["name"] != nil || r["status"] != "unknown" || r["tags"] != "mine" {
		t.Errorf("before pvestatd publishes: %v, want no name, status unknown, fresh lower-cased tags", r)
	}
	clk.Step(10 * time.Second)
	if r := resource(100); r["name"] != "vm1" || r["status"] != "stopped" {
		t.Errorf("after pvestatd publishes: %v", r)
	}

	api.AddVM(proxmoxtest.VM{VMID: 101, Node: "pve2", Name: "elsewhere"})
	_, env = call(http.MethodPost, "/nodes/pve/qemu/9000/clone", "application/json", strings.NewReader(`{"newid":101}`))
	if exit := taskExit(env["data"].(string)); exit != "close (rename) atomic file '/etc/pve/nodes/pve/qemu-server/101.conf' failed: File exists" {
		t.Errorf("clone onto an ID of another node: %q", exit)
	}

	api.SetUserTagAccess(proxmoxtest.UserTagAccess{Allow: "list", List: []string{"ok"}})
	if resp, _ := call(http.MethodPut, "/nodes/pve/qemu/100/config", "application/json", strings.NewReader(`{"tags":"mine;ok;other"}`)); resp.Status != "403 Permission check failed (/, Sys.Modify for modifying tag 'other')" {
		t.Errorf("tag policy: %q", resp.Status)
	}

	api.AddStorage(proxmoxtest.Storage{Name: "local", Content: []string{"iso"}})
	api.AddStorage(proxmoxtest.Storage{Name: "local-lvm", Content: []string{"images"}})
	upload := func(storage string) (*http.Response, map[string]any) {
		var body bytes.Buffer
		w := multipart.NewWriter(&body)
		_ = w.WriteField("content", "iso")
		part, _ := w.CreateFormFile("filename", "seed.iso")
		_, _ = part.Write([]byte("ISO"))
		_ = w.Close()
		return call(http.MethodPost, "/nodes/pve/storage/"+storage+"/upload", w.FormDataContentType(), &body)
	}
	if resp, _ := upload("local-lvm"); resp.Status != "500 storage 'local-lvm' does not support 'iso' content" {
		t.Errorf("upload to a storage without iso: %q", resp.Status)
	}
	if resp, _ := call(http.MethodPost, "/nodes/pve/storage/local/upload", "application/json", strings.NewReader(`{"content":"iso","filename":"seed.iso"}`)); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("upload without a multipart body: %q", resp.Status)
	}
	_, env = upload("local")
	if exit := taskExit(env["data"].(string)); exit != "OK" || string(api.Volumes()["local:iso/seed.iso"]) != "ISO" {
		t.Errorf("upload: %q, volumes %v", exit, api.Volumes())
	}

	api.SetNode(proxmoxtest.Node{Name: "pve", CPUs: 4, MemoryMiB: 8192, StartableMemoryMiB: 1024})
	_, env = call(http.MethodPost, "/nodes/pve/qemu/100/status/start", "", nil)
	upid := env["data"].(string)
	if exit := taskExit(upid); exit != "start failed: QEMU exited with code 1" {
		t.Errorf("start beyond the startable memory: %q", exit)
	}
	if _, env := call(http.MethodGet, "/nodes/pve/tasks/"+upid+"/log", "", nil); !strings.Contains(fmt.Sprint(env["data"]), "Cannot allocate memory") {
		t.Errorf("task log %v", env["data"])
	}

	vm := mustVM(t, api, 100)
	vm.Config["protection"] = "1"
	api.AddVM(vm)
	if resp, _ := call(http.MethodDelete, "/nodes/pve/qemu/100", "", nil); resp.Status != "500 can't remove VM 100 - protection mode enabled" {
		t.Errorf("destroy of a protected VM: %q", resp.Status)
	}
}

func mustVM(t *testing.T, api *proxmoxtest.Server, vmid int) proxmoxtest.VM {
	t.Helper()
	vm, ok := api.VM(vmid)
	if !ok {
		t.Fatalf("no VM %d", vmid)
	}
	return vm
}

// TestServerPowerFollowsQemuServer checks the power calls as the package
// comment cites them from qemu-server: the worker decides, a stopped VM's
// shutdown or stop is a no-op, a running VM's start fails in the task, a
// guest ignoring ACPI times the shutdown out (or is killed with forceStop),
// a running shutdown holds the VM's flock until a stop overrules it.
func TestServerPowerFollowsQemuServer(t *testing.T) {
	api := proxmoxtest.NewServer(proxmoxtest.Node{Name: "pve", CPUs: 4, MemoryMiB: 8192})
	defer api.Close()
	api.SetTaskPolls(0)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: api.CertPool()}}}
	post := func(path, body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, api.Endpoint()+"/nodes/pve/qemu/100/status/"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var env map[string]any
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &env)
		if resp.StatusCode != http.StatusOK {
			return resp.Status
		}
		return env["data"].(string)
	}
	exit := func(upid string) string {
		t.Helper()
		resp, err := client.Get(api.Endpoint() + "/nodes/pve/tasks/" + upid + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var env struct {
			Data struct {
				Status     string `json:"status"`
				ExitStatus string `json:"exitstatus"`
			} `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&env)
		if env.Data.Status == "running" {
			return "running"
		}
		return env.Data.ExitStatus
	}
	status := func() string { vm, _ := api.VM(100); return vm.Status }
	api.AddVM(proxmoxtest.VM{VMID: 100, Node: "pve", Name: "vm", Status: "stopped", Config: map[string]string{"memory": "1024"}})

	for _, action := range []string{"shutdown", "stop"} {
		if got := exit(post(action, `{}`)); got != "OK" || status() != "stopped" {
			t.Errorf("%s of a stopped VM: %q, %s; want OK, a no-op", action, got, status())
		}
	}
	if got := exit(post("start", `{}`)); got != "OK" || status() != "running" {
		t.Fatalf("start: %q, %s", got, status())
	}
	if got := exit(post("start", `{}`)); got != "VM 100 already running" {
		t.Errorf("start of a running VM: %q, want the task to fail", got)
	}

	api.AddVM(proxmoxtest.VM{VMID: 100, Node: "pve", Name: "vm", Status: "running", IgnoresShutdown: true, Config: map[string]string{"memory": "1024"}})
	if got := exit(post("shutdown", `{"timeout":5}`)); got != "VM quit/powerdown failed - got timeout" || status() != "running" {
		t.Errorf("shutdown of a guest ignoring ACPI: %q, %s", got, status())
	}
	if got := exit(post("shutdown", `{"timeout":5,"forceStop":1}`)); got != "OK" || status() != "stopped" {
		t.Errorf("shutdown with forceStop: %q, %s; want OK (a plain warn does not count), stopped", got, status())
	}

	api.AddVM(proxmoxtest.VM{VMID: 100, Node: "pve", Name: "vm", Status: "running", Config: map[string]string{"memory": "1024"}})
	api.FailTask(proxmoxtest.TaskFault{Type: "qmshutdown", Polls: 1000})
	shutdown := post("shutdown", `{"timeout":120}`)
	if got := exit(post("stop", `{}`)); got != "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout" {
		t.Errorf("stop while a shutdown runs: %q, want the flock timeout", got)
	}
	if got := exit(post("stop", `{"overrule-shutdown":1}`)); got != "OK" || status() != "stopped" || exit(shutdown) != "received interrupt" {
		t.Errorf("stop overruling the shutdown: %q, %s, shutdown %q", got, status(), exit(shutdown))
	}

	api.WithoutOverruleShutdown()
	if got := post("stop", `{"overrule-shutdown":1}`); !strings.HasPrefix(got, "400 Parameter verification failed.") {
		t.Errorf("overrule-shutdown on Proxmox VE 8.1: %q", got)
	}
}

// TestServerPCIMappingsFollowQemuServer checks the PCI resource mappings
// as the package comment cites them: the listing's wire format, the
// hostpci format checked when it is set, and a start that takes a free
// device of the node's entries, or fails with qemu-server's message.
func TestServerPCIMappingsFollowQemuServer(t *testing.T) {
	api := proxmoxtest.NewServer(proxmoxtest.Node{Name: "pve", CPUs: 16, MemoryMiB: 65536}, proxmoxtest.Node{Name: "pve2", CPUs: 16, MemoryMiB: 65536})
	defer api.Close()
	api.SetTaskPolls(0)
	api.AddPCIMapping(proxmoxtest.PCIMapping{ID: "gpu", Description: "RTX 4090", Map: []proxmoxtest.PCIMapEntry{
		{Node: "pve", Path: "0000:01:00.0", ID: "10de:2684", IOMMUGroup: 12, SubsystemID: "1458:408c"},
		{Node: "pve", Path: "0000:02:00.0", ID: "10de:2684", IOMMUGroup: 13},
		{Node: "pve2", Path: "0000:81:00", ID: "10de:2684", IOMMUGroup: -1},
	}})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: api.CertPool()}}}
	call := func(method, path, body string) (string, any) {
		t.Helper()
		req, _ := http.NewRequest(method, api.Endpoint()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var env struct{ Data any }
		_ = json.NewDecoder(resp.Body).Decode(&env)
		return resp.Status, env.Data
	}
	start := func(vmid int) string {
		t.Helper()
		vm := mustVM(t, api, vmid)
		status, upid := call(http.MethodPost, fmt.Sprintf("/nodes/%s/qemu/%d/status/start", vm.Node, vmid), `{}`)
		if status != "200 OK" {
			t.Fatalf("start of VM %d: %s", vmid, status)
		}
		_, st := call(http.MethodGet, "/nodes/"+vm.Node+"/tasks/"+upid.(string)+"/status", "")
		return st.(map[string]any)["exitstatus"].(string)
	}

	_, list := call(http.MethodGet, "/cluster/mapping/pci?check-node=pve2", "")
	want := `[map[checks:[] description:RTX 4090 digest:0e2b7a1c5d9f id:gpu map:[node=pve,path=0000:01:00.0,id=10de:2684,iommugroup=12,subsystem-id=1458:408c node=pve,path=0000:02:00.0,id=10de:2684,iommugroup=13 node=pve2,path=0000:81:00,id=10de:2684] type:pci]]`
	if fmt.Sprint(list) != want {
		t.Errorf("mapping listing:\n%v\nwant\n%s", list, want)
	}
	if status, _ := call(http.MethodGet, "/cluster/mapping/pci/nic", ""); status != "500 mapping 'nic' not found" {
		t.Errorf("an unknown mapping: %s", status)
	}

	api.AddVM(proxmoxtest.VM{VMID: 100, Node: "pve", Config: map[string]string{"memory": "1024"}})
	if status, _ := call(http.MethodPut, "/nodes/pve/qemu/100/config", `{"hostpci0":"mapping=gpu,gpus=2"}`); !strings.HasPrefix(status, "400 Parameter verification failed.") {
		t.Errorf("a hostpci key qemu-server lacks: %s", status)
	}
	if status, _ := call(http.MethodPut, "/nodes/pve/qemu/100/config", `{"hostpci0":"mapping=gpu,pcie=1,rombar=0,x-vga=1","hostpci1":"mapping=gpu","machine":"q35"}`); status != "200 OK" {
		t.Fatalf("two devices of the mapping: %s", status)
	}
	if got := start(100); got != "OK" || !slices.Equal(mustVM(t, api, 100).PCI, []string{"0000:01:00.0", "0000:02:00.0"}) {
		t.Fatalf("start with two devices: %q, holding %v; want both of the node's devices", got, mustVM(t, api, 100).PCI)
	}

	api.AddVM(proxmoxtest.VM{VMID: 101, Node: "pve", Config: map[string]string{"hostpci0": "mapping=gpu"}})
	if got := start(101); got != "could not find a free device for 'hostpci0'" {
		t.Errorf("start while the running VM 100 holds both devices: %q", got)
	}
	api.AddVM(proxmoxtest.VM{VMID: 102, Node: "pve", Config: map[string]string{"hostpci0": "0000:01:00.0"}})
	if got := start(102); got != "PCI device '0000:01:00.0' already in use by VMID '100'" {
		t.Errorf("start of a raw host device VM 100 holds: %q", got)
	}
	api.AddVM(proxmoxtest.VM{VMID: 103, Node: "pve", Config: map[string]string{"hostpci0": "mapping=gpu,pcie=1"}})
	if got := start(103); !strings.HasPrefix(got, "q35 machine model is not enabled") {
		t.Errorf("pcie=1 without q35: %q", got)
	}
	api.AddVM(proxmoxtest.VM{VMID: 104, Node: "pve2", Config: map[string]string{"hostpci0": "mapping=gpu", "hostpci1": "mapping=gpu"}})
	if got := start(104); got != "device '0000:81:00' assigned more than once" {
		t.Errorf("two devices of a mapping with one entry on the node: %q", got)
	}
	api.AddVM(proxmoxtest.VM{VMID: 105, Node: "pve2", Config: map[string]string{"hostpci0": "mapping=nic"}})
	if got := start(105); got != "PCI device mapping not found for 'nic'" {
		t.Errorf("a mapping without an entry for the node: %q", got)
	}

	// A stopped VM holds nothing: VM 100's devices are free once it stops.
	if status, upid := call(http.MethodPost, "/nodes/pve/qemu/100/status/stop", `{}`); status == "200 OK" {
		call(http.MethodGet, "/nodes/pve/tasks/"+upid.(string)+"/status", "")
	}
	if got := start(101); got != "OK" || !slices.Equal(mustVM(t, api, 101).PCI, []string{"0000:01:00.0"}) {
		t.Errorf("start after VM 100 stopped: %q, holding %v", got, mustVM(t, api, 101).PCI)
	}
	if got := api.PCIReservations(); fmt.Sprint(got) != "map[pve/0000:01:00.0:101]" {
		t.Errorf("reservations = %v, want only VM 101's", got)
	}
}
