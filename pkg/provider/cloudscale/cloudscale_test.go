package cloudscale_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	cs "github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

// postBodies are the bodies of the server creates the API received.
func postBodies(t *testing.T, api *cloudscaletest.Server) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range api.Requests() {
		if r.Method != http.MethodPost || r.Path != "/v1/servers" {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("POST body is not JSON: %v", err)
		}
		out = append(out, body)
	}
	return out
}

// The core's rendered user data is sent instead of the provider's Secret.
func TestCreatePrefersTheClaimsUserData(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	rendered := "#cloud-config\nruncmd: [[kubeadm, join]]\n"
	_, err := e.p.Create(e.ctx, claim("workers-abc12", "workers", "flex-8-4"), provider.CreateOptions{UserData: []byte(rendered)})
	g.Expect(err).NotTo(HaveOccurred())
	bodies := postBodies(t, e.api)
	g.Expect(bodies).To(HaveLen(1))
	g.Expect(bodies[0]).To(HaveKeyWithValue("user_data", rendered))
}

func TestCreateSendsEverySettingAndTagInTheOneCreateRequest(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withSettings(func(s *v1alpha1.CloudscaleSettings) {
		s.Image = "custom:talos-v1-9"
		s.VolumeSizeGB = 80
		s.ServerGroups = []string{"6a7e7b3e-61e5-4a6e-9b5d-8d6d0e0f2a11"}
		s.SSHKeys = []string{"ssh-ed25519 AAAAC3Nza ops@example"}
	}), withServerGroups(cloudscaletest.ServerGroupSpec{UUID: "6a7e7b3e-61e5-4a6e-9b5d-8d6d0e0f2a11", Name: "workers", Zone: "lpg1"}))

	inst, err := e.p.Create(e.ctx, claim("workers-abc12", "workers", "flex-8-4"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	bodies := postBodies(t, e.api)
	g.Expect(bodies).To(HaveLen(1), "exactly one create request")
	body := bodies[0]
	g.Expect(body).To(HaveKeyWithValue("name", "workers-abc12"))
	g.Expect(body).To(HaveKeyWithValue("flavor", "flex-8-4"))
	g.Expect(body).To(HaveKeyWithValue("image", "custom:talos-v1-9"))
	g.Expect(body).To(HaveKeyWithValue("zone", "lpg1"))
	g.Expect(body).To(HaveKeyWithValue("volume_size_gb", BeNumerically("==", 80)))
	g.Expect(body).To(HaveKeyWithValue("user_data", userData), "user data passed unchanged")
	g.Expect(body).To(HaveKeyWithValue("ssh_keys", ConsistOf("ssh-ed25519 AAAAC3Nza ops@example")))
	g.Expect(body).To(HaveKeyWithValue("server_groups", ConsistOf("6a7e7b3e-61e5-4a6e-9b5d-8d6d0e0f2a11")))
	g.Expect(body).To(HaveKeyWithValue("tags", map[string]any{
		v1alpha1.TagCluster:   testCluster,
		v1alpha1.TagNodePool:  "workers",
		v1alpha1.TagNodeClaim: "workers-abc12",
		"team":                "platform",
	}))

	for _, r := range e.api.Requests() {
		g.Expect(r.Method).To(BeElementOf(http.MethodGet, http.MethodPost), "never tagged after creation")
	}
	g.Expect(e.api.Requests()[0].Query.Get("tag:"+v1alpha1.TagNodeClaim)).To(Equal("workers-abc12"),
		"the lookup before creating filters by the claim's tag on the server side")

	g.Expect(inst.ProviderID).To(Equal(cs.ProviderIDPrefix + e.api.Servers()[0].UUID))
	g.Expect(inst.Name).To(Equal("workers-abc12"))
	g.Expect(inst.ClaimName()).To(Equal("workers-abc12"))
	g.Expect(inst.Tags).To(Equal(ourTags("workers", "workers-abc12")))
	g.Expect(inst.Capacity.Cpu().Equal(resource.MustParse("4"))).To(BeTrue(), "cpu %s", inst.Capacity.Cpu())
	g.Expect(inst.Capacity.Memory().Equal(resource.MustParse("8Gi"))).To(BeTrue(), "memory %s", inst.Capacity.Memory())
	g.Expect(inst.Labels).To(Equal(map[string]string{
		corev1.LabelTopologyZone:       "lpg1",
		corev1.LabelTopologyRegion:     "lpg",
		corev1.LabelInstanceTypeStable: "flex-8-4",
	}))
	g.Expect(inst.State).To(Equal(provider.InstanceCreating))
}

func TestCreateNetworkSettings(t *testing.T) {
	const network, subnet = "2db69ba3-1864-4608-853a-0771b6885a3a", "33333333-1864-4608-853a-0771b6885a3a"
	tests := []struct {
		name     string
		settings func(*v1alpha1.CloudscaleSettings)
		want     map[string]any
		absent   []string
	}{
		{
			name:     "default attaches the public network only",
			settings: func(*v1alpha1.CloudscaleSettings) {},
			want:     map[string]any{"use_public_network": true},
			absent:   []string{"interfaces"},
		},
		{
			name:     "public network off and no interfaces asks for no public network",
			settings: func(s *v1alpha1.CloudscaleSettings) { s.PublicNetwork = ptr.To(false) },
			want:     map[string]any{"use_public_network": false},
			absent:   []string{"interfaces"},
		},
		{
			name: "private interfaces list the public one first",
			settings: func(s *v1alpha1.CloudscaleSettings) {
				s.Interfaces = []v1alpha1.CloudscaleInterface{{Network: network}, {Subnet: subnet}}
			},
			want: map[string]any{"interfaces": []any{
				map[string]any{"network": "public"},
				map[string]any{"network": network},
				map[string]any{"addresses": []any{map[string]any{"subnet": subnet}}},
			}},
			absent: []string{"use_public_network"},
		},
		{
			name: "private interfaces without the public network",
			settings: func(s *v1alpha1.CloudscaleSettings) {
				s.PublicNetwork = ptr.To(false)
				s.Interfaces = []v1alpha1.CloudscaleInterface{{Network: network, Subnet: subnet}}
			},
			want: map[string]any{"interfaces": []any{
				map[string]any{"network": network, "addresses": []any{map[string]any{"subnet": subnet}}},
			}},
			absent: []string{"use_public_network"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t, withSettings(tt.settings))
			_, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			body := postBodies(t, e.api)[0]
			for k, v := range tt.want {
				g.Expect(body).To(HaveKeyWithValue(k, v))
			}
			for _, k := range tt.absent {
				g.Expect(body).NotTo(HaveKey(k))
			}
		})
	}
}

