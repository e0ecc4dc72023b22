package proxmoxtest_test

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

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
