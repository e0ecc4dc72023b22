package cloudscale_test

import (
	"net/http"
	"testing"

	sdk "github.com/cloudscale-ch/cloudscale-go-sdk/v6"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

func TestPower(t *testing.T) {
	tests := []struct {
		name   string
		status string
		call   func(p *cloudscale.Provider) func(e *env, providerID string) error
		// wantAction is the action posted, "" for none.
		wantAction string
		// want is the status the server settles in.
		want       string
		wantState  provider.InstanceState
		wantResult func(error) bool
	}{
		{name: "Suspend stops a running server", status: sdk.ServerRunning, call: suspend, wantAction: "stop",
			want: sdk.ServerStopped, wantState: provider.InstanceSuspended, wantResult: isNil},
		{name: "Suspend of a stopped server is success without a call", status: sdk.ServerStopped, call: suspend,
			want: sdk.ServerStopped, wantState: provider.InstanceSuspended, wantResult: isNil},
		{name: "Resume starts a stopped server", status: sdk.ServerStopped, call: resume, wantAction: "start",
			want: sdk.ServerRunning, wantState: provider.InstanceRunning, wantResult: isNil},
		{name: "Resume of a running server is success without a call", status: sdk.ServerRunning, call: resume,
			want: sdk.ServerRunning, wantState: provider.InstanceRunning, wantResult: isNil},
		{name: "Suspend of a server still changing waits for it to settle", status: "changing", call: suspend,
			want: "changing", wantState: provider.InstanceCreating, wantResult: provider.IsInProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			id := e.api.AddServer(cloudscaletest.ServerSpec{Name: "c1", Flavor: "flex-4-2", Status: tt.status, Tags: ourTags("workers", "c1")})
			if err := tt.call(e.p)(e, cloudscale.ProviderID(id)); !tt.wantResult(err) {
				t.Fatalf("call = %v", err)
			}
			posted := ""
			for _, action := range []string{"start", "stop"} {
				if e.api.CountRequests(http.MethodPost, "/v1/servers/"+id+"/"+action) > 0 {
					posted += action
				}
			}
			if posted != tt.wantAction {
				t.Fatalf("actions posted = %q, want %q", posted, tt.wantAction)
			}
			// The API acts after answering: the server changes first.
			var got *provider.Instance
			for range 3 {
				var err error
				if got, err = e.p.Get(e.ctx, cloudscale.ProviderID(id)); err != nil {
					t.Fatalf("Get: %v", err)
				}
			}
			if server, _ := e.api.Server(id); server.Status != tt.want || got.State != tt.wantState {
				t.Errorf("server %s, instance %s; want %s, %s", server.Status, got.State, tt.want, tt.wantState)
			}
		})
	}
}

func TestPowerRefusesForeignServers(t *testing.T) {
	e := newEnv(t)
	foreign := e.api.AddServer(cloudscaletest.ServerSpec{Name: "db", Flavor: "flex-4-2", Tags: map[string]string{"claimscale.io/cluster": "another-cluster"}})
	untagged := e.api.AddServer(cloudscaletest.ServerSpec{Name: "web", Flavor: "flex-4-2", Status: sdk.ServerStopped})
	for _, id := range []string{foreign, untagged} {
		if err := e.p.Suspend(e.ctx, cloudscale.ProviderID(id)); !provider.IsTerminal(err) {
			t.Errorf("Suspend of %s = %v, want a refusal", id, err)
		}
		if err := e.p.Resume(e.ctx, cloudscale.ProviderID(id)); !provider.IsTerminal(err) {
			t.Errorf("Resume of %s = %v, want a refusal", id, err)
		}
	}
	if n := e.api.CountRequests(http.MethodPost, "/v1/servers/"+foreign+"/stop") + e.api.CountRequests(http.MethodPost, "/v1/servers/"+untagged+"/start"); n != 0 {
		t.Errorf("%d power actions posted on servers that are not ours", n)
	}
	if err := e.p.Suspend(e.ctx, cloudscale.ProviderID("6a2ad8d8-5d5c-4c5b-9a4e-000000000000")); !provider.IsNotFound(err) {
		t.Errorf("Suspend of an unknown server = %v, want not found", err)
	}
}

func suspend(p *cloudscale.Provider) func(*env, string) error {
	return func(e *env, id string) error { return p.Suspend(e.ctx, id) }
}

func resume(p *cloudscale.Provider) func(*env, string) error {
	return func(e *env, id string) error { return p.Resume(e.ctx, id) }
}

func isNil(err error) bool { return err == nil }

// TestPowerWhileTheServerChanges: the API carries a stop out after it
// answers; a second Suspend meanwhile is success without another stop, a
// Resume meanwhile waits for the server to settle.
func TestPowerWhileTheServerChanges(t *testing.T) {
	e := newEnv(t, withAPIOptions(cloudscaletest.WithSettleReads(5)))
	id := e.api.AddServer(cloudscaletest.ServerSpec{Name: "c1", Flavor: "flex-4-2", Tags: ourTags("workers", "c1")})
	providerID := cloudscale.ProviderID(id)
	if err := e.p.Suspend(e.ctx, providerID); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if err := e.p.Suspend(e.ctx, providerID); err != nil {
		t.Fatalf("a second Suspend while the server stops = %v, want success", err)
	}
	if n := e.api.CountRequests(http.MethodPost, "/v1/servers/"+id+"/stop"); n != 1 {
		t.Errorf("%d stops posted, want 1", n)
	}
	if err := e.p.Resume(e.ctx, providerID); !provider.IsInProgress(err) {
		t.Fatalf("Resume while the server stops = %v, want in progress", err)
	}
	if n := e.api.CountRequests(http.MethodPost, "/v1/servers/"+id+"/start"); n != 0 {
		t.Errorf("a start was posted while the server was stopping")
	}
}