func TestCreateAdoptsTheServerAnEarlierAttemptMade(t *testing.T) {
	tests := []struct {
		name       string
		existing   map[string]string
		wantAdopt  bool
		wantPOSTed int
	}{
		{
			name:       "a server tagged for this cluster and claim is adopted, not made again",
			existing:   ourTags("workers", "workers-abc12"),
			wantAdopt:  true,
			wantPOSTed: 0,
		},
		{
			name: "a server with the same claim tag from another cluster is not adopted",
			existing: map[string]string{
				v1alpha1.TagCluster:   "staging",
				v1alpha1.TagNodePool:  "workers",
				v1alpha1.TagNodeClaim: "workers-abc12",
			},
			wantAdopt:  false,
			wantPOSTed: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			existing := e.api.AddServer(cloudscaletest.ServerSpec{Name: "workers-abc12", Flavor: "flex-8-4", Tags: tt.existing})

			inst, err := e.p.Create(e.ctx, claim("workers-abc12", "workers", "flex-8-4"), provider.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(e.api.CountRequests(http.MethodPost, "/v1/servers")).To(Equal(tt.wantPOSTed))
			if tt.wantAdopt {
				g.Expect(inst.ProviderID).To(Equal(cs.ProviderID(existing)))
				g.Expect(inst.State).To(Equal(provider.InstanceRunning))
			} else {
				g.Expect(inst.ProviderID).NotTo(Equal(cs.ProviderID(existing)))
			}
		})
	}
}

func TestCreateRetriesTransientErrorsWithoutMakingTwoServers(t *testing.T) {
	tests := []struct {
		name  string
		fault cloudscaletest.Fault
	}{
		{"500 once on create", cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 500, Detail: cloudscaletest.DetailServerError}},
		{"502 from a proxy with an HTML body", cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 502}},
		{"429 on the lookup", cloudscaletest.Fault{Method: http.MethodGet, Path: "/v1/servers", Status: 429, RetryAfter: "2", Detail: "Request was throttled."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			e.api.InjectFault(tt.fault)
			var inst *provider.Instance
			var err error
			e.stepping(t, time.Second, func() { inst, err = e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{}) })
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(e.api.Servers()).To(HaveLen(1))
			g.Expect(inst.ProviderID).To(Equal(cs.ProviderID(e.api.Servers()[0].UUID)))
		})
	}
}

func TestCreateErrorsSayWhatToDo(t *testing.T) {
	tests := []struct {
		name      string
		fault     cloudscaletest.Fault
		shape     string
		want      func(error) bool
		wantText  string
		wantPOSTs int
	}{
		{
			name:      "quota exceeded is insufficient capacity, not retried",
			fault:     cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 400, Detail: cloudscaletest.DetailQuotaExceeded},
			shape:     "flex-4-2",
			want:      provider.IsInsufficientCapacity,
			wantText:  "Quota exceeded",
			wantPOSTs: 1,
		},
		{
			name:      "no capacity in the zone is insufficient capacity",
			fault:     cloudscaletest.OutOfCapacity("lpg1", ""),
			shape:     "flex-4-2",
			want:      provider.IsInsufficientCapacity,
			wantText:  "Insufficient capacity for servers in zone lpg1",
			wantPOSTs: 1,
		},
		{
			name:      "an unknown flavor is refused for good with the API's words",
			shape:     "flex-999-1",
			want:      provider.IsTerminal,
			wantText:  `flavor: Flavor "flex-999-1" does not exist.`,
			wantPOSTs: 1,
		},
		{
			name:      "a read-only token is terminal and says what token is needed",
			fault:     cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 403, Detail: "You do not have permission to perform this action."},
			shape:     "flex-4-2",
			want:      provider.IsTerminal,
			wantText:  "must be a read/write token",
			wantPOSTs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			if tt.fault.Status != 0 {
				e.api.InjectFault(tt.fault)
			}
			_, err := e.p.Create(e.ctx, claim("c1", "workers", tt.shape), provider.CreateOptions{})
			g.Expect(err).To(HaveOccurred())
			g.Expect(tt.want(err)).To(BeTrue(), "error kind of %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.wantText))
			g.Expect(e.api.CountRequests(http.MethodPost, "/v1/servers")).To(Equal(tt.wantPOSTs))
			g.Expect(e.api.Servers()).To(BeEmpty())
		})
	}
}

func TestRejectedTokenIsTerminalAndNamesTheSecret(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withAPIOptions(cloudscaletest.WithToken("another-token-entirely")))

	_, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("cloudscale API token was rejected (401): check the token in Secret claimscale-system/cloudscale"))
	g.Expect(e.api.CountRequests("", "")).To(Equal(1), "a rejected token is not retried")

	_, err = e.p.List(e.ctx)
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	_, err = e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
}

func TestRetryAfterIsHonoured(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.api.InjectFault(cloudscaletest.Fault{Method: http.MethodGet, Path: "/v1/servers", Status: 429, RetryAfter: "7", Detail: "Request was throttled. Expected available in 7 seconds."})

	done := make(chan error, 1)
	go func() {
		_, err := e.p.List(e.ctx)
		done <- err
	}()
	g.Eventually(e.clock.HasWaiters).Should(BeTrue(), "List waits after the 429")
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(1))

	e.clock.Step(6900 * time.Millisecond)
	g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive(), "no second try before Retry-After has passed")
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(1))

	e.clock.Step(100 * time.Millisecond)
	g.Eventually(done).Should(Receive(BeNil()))
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(2))
}

func TestLongRetryAfterIsHandedToTheCaller(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.api.InjectFault(cloudscaletest.Fault{Method: http.MethodGet, Path: "/v1/servers", Status: 429, RetryAfter: "120", Detail: "Request was throttled."})

	_, err := e.p.List(e.ctx)
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "got %v", err)
	g.Expect(provider.RetryAfter(err)).To(Equal(2 * time.Minute))
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(1), "a wait that long is the caller's to do")
}

func TestPersistentServerErrorsStopAfterMaxTries(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withConfig(func(c *cs.Config) { c.MaxTries = 3 }))
	e.api.InjectFault(cloudscaletest.Fault{Path: "/v1/servers", Status: 503, Detail: "Service temporarily down for maintenance.", Times: -1})

	var err error
	e.stepping(t, time.Minute, func() { _, err = e.p.List(e.ctx) })
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("503"))
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(3))
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name       string
		tags       map[string]string
		gone       bool
		fault      *cloudscaletest.Fault
		wantErr    func(error) bool
		wantDelete int
		wantKept   bool
	}{
		{
			name:       "a server of ours is deleted",
			tags:       ourTags("workers", "c1"),
			wantDelete: 1,
		},
		{
			name:       "a server without our cluster tag is refused",
			tags:       map[string]string{"owner": "someone"},
			wantErr:    func(err error) bool { return provider.IsTerminal(err) && errors.Is(err, cs.ErrForeignServer) },
			wantDelete: 0,
			wantKept:   true,
		},
		{
			name:       "a server of another cluster is refused",
			tags:       map[string]string{v1alpha1.TagCluster: "staging", v1alpha1.TagNodeClaim: "c1"},
			wantErr:    func(err error) bool { return provider.IsTerminal(err) && errors.Is(err, cs.ErrForeignServer) },
			wantDelete: 0,
			wantKept:   true,
		},
		{
			name:       "a server that is already gone is success",
			tags:       ourTags("workers", "c1"),
			gone:       true,
			wantDelete: 0,
		},
		{
			name:       "a server that disappears between the check and the delete is success",
			tags:       ourTags("workers", "c1"),
			fault:      &cloudscaletest.Fault{Method: http.MethodDelete, Path: "/v1/servers/*", Status: 404, Detail: cloudscaletest.DetailNotFound},
			wantDelete: 1,
			wantKept:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			id := e.api.AddServer(cloudscaletest.ServerSpec{Name: "c1", Flavor: "flex-4-2", Tags: tt.tags})
			if tt.gone {
				e.api.RemoveServer(id)
			}
			if tt.fault != nil {
				e.api.InjectFault(*tt.fault)
			}

			err := e.p.Delete(e.ctx, cs.ProviderID(id))
			if tt.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(tt.wantErr(err)).To(BeTrue(), "got %v", err)
				g.Expect(err.Error()).To(ContainSubstring(id))
			}
			g.Expect(e.api.CountRequests(http.MethodDelete, "")).To(Equal(tt.wantDelete))
			_, kept := e.api.Server(id)
			g.Expect(kept).To(Equal(tt.wantKept))
		})
	}
}

func TestProviderIDsThatAreNotCloudscaleAreRefused(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	for _, id := range []string{"proxmox://pve/100", "cloudscale://", "cloudscale://not-a-uuid", "6a7e7b3e-61e5-4a6e-9b5d-8d6d0e0f2a11"} {
		g.Expect(provider.IsTerminal(e.p.Delete(e.ctx, id))).To(BeTrue(), "Delete(%q)", id)
		_, err := e.p.Get(e.ctx, id)
		g.Expect(provider.IsTerminal(err)).To(BeTrue(), "Get(%q)", id)
	}
	g.Expect(e.api.Requests()).To(BeEmpty())
}

func TestListReturnsOnlyThisClustersServersFilteredByTheAPI(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	mine := e.api.AddServer(cloudscaletest.ServerSpec{Name: "c1", Flavor: "flex-4-2", Tags: ourTags("workers", "c1")})
	e.api.AddServer(cloudscaletest.ServerSpec{Name: "theirs", Flavor: "flex-4-2", Tags: map[string]string{v1alpha1.TagCluster: "staging"}})
	e.api.AddServer(cloudscaletest.ServerSpec{Name: "pet", Flavor: "flex-4-2"})

	got, err := e.p.List(e.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].ProviderID).To(Equal(cs.ProviderID(mine)))
	reqs := e.api.Requests()
	g.Expect(reqs).To(HaveLen(1))
	g.Expect(reqs[0].Query.Get("tag:" + v1alpha1.TagCluster)).To(Equal(testCluster))
}

func TestListAndGetShareOneCallPerRefresh(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	var ids []string
	for i := range 20 {
		name := fmt.Sprintf("c%d", i)
		ids = append(ids, e.api.AddServer(cloudscaletest.ServerSpec{Name: name, Flavor: "flex-4-2", Tags: ourTags("workers", name)}))
	}

	// A refresh: the GC lists, every claim's reconciler gets its machine.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 2 * len(ids) {
		wg.Go(func() {
			_, err := e.p.List(e.ctx)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	for range 3 {
		_, err := e.p.List(e.ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}
	for _, id := range ids {
		inst, err := e.p.Get(e.ctx, cs.ProviderID(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(inst.ProviderID).To(Equal(cs.ProviderID(id)))
	}
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(1))
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers/*")).To(Equal(0))

	e.clock.Step(6 * time.Second)
	_, err := e.p.List(e.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(2), "the next refresh lists again")
}

func TestListSeesWhatCreateAndDeleteChanged(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	_, err := e.p.List(e.ctx)
	g.Expect(err).NotTo(HaveOccurred())

	inst, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	got, err := e.p.List(e.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1), "a created server is never missing from List")

	g.Expect(e.p.Delete(e.ctx, inst.ProviderID)).To(Succeed())
	got, err = e.p.List(e.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
}

func TestGetReportsTheServersState(t *testing.T) {
	tests := []struct {
		status string
		want   provider.InstanceState
	}{
		{"changing", provider.InstanceCreating},
		{cloudscale.ServerRunning, provider.InstanceRunning},
		{cloudscale.ServerStopped, provider.InstanceSuspended},
		{"errored", provider.InstanceCreating},
	}
	for _, tt := range tests {
		t.Run(tt.status+" is "+string(tt.want), func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			id := e.api.AddServer(cloudscaletest.ServerSpec{Name: "c1", Flavor: "plus-32-8", Zone: "rma1", Status: tt.status, Tags: ourTags("workers", "c1")})
			inst, err := e.p.Get(e.ctx, cs.ProviderID(id))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(inst.State).To(Equal(tt.want))
			g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "rma1"))
			g.Expect(inst.Labels).To(HaveKeyWithValue(corev1.LabelTopologyRegion, "rma"))
			g.Expect(inst.Capacity.Cpu().Value()).To(BeEquivalentTo(8))
		})
	}
}

func TestGetOfAMissingServerIsNotFound(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	_, err := e.p.Get(e.ctx, cs.ProviderID("6a7e7b3e-61e5-4a6e-9b5d-8d6d0e0f2a11"))
	g.Expect(provider.IsNotFound(err)).To(BeTrue(), "got %v", err)
}

func TestCreatesAndDeletesRunAtMostTenAtOnce(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		run    func(e *env, i int) error
		seed   bool
	}{
		{
			name:   "creates",
			method: http.MethodPost,
			path:   "/v1/servers",
			run: func(e *env, i int) error {
				_, err := e.p.Create(e.ctx, claim(fmt.Sprintf("c%d", i), "workers", "flex-4-2"), provider.CreateOptions{})
				return err
			},
		},
		{
			name:   "deletes",
			method: http.MethodDelete,
			path:   "/v1/servers/*",
			seed:   true,
			run: func(e *env, i int) error {
				return e.p.Delete(e.ctx, cs.ProviderID(e.api.Servers()[i].UUID))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newEnv(t)
			const n = 25
			if tt.seed {
				for i := range n {
					name := fmt.Sprintf("c%02d", i)
					e.api.AddServer(cloudscaletest.ServerSpec{Name: name, Flavor: "flex-4-2", Tags: ourTags("workers", name)})
				}
			}
			hold := e.api.HoldRequests(tt.method, tt.path)

			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() { errs <- tt.run(e, i) })
			}
			g.Eventually(func() int { return e.api.InFlight(tt.method) }).Should(Equal(10))
			g.Consistently(func() int { return e.api.InFlight(tt.method) }, 100*time.Millisecond).Should(Equal(10))
			hold.Release()
			wg.Wait()
			close(errs)
			for err := range errs {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(e.api.MaxInFlight(tt.method)).To(Equal(10))
			g.Expect(e.api.CountRequests(tt.method, tt.path)).To(Equal(n))
		})
	}
}

func TestShapesResolveFlavors(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	shapes, err := e.p.Shapes(e.ctx, pool("workers",
		v1alpha1.Shape{Name: "flex-8-4", Price: "0.12"},
		v1alpha1.Shape{Name: "plus-32-8", Price: "0.55"},
	))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shapes).To(HaveLen(2))
	g.Expect(shapes[0].Name).To(Equal("flex-8-4"))
	g.Expect(shapes[0].Capacity.Cpu().Value()).To(BeEquivalentTo(4))
	g.Expect(shapes[0].Capacity.Memory().Equal(resource.MustParse("8Gi"))).To(BeTrue())
	g.Expect(shapes[0].Price).To(Equal(0.12))
	g.Expect(shapes[1].Name).To(Equal("plus-32-8"))
	g.Expect(shapes[1].Capacity.Cpu().Value()).To(BeEquivalentTo(8))
	g.Expect(shapes[1].Price).To(Equal(0.55))
}

// The API knows no prices: an unpriced flavor's price is zero, unknown (the
// provider contract's word for it), never a size rank passed off as money;
// provisioning ranks such flavors by size itself.
func TestUnpricedFlavorsHaveNoPrice(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	shapes, err := e.p.Shapes(e.ctx, pool("workers",
		v1alpha1.Shape{Name: "plus-32-8"},
		v1alpha1.Shape{Name: "flex-4-1"},
		v1alpha1.Shape{Name: "flex-16-4"},
	))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shapes).To(HaveLen(3))
	for _, s := range shapes {
		g.Expect(s.Price).To(BeZero(), "flavor %s has no price", s.Name)
		g.Expect(s.Capacity.Cpu().Sign()).To(Equal(1), "flavor %s has its size", s.Name)
	}
}

func TestSomeFlavorsPricedIsRefused(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	_, err := e.p.Shapes(e.ctx, pool("workers",
		v1alpha1.Shape{Name: "flex-8-4", Price: "0.12"},
		v1alpha1.Shape{Name: "plus-32-8"},
	))
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("prices flavors flex-8-4 but not plus-32-8"))
}

func TestShapesNamesEveryFlavorTheZoneDoesNotOffer(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withAPIOptions(cloudscaletest.WithFlavors(
		cloudscaletest.Flavor{Slug: "flex-4-2", VCPUCount: 2, MemoryGB: 4, Zones: []string{"lpg1", "rma1"}},
		cloudscaletest.Flavor{Slug: "gpu-64-8", VCPUCount: 8, MemoryGB: 64, Zones: []string{"rma1"}},
	)))
	_, err := e.p.Shapes(e.ctx, pool("gpus",
		v1alpha1.Shape{Name: "flex-4-2"},
		v1alpha1.Shape{Name: "gpu-64-8"},
		v1alpha1.Shape{Name: "flex-999-1"},
	))
	var unknown *cs.UnknownFlavorError
	g.Expect(errors.As(err, &unknown)).To(BeTrue(), "got %v", err)
	g.Expect(provider.IsTerminal(err)).To(BeTrue())
	g.Expect(unknown.Flavors).To(Equal([]string{"gpu-64-8", "flex-999-1"}))
	g.Expect(err.Error()).To(Equal("nodepool gpus names cloudscale flavors gpu-64-8, flex-999-1 that zone lpg1 does not offer (available: flex-4-2)"))
}

func TestShapesRefusesFlexibleShapes(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	p := pool("flex")
	p.Spec.Shapes.Flexible = &v1alpha1.FlexibleShape{MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("8")}
	_, err := e.p.Shapes(e.ctx, p)
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(e.api.Requests()).To(BeEmpty())
}

func TestFlavorsAreListedOnceAnHour(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	shapes := []string{"flex-4-1", "flex-4-2", "flex-8-4", "flex-16-4", "plus-16-4"}

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, err := e.p.Shapes(e.ctx, pool(fmt.Sprintf("pool-%d", i), v1alpha1.Shape{Name: shapes[i%len(shapes)]}))
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
	wg.Wait()
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/flavors")).To(Equal(1))

	e.clock.Step(59 * time.Minute)
	_, err := e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/flavors")).To(Equal(1))

	e.clock.Step(2 * time.Minute)
	_, err = e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.api.CountRequests(http.MethodGet, "/v1/flavors")).To(Equal(2), "listed again after an hour")
}

func TestFlavorListFailureIsNotCached(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withConfig(func(c *cs.Config) { c.MaxTries = 1 }))
	e.api.InjectFault(cloudscaletest.Fault{Path: "/v1/flavors", Status: 500, Detail: cloudscaletest.DetailServerError})
	_, err := e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "got %v", err)
	_, err = e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
	g.Expect(err).NotTo(HaveOccurred())
}

func TestNew(t *testing.T) {
	tests := []struct {
		name     string
		settings func(*v1alpha1.CloudscaleSettings)
		creds    map[string][]byte
		opts     func(*provider.Options)
		wantErr  string
	}{
		{
			name:    "a Secret without a token is refused, naming the Secret and key",
			creds:   map[string][]byte{"password": []byte("x")},
			wantErr: `Secret claimscale-system/cloudscale has no API token: set the key "token" (or "CLOUDSCALE_API_TOKEN")`,
		},
		{
			name:  "the CLI's key name is accepted",
			creds: map[string][]byte{cs.CredentialTokenEnv: []byte(testToken)},
		},
		{
			name:     "extra tags may not set claimscale's own",
			settings: func(s *v1alpha1.CloudscaleSettings) { s.Tags = map[string]string{v1alpha1.TagCluster: "other"} },
			wantErr:  `"claimscale.io/cluster" is reserved`,
		},
		{
			name:     "an interface needs a network or a subnet",
			settings: func(s *v1alpha1.CloudscaleSettings) { s.Interfaces = []v1alpha1.CloudscaleInterface{{}} },
			wantErr:  "interfaces[0] of zone lpg1 needs a network or a subnet",
		},
		{
			name:    "an API URL that is not http(s) is refused",
			creds:   map[string][]byte{cs.CredentialToken: []byte(testToken), cs.CredentialAPIURL: []byte("ftp://example")},
			wantErr: "want http(s)://host",
		},
		{
			name:    "user data needs a Secret reader",
			opts:    func(o *provider.Options) { o.Secrets = nil },
			wantErr: "no Secret reader",
		},
		{
			name:    "a cluster name is required",
			opts:    func(o *provider.Options) { o.ClusterName = "" },
			wantErr: "no cluster name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := baseSettings()
			if tt.settings != nil {
				tt.settings(&s)
			}
			creds := tt.creds
			if creds == nil {
				creds = map[string][]byte{cs.CredentialToken: []byte(testToken)}
			}
			opts := provider.Options{ClusterName: testCluster, Credentials: creds, Secrets: secretStore{}}
			if tt.opts != nil {
				tt.opts(&opts)
			}
			p, err := cs.New(t.Context(), nodeProvider(s), opts)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(p).NotTo(BeNil())
				return
			}
			g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
			g.Expect(err.Error()).NotTo(ContainSubstring(testToken))
		})
	}
}

func TestNewWithConfigBaseURLWinsOverTheSecret(t *testing.T) {
	g := NewWithT(t)
	api := cloudscaletest.NewServer()
	defer api.Close()
	p, err := cs.NewWithConfig(t.Context(), nodeProvider(baseSettings()), provider.Options{
		ClusterName: testCluster,
		Credentials: map[string][]byte{cs.CredentialToken: []byte(testToken), cs.CredentialAPIURL: []byte("http://127.0.0.1:1/")},
		Secrets:     secretStore{},
	}, cs.Config{BaseURL: api.URL + "/"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = p.List(t.Context())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(api.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(1))
}

// TestTheTokenNeverAppears drives every operation into every kind of error,
// including an API that echoes the Authorization header back, and looks for
// the token in every error text and log line.
func TestTheTokenNeverAppears(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	var texts []string
	record := func(err error) {
		if err != nil {
			texts = append(texts, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
		}
	}
	faults := []cloudscaletest.Fault{
		{Status: 401, Detail: "Invalid token.", EchoAuthorization: true},
		{Status: 403, Detail: "Forbidden.", EchoAuthorization: true},
		{Status: 400, Detail: "Quota exceeded.", EchoAuthorization: true},
		{Status: 400, Detail: "Bad request.", EchoAuthorization: true},
		{Status: 500, Detail: "Oops.", EchoAuthorization: true, Times: -1},
		{Status: 429, Detail: "Slow down.", RetryAfter: "3600", EchoAuthorization: true},
	}
	own := e.api.AddServer(cloudscaletest.ServerSpec{Name: "own", Flavor: "flex-4-2", Tags: ourTags("workers", "own")})
	foreign := e.api.AddServer(cloudscaletest.ServerSpec{Name: "foreign", Flavor: "flex-4-2"})
	for i, f := range faults {
		e.api.ClearFaults()
		e.api.InjectFault(f)
		e.clock.Step(2 * time.Hour) // past every cache
		e.stepping(t, time.Minute, func() {
			_, err := e.p.Create(e.ctx, claim(fmt.Sprintf("c%d", i), "workers", "flex-4-2"), provider.CreateOptions{})
			record(err)
		})
		e.api.InjectFault(f)
		e.stepping(t, time.Minute, func() { _, err := e.p.List(e.ctx); record(err) })
		e.api.InjectFault(f)
		e.stepping(t, time.Minute, func() { _, err := e.p.Get(e.ctx, cs.ProviderID(own)); record(err) })
		e.api.InjectFault(f)
		e.stepping(t, time.Minute, func() { record(e.p.Delete(e.ctx, cs.ProviderID(own))) })
		e.api.InjectFault(f)
		e.stepping(t, time.Minute, func() {
			_, err := e.p.Shapes(e.ctx, pool("workers", v1alpha1.Shape{Name: "flex-4-2"}))
			record(err)
		})
	}
	e.api.ClearFaults()
	record(e.p.Delete(e.ctx, cs.ProviderID(foreign)))

	g.Expect(len(texts)).To(BeNumerically(">=", 25), "the faults produced errors")
	g.Expect(strings.Join(texts, "\n")).To(ContainSubstring("[redacted]"), "the echoed token was seen and scrubbed")
	for _, text := range append(texts, e.logs.all()) {
		g.Expect(text).NotTo(ContainSubstring(testToken))
	}
}

func TestPrintingTheProviderDoesNotShowTheToken(t *testing.T) {
	g := NewWithT(t)
	// A fresh provider: printing one in use would race with its own
	// goroutines' locks.
	e := newEnv(t)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		g.Expect(fmt.Sprintf(format, e.p)).NotTo(ContainSubstring(testToken), format)
	}
}
