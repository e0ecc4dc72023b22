// Package cloudscaletest is an in-memory stand-in for the cloudscale.ch API
// v1, served over HTTP on 127.0.0.1, for testing the cloudscale provider and
// for end-to-end tests that drive the whole node lifecycle without a
// cloudscale account. It answers the requests the provider makes
// (servers with tag filters, flavors) with the API's status codes and error
// bodies, records every request, and injects faults on demand.
//
// What it follows, and where that comes from:
//
//   - Error bodies have the shapes of Django REST framework, which the API's
//     answers follow: {"detail": "..."} for authentication, permission,
//     not-found, throttling and server errors, and {"field": ["message",
//     ...]} for validation errors, e.g. {"tags": ["Ensure this field has no
//     more than 255 characters."]} (the two bodies quoted in the issue that
//     introduced this table, from the real API). The messages are DRF's
//     defaults ("Invalid token.", "Authentication credentials were not
//     provided.", "You do not have permission to perform this action.",
//     "Not found.", "Request was throttled. Expected available in N
//     seconds.", "This field is required.", "Ensure this field has no more
//     than N characters.", "Object with slug=X does not exist."). The
//     cloudscale Go SDK (v6, cloudscale.go CheckResponse) decodes an error
//     body as a map of strings into ErrorResponse, so a validation error
//     reaches a client as a json.UnmarshalTypeError and must be read from
//     the body; its integration tests (servers_integration_test.go,
//     volumes_integration_test.go) expect a 400 ErrorResponse whose message
//     names the problem for a refused update.
//   - 401 for a missing or wrong token, with WWW-Authenticate: Bearer
//     (DRF's TokenAuthentication, the API's bearer tokens).
//   - 503 {"detail": "The API is currently not available due to
//     maintenance."} during maintenance windows (DetailMaintenance): the
//     wording is the one operators reported; an assumption beyond that.
//   - GET /v1/flavors lists every flavor with its zones and, since GPU
//     flavors exist, its GPUs: "gpu": null for a flavor without, else the
//     model, count, memory per GPU and in all (cloudscale-go-sdk
//     flavors.go and flavors_test.go's example answer, v8.0.0, commit
//     4905b50; the SDK v6 this project pins has no flavor service).
//   - Tag filters on lists (tag:key=value, tag:key= for presence) as in the
//     SDK's WithTagFilter and the API docs on tags.
//   - Servers are "changing" until they have booted (MarkRunning), as the
//     API reports new servers (SDK: ServerRunning/ServerStopped/
//     ServerChanging).
//   - Server actions: POST /v1/servers/<uuid>/start, /stop and /reboot
//     answer 204 without a body (the SDK's ServerService Start, Stop and
//     Reboot, servers.go, decode nothing) and act asynchronously: the
//     server is "changing" until it reaches stopped or running, which the
//     SDK's integration tests (servers_integration_test.go
//     TestIntegrationServer_UpdateStatus) wait for with WaitFor and
//     ServerIsStopped / ServerIsRunning after each action. How long it
//     changes is the fake's (WithSettleReads); that an action that is
//     already done (a stop of a stopped server) is a 204 that changes
//     nothing is an assumption.
//   - Server groups (GET/POST /v1/server-groups with tag filters, GET and
//     DELETE /v1/server-groups/<uuid>; the SDK's ServerGroupService) are
//     zonal (ZonalResource) and list their servers; a server joins groups
//     at create time only (ServerRequest has server_groups,
//     ServerUpdateRequest has none) and leaves them when deleted. That a
//     group of another zone is refused, as a field error, is an
//     assumption.
//   - Assumptions, not sourced: how many servers an anti-affinity group may
//     hold (WithServerGroupLimit, unlimited unless set; the limit and the
//     wording of its refusal are not published), the wording of an out-of-capacity or quota
//     answer (OutOfCapacity, DetailQuotaExceeded: a 400 with a detail; the
//     API documentation and SDKs publish none), and the 400 a DELETE of a
//     server still being created gets (WithDeleteRefusedWhileCreating,
//     DetailDeleteWhileCreating).
package cloudscaletest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"
)

// Details the fake answers with, worded like the real API's (Django REST
// framework) messages, so tests can match on them.
const (
	DetailInvalidToken     = "Invalid token."
	DetailMissingToken     = "Authentication credentials were not provided."
	DetailPermissionDenied = "You do not have permission to perform this action."
	DetailNotFound         = "Not found."
	DetailThrottled        = "Request was throttled. Expected available in 7 seconds."
	DetailServerError      = "A server error occurred."
	DetailMaintenance      = "The API is currently not available due to maintenance."
	// DetailQuotaExceeded is an assumption: the API's wording of an
	// exhausted project quota is not published.
	DetailQuotaExceeded = "Quota exceeded: the servers requested exceed the vCPU quota of this project."
	// DetailDeleteWhileCreating is an assumption: the API's wording when a
	// server cannot be deleted before it has finished being created.
	DetailDeleteWhileCreating = "The server is still being created. Please try again later."
	// FieldTooLong is DRF's message for a string over its max_length.
	FieldTooLong = "Ensure this field has no more than 255 characters."
)

// OutOfCapacity is the fault of a zone that has no room for servers: every
// create in zone (of flavor, when not empty) is answered 400 with a detail
// saying so, until ClearFaults. The wording is an assumption (see the
// package comment).
func OutOfCapacity(zone, flavor string) Fault {
	what := "servers"
	if flavor != "" {
		what = "flavor " + flavor
	}
	return Fault{
		Method: http.MethodPost, Path: "/v1/servers", Zone: zone, Flavor: flavor, Status: http.StatusBadRequest,
		Detail: fmt.Sprintf("Insufficient capacity for %s in zone %s. Please try again later or choose another zone.", what, zone),
		Times:  -1,
	}
}

// Flavor is a server flavor and the zones it is offered in.
type Flavor struct {
	Slug      string
	Name      string
	VCPUCount int
	MemoryGB  int
	Zones     []string
	// GPU is the flavor's GPUs, nil for a flavor without (listed as
	// "gpu": null).
	GPU *FlavorGPU
}

// FlavorGPU is what GET /v1/flavors says of a GPU flavor's GPUs: the
// model, how many, and the memory of each (cloudscale-go-sdk flavors.go,
// FlavorGPU, since v8.0.0, commit 4905b50 "feat: add flavors support";
// its test's example answer also has total_vram_gb, which the fake sends
// as count × vram_per_gpu_gb).
type FlavorGPU struct {
	Name         string
	Count        int
	VRAMPerGPUGB int
}

// GPUFlavor is the GPU flavor of the cloudscale-go-sdk's example answer
// (flavors_test.go, v8.0.0): gpu2-128-16-1-200, 16 vCPUs, 128 GB and one
// NVIDIA RTX PRO 6000 Max-Q with 96 GB, offered in lpg1 and rma1.
func GPUFlavor() Flavor {
	return Flavor{
		Slug: "gpu2-128-16-1-200", Name: "GPU2-128-16-1-200", VCPUCount: 16, MemoryGB: 128,
		Zones: []string{"rma1", "lpg1"},
		GPU:   &FlavorGPU{Name: "NVIDIA RTX PRO 6000 Max-Q", Count: 1, VRAMPerGPUGB: 96},
	}
}

// DefaultFlavors are cloudscale-like flex (shared vCPU) and plus (dedicated
// vCPU) flavors, and the GPU flavor GPUFlavor, offered in lpg1 and rma1.
func DefaultFlavors() []Flavor {
	zones := []string{"lpg1", "rma1"}
	var flavors []Flavor
	for _, f := range []struct {
		family    string
		mem, vcpu int
	}{
		{"flex", 4, 1}, {"flex", 4, 2}, {"flex", 8, 2}, {"flex", 8, 4},
		{"flex", 12, 3}, {"flex", 16, 4}, {"flex", 16, 8}, {"flex", 24, 6},
		{"flex", 32, 8}, {"flex", 48, 12}, {"flex", 64, 16}, {"flex", 96, 24},
		{"plus", 8, 2}, {"plus", 16, 4}, {"plus", 32, 8}, {"plus", 48, 12},
		{"plus", 64, 16}, {"plus", 96, 24},
	} {
		slug := fmt.Sprintf("%s-%d-%d", f.family, f.mem, f.vcpu)
		flavors = append(flavors, Flavor{
			Slug:      slug,
			Name:      strings.ToUpper(slug[:1]) + slug[1:],
			VCPUCount: f.vcpu,
			MemoryGB:  f.mem,
			Zones:     zones,
		})
	}
	return append(flavors, GPUFlavor())
}

// Fault is an error the fake answers with instead of doing the request.
type Fault struct {
	// Method the fault applies to; empty means any.
	Method string
	// Path the fault applies to, e.g. "/v1/servers"; a trailing "/*"
	// matches every path below ("/v1/servers/*" is any one server); empty
	// means any.
	Path string
	// Status code of the answer.
	Status int
	// Zone and Flavor, when set, restrict the fault to creates (POST
	// /v1/servers) asking for that zone or flavor.
	Zone, Flavor string
	// Detail goes into the body as {"detail": Detail}. Empty leaves the body
	// empty, unless Body is set.
	Detail string
	// Body is sent as it is (a JSON validation error such as
	// {"tags": ["..."]}) when Detail is empty.
	Body string
	// RetryAfter is sent as the Retry-After header when not empty.
	RetryAfter string
	// EchoAuthorization appends the request's Authorization header to the
	// detail, as a careless server might; for testing that the token never
	// leaks from the client.
	EchoAuthorization bool
	// Times the fault answers before it is used up: 0 means once, a negative
	// number means until ClearFaults.
	Times int
}

// Request is one request the fake received. The Authorization header is not
// kept.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Body   []byte
}

// Option configures a Server.
type Option func(*Server)

// WithToken makes the fake accept only "Authorization: Bearer <token>" and
// answer anything else with 401, as the real API does. Without it any
// request is accepted.
func WithToken(token string) Option { return func(s *Server) { s.token = token } }

// WithFlavors replaces DefaultFlavors.
func WithFlavors(flavors ...Flavor) Option {
	return func(s *Server) { s.flavors = slices.Clone(flavors) }
}

// WithDefaultZone is the zone of servers created without one (lpg1 unless
// set).
func WithDefaultZone(zone string) Option { return func(s *Server) { s.defaultZone = zone } }

// WithDeleteRefusedWhileCreating makes a DELETE of a server that is still
// "changing" after its create answer 400 DetailDeleteWhileCreating, as the
// API is assumed to (see the package comment).
func WithDeleteRefusedWhileCreating() Option {
	return func(s *Server) { s.refuseDeleteChanging = true }
}

// WithServerGroupLimit refuses a create that would put more than n servers
// into one server group (an assumption: see the package comment).
func WithServerGroupLimit(n int) Option { return func(s *Server) { s.groupLimit = n } }

// WithServersRunning makes new servers "running" at once instead of
// "changing" until MarkRunning.
func WithServersRunning() Option { return func(s *Server) { s.startRunning = true } }

// WithClock sets what the fake uses for created_at (time.Now unless set).
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithOnCreate calls fn with every server created through the API, after
// the answer was sent; an end-to-end test registers a Node for it there.
func WithOnCreate(fn func(cloudscale.Server)) Option { return func(s *Server) { s.onCreate = fn } }

// WithOnDelete calls fn with every server deleted through the API, after the
// answer was sent.
func WithOnDelete(fn func(cloudscale.Server)) Option { return func(s *Server) { s.onDelete = fn } }

// Server is the fake API. Its methods are safe for concurrent use.
type Server struct {
	// URL of the fake, without a trailing slash; the provider's base URL.
	URL string

	http *httptest.Server

	token        string
	flavors      []Flavor
	defaultZone  string
	startRunning bool
	// refuseDeleteChanging: see WithDeleteRefusedWhileCreating.
	refuseDeleteChanging bool
	groupLimit           int
	now                  func() time.Time
	onCreate             func(cloudscale.Server)
	onDelete             func(cloudscale.Server)

	mu          sync.Mutex
	servers     map[string]*cloudscale.Server
	groups      map[string]*cloudscale.ServerGroup
	requests    []Request
	faults      []*Fault
	holds       []*Hold
	inFlight    map[string]int
	maxInFlight map[string]int
	// settling are the servers changing after a start, stop or reboot;
	// settleReads how many reads each shows "changing" first (1 unless
	// WithSettleReads).
	settling    map[string]*settling
	settleReads int
}

// NewServer starts a fake API on 127.0.0.1 on a free port. Close it when
// done.
func NewServer(opts ...Option) *Server {
	s := &Server{
		flavors:     DefaultFlavors(),
		defaultZone: "lpg1",
		now:         time.Now,
		servers:     map[string]*cloudscale.Server{},
		groups:      map[string]*cloudscale.ServerGroup{},
		inFlight:    map[string]int{},
		maxInFlight: map[string]int{},
		settling:    map[string]*settling{},
		settleReads: 1,
	}
	for _, opt := range opts {
		opt(s)
	}
	s.http = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.http.URL
	return s
}

// WithSettleReads sets how many reads of a server show it "changing" after
// a start or stop before it shows its new status.
func WithSettleReads(n int) Option {
	return func(s *Server) { s.settleReads = n }
}

// Close stops the fake and releases every held request.
func (s *Server) Close() {
	s.mu.Lock()
	for _, h := range s.holds {
		h.release()
	}
	s.mu.Unlock()
	s.http.Close()
}

// InjectFault adds a fault; faults are tried in the order they were added.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fault := f
	s.faults = append(s.faults, &fault)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Hold keeps matching requests waiting until Release, so a test can see how
// many run at once.
type Hold struct {
	method, path string
	once         sync.Once
	released     chan struct{}
}

// Release lets every held request, and every later one, through.
func (h *Hold) Release() { h.release() }

func (h *Hold) release() { h.once.Do(func() { close(h.released) }) }

// HoldRequests makes requests matching method and path (as in Fault) wait
// until the returned Hold is released.
func (s *Server) HoldRequests(method, path string) *Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &Hold{method: method, path: path, released: make(chan struct{})}
	s.holds = append(s.holds, h)
	return h
}

// InFlight is the number of requests with this method being answered now.
func (s *Server) InFlight(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[method]
}

// MaxInFlight is the most requests with this method answered at once so far.
func (s *Server) MaxInFlight(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight[method]
}

// Requests returns the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// CountRequests counts the requests received with this method and path (as
// in Fault; empty matches any).
func (s *Server) CountRequests(method, path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if matches(method, path, r.Method, r.Path) {
			n++
		}
	}
	return n
}

// ServerSpec describes a server to put into the fake directly, as if made
// by someone else (another cluster, a person, a crashed controller).
type ServerSpec struct {
	Name   string
	Flavor string
	Zone   string
	Status string
	Tags   map[string]string
}

// AddServer puts a server into the fake and returns its UUID.
func (s *Server) AddServer(spec ServerSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := spec.Status
	if status == "" {
		status = cloudscale.ServerRunning
	}
	flavor := spec.Flavor
	if flavor == "" && len(s.flavors) > 0 {
		flavor = s.flavors[0].Slug
	}
	srv, problem := s.newServer(spec.Name, flavor, "debian-12", spec.Zone, spec.Tags)
	if problem != "" {
		panic("cloudscaletest: AddServer: " + problem)
	}
	srv.Status = status
	return srv.UUID
}

// Servers returns every server the fake holds, sorted by name.
func (s *Server) Servers() []cloudscale.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cloudscale.Server, 0, len(s.servers))
	for _, srv := range s.servers {
		out = append(out, *srv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Server returns one server by UUID.
func (s *Server) Server(uuid string) (cloudscale.Server, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, ok := s.servers[uuid]
	if !ok {
		return cloudscale.Server{}, false
	}
	return *srv, true
}

// MarkRunning sets a server's status to running, as the API does once a
// server has booted. It reports whether the server exists.
func (s *Server) MarkRunning(uuid string) bool {
	return s.SetStatus(uuid, cloudscale.ServerRunning)
}

// MarkAllRunning sets every server's status to running.
func (s *Server) MarkAllRunning() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.servers {
		srv.Status = cloudscale.ServerRunning
	}
}

// SetStatus sets a server's status (running, stopped, changing, errored).
func (s *Server) SetStatus(uuid, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, ok := s.servers[uuid]
	if ok {
		srv.Status = status
	}
	return ok
}

// RemoveServer deletes a server behind the provider's back, as a person in
// the control panel might.
func (s *Server) RemoveServer(uuid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.servers, uuid)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)

	s.mu.Lock()
	s.requests = append(s.requests, Request{
		Method: r.Method,
		Path:   r.URL.Path,
		Query:  r.URL.Query(),
		Body:   body,
	})
	s.inFlight[r.Method]++
	s.maxInFlight[r.Method] = max(s.maxInFlight[r.Method], s.inFlight[r.Method])
	var waits []chan struct{}
	for _, h := range s.holds {
		if matches(h.method, h.path, r.Method, r.URL.Path) {
			waits = append(waits, h.released)
		}
	}
	s.mu.Unlock()

	defer func() {
		s.mu.Lock()
		s.inFlight[r.Method]--
		s.mu.Unlock()
	}()

	for _, released := range waits {
		select {
		case <-released:
		case <-r.Context().Done():
			return
		}
	}

	if s.token != "" {
		switch auth := r.Header.Get("Authorization"); {
		case auth == "":
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeDetail(w, http.StatusUnauthorized, DetailMissingToken)
			return
		case auth != "Bearer "+s.token:
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeDetail(w, http.StatusUnauthorized, DetailInvalidToken)
			return
		}
	}

	if s.answerFault(w, r, body) {
		return
	}

	switch path := strings.TrimSuffix(r.URL.Path, "/"); {
	case path == "/v1/flavors" && r.Method == http.MethodGet:
		s.listFlavors(w)
	case path == "/v1/servers" && r.Method == http.MethodGet:
		s.listServers(w, r.URL.Query())
	case path == "/v1/servers" && r.Method == http.MethodPost:
		s.createServer(w, body)
	case path == "/v1/server-groups" && r.Method == http.MethodGet:
		s.listServerGroups(w, r.URL.Query())
	case path == "/v1/server-groups" && r.Method == http.MethodPost:
		s.createServerGroup(w, body)
	case strings.HasPrefix(path, "/v1/server-groups/") && !strings.Contains(strings.TrimPrefix(path, "/v1/server-groups/"), "/"):
		uuid := strings.TrimPrefix(path, "/v1/server-groups/")
		switch r.Method {
		case http.MethodGet:
			s.getServerGroup(w, uuid)
		case http.MethodDelete:
			s.deleteServerGroup(w, uuid)
		default:
			writeDetail(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method %q not allowed.", r.Method))
		}
	case strings.HasPrefix(path, "/v1/servers/") && r.Method == http.MethodPost && isServerAction(path):
		rest := strings.TrimPrefix(path, "/v1/servers/")
		uuid, action, _ := strings.Cut(rest, "/")
		s.serverAction(w, uuid, action)
	case strings.HasPrefix(path, "/v1/servers/") && !strings.Contains(strings.TrimPrefix(path, "/v1/servers/"), "/"):
		uuid := strings.TrimPrefix(path, "/v1/servers/")
		switch r.Method {
		case http.MethodGet:
			s.getServer(w, uuid)
		case http.MethodDelete:
			s.deleteServer(w, uuid)
		default:
			writeDetail(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method %q not allowed.", r.Method))
		}
	default:
		writeDetail(w, http.StatusNotFound, DetailNotFound)
	}
}

func (s *Server) answerFault(w http.ResponseWriter, r *http.Request, body []byte) bool {
	var create struct {
		Zone   string `json:"zone"`
		Flavor string `json:"flavor"`
	}
	if r.Method == http.MethodPost {
		_ = json.Unmarshal(body, &create)
		if create.Zone == "" {
			create.Zone = s.defaultZone
		}
	}
	s.mu.Lock()
	var fault *Fault
	for i, f := range s.faults {
		if !matches(f.Method, f.Path, r.Method, r.URL.Path) {
			continue
		}
		if (f.Zone != "" || f.Flavor != "") && r.Method != http.MethodPost ||
			f.Zone != "" && f.Zone != create.Zone || f.Flavor != "" && f.Flavor != create.Flavor {
			continue
		}
		fault = f
		switch {
		case f.Times < 0:
		case f.Times <= 1:
			s.faults = slices.Delete(s.faults, i, i+1)
		default:
			f.Times--
		}
		break
	}
	s.mu.Unlock()
	if fault == nil {
		return false
	}
	if fault.RetryAfter != "" {
		w.Header().Set("Retry-After", fault.RetryAfter)
	}
	detail := fault.Detail
	if fault.EchoAuthorization {
		detail += " (received " + r.Header.Get("Authorization") + ")"
	}
	if detail == "" && fault.Body != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(fault.Status)
		_, _ = io.WriteString(w, fault.Body)
		return true
	}
	if detail == "" {
		w.WriteHeader(fault.Status)
		return true
	}
	writeDetail(w, fault.Status, detail)
	return true
}

type flavorJSON struct {
	Slug      string     `json:"slug"`
	Name      string     `json:"name"`
	VCPUCount int        `json:"vcpu_count"`
	MemoryGB  int        `json:"memory_gb"`
	GPU       *gpuJSON   `json:"gpu"`
	Zones     []zoneJSON `json:"zones"`
}

type gpuJSON struct {
	Count        int    `json:"count"`
	Name         string `json:"name"`
	VRAMPerGPUGB int    `json:"vram_per_gpu_gb"`
	TotalVRAMGB  int    `json:"total_vram_gb"`
}

type zoneJSON struct {
	Slug string `json:"slug"`
}

func (s *Server) listFlavors(w http.ResponseWriter) {
	out := make([]flavorJSON, 0, len(s.flavors))
	for _, f := range s.flavors {
		fj := flavorJSON{Slug: f.Slug, Name: f.Name, VCPUCount: f.VCPUCount, MemoryGB: f.MemoryGB, Zones: []zoneJSON{}}
		if g := f.GPU; g != nil {
			fj.GPU = &gpuJSON{Count: g.Count, Name: g.Name, VRAMPerGPUGB: g.VRAMPerGPUGB, TotalVRAMGB: g.Count * g.VRAMPerGPUGB}
		}
		for _, z := range f.Zones {
			fj.Zones = append(fj.Zones, zoneJSON{Slug: z})
		}
		out = append(out, fj)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listServers(w http.ResponseWriter, query url.Values) {
	s.mu.Lock()
	out := []cloudscale.Server{}
	for _, srv := range s.servers {
		if hasTags(srv.Tags, query) {
			s.settleLocked(srv)
			out = append(out, *srv)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	writeJSON(w, http.StatusOK, out)
}

// hasTags applies the API's tag filters: tag:key=value matches that value,
// tag:key= (empty) matches any server carrying the key.
func hasTags(tags cloudscale.TagMap, query url.Values) bool {
	for key, values := range query {
		name, ok := strings.CutPrefix(key, "tag:")
		if !ok {
			continue
		}
		got, present := tags[name]
		for _, want := range values {
			if !present || (want != "" && got != want) {
				return false
			}
		}
	}
	return true
}

func (s *Server) getServer(w http.ResponseWriter, uuid string) {
	s.mu.Lock()
	srv, ok := s.servers[uuid]
	var out cloudscale.Server
	if ok {
		s.settleLocked(srv)
		out = *srv
	}
	s.mu.Unlock()
	if !ok {
		writeDetail(w, http.StatusNotFound, DetailNotFound)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func isServerAction(path string) bool {
	_, action, ok := strings.Cut(strings.TrimPrefix(path, "/v1/servers/"), "/")
	return ok && (action == "start" || action == "stop" || action == "reboot")
}

// serverAction answers POST /v1/servers/<uuid>/{start,stop,reboot}: 204 and
// no body (the SDK's Start, Stop and Reboot decode none), and the change
// happens afterwards: the server shows "changing" until it settles
// (settleReads reads later) as stopped or running, which is why the SDK's
// own integration tests WaitFor ServerIsStopped or ServerIsRunning after
// each action. A start of a running or a stop of a stopped server is
// answered 204 and changes nothing: an assumption, the API docs publish no
// refusal for it.
func (s *Server) serverAction(w http.ResponseWriter, uuid, action string) {
	s.mu.Lock()
	srv, ok := s.servers[uuid]
	if !ok {
		s.mu.Unlock()
		writeDetail(w, http.StatusNotFound, DetailNotFound)
		return
	}
	target := cloudscale.ServerRunning
	if action == "stop" {
		target = cloudscale.ServerStopped
	}
	if srv.Status != target || action == "reboot" {
		srv.Status = "changing"
		s.settling[uuid] = &settling{target: target, readsLeft: s.settleReads}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// settling is a server on its way to a status after an action.
type settling struct {
	target    string
	readsLeft int
}

// settleLocked lets a server that is changing after an action reach its
// target once it has been read settleReads times: the reads stand for the
// seconds the API takes.
func (s *Server) settleLocked(srv *cloudscale.Server) {
	st, ok := s.settling[srv.UUID]
	if !ok {
		return
	}
	if st.readsLeft > 0 {
		st.readsLeft--
		return
	}
	srv.Status = st.target
	delete(s.settling, srv.UUID)
}

func (s *Server) deleteServer(w http.ResponseWriter, uuid string) {
	s.mu.Lock()
	srv, ok := s.servers[uuid]
	if ok && s.refuseDeleteChanging && srv.Status == "changing" {
		s.mu.Unlock()
		writeDetail(w, http.StatusBadRequest, DetailDeleteWhileCreating)
		return
	}
	delete(s.servers, uuid)
	if ok {
		s.leaveGroupsLocked(srv)
	}
	onDelete := s.onDelete
	s.mu.Unlock()
	if !ok {
		writeDetail(w, http.StatusNotFound, DetailNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
	if onDelete != nil {
		onDelete(*srv)
	}
}

func (s *Server) createServer(w http.ResponseWriter, body []byte) {
	var req cloudscale.ServerRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeDetail(w, http.StatusBadRequest, "JSON parse error - "+err.Error())
		return
	}
	// Validation errors name the field, as the API's do.
	missing := map[string]string{}
	for field, value := range map[string]string{"name": req.Name, "flavor": req.Flavor, "image": req.Image} {
		if value == "" {
			missing[field] = "This field is required."
		}
	}
	if len(missing) > 0 {
		writeJSON(w, http.StatusBadRequest, missing)
		return
	}
	var tags map[string]string
	if req.Tags != nil {
		tags = *req.Tags
	}
	// Length limits: DRF's max_length message, per field.
	tooLong := map[string][]string{}
	if len(req.Name) > 255 {
		tooLong["name"] = []string{FieldTooLong}
	}
	for k, v := range tags {
		if len(k) > 255 || len(v) > 255 {
			tooLong["tags"] = []string{FieldTooLong}
		}
	}
	if len(tooLong) > 0 {
		writeJSON(w, http.StatusBadRequest, tooLong)
		return
	}
	if req.Zone != "" && !s.knownZone(req.Zone) {
		writeJSON(w, http.StatusBadRequest, map[string][]string{"zone": {fmt.Sprintf("Object with slug=%s does not exist.", req.Zone)}})
		return
	}

	s.mu.Lock()
	zone := req.Zone
	if zone == "" {
		zone = s.defaultZone
	}
	for _, id := range req.ServerGroups {
		g, ok := s.groups[id]
		switch {
		case !ok:
			s.mu.Unlock()
			writeJSON(w, http.StatusBadRequest, map[string][]string{"server_groups": {fmt.Sprintf("Object with uuid=%s does not exist.", id)}})
			return
		case g.Zone.Slug != zone:
			s.mu.Unlock()
			writeJSON(w, http.StatusBadRequest, map[string][]string{"server_groups": {fmt.Sprintf("Server group %s is in zone %s, not %s.", id, g.Zone.Slug, zone)}})
			return
		case s.groupLimit > 0 && len(g.Servers) >= s.groupLimit:
			s.mu.Unlock()
			writeJSON(w, http.StatusBadRequest, map[string][]string{"server_groups": {fmt.Sprintf("Server group %s already holds %d servers, the most it may.", id, s.groupLimit)}})
			return
		}
	}
	srv, problem := s.newServer(req.Name, req.Flavor, req.Image, req.Zone, tags)
	if problem != "" {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]string{"flavor": problem})
		return
	}
	if s.startRunning {
		srv.Status = cloudscale.ServerRunning
	}
	srv.Volumes = []cloudscale.VolumeStub{{Type: "ssd", DevicePath: "/dev/vda", SizeGB: max(req.VolumeSizeGB, 10)}}
	srv.Interfaces = interfacesFor(req)
	for _, id := range req.ServerGroups {
		g := s.groups[id]
		g.Servers = append(g.Servers, cloudscale.ServerStub{HREF: srv.HREF, UUID: srv.UUID})
		srv.ServerGroups = append(srv.ServerGroups, cloudscale.ServerGroupStub{HREF: g.HREF, UUID: g.UUID, Name: g.Name})
	}
	out := *srv
	onCreate := s.onCreate
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
	if onCreate != nil {
		onCreate(out)
	}
}

// newServer adds a server; s.mu must be held. It returns a problem with the
// flavor instead when the flavor is not offered in the zone.
func (s *Server) newServer(name, flavorSlug, image, zone string, tags map[string]string) (*cloudscale.Server, string) {
	if zone == "" {
		zone = s.defaultZone
	}
	idx := slices.IndexFunc(s.flavors, func(f Flavor) bool { return f.Slug == flavorSlug })
	if idx < 0 {
		return nil, fmt.Sprintf("Flavor %q does not exist.", flavorSlug)
	}
	flavor := s.flavors[idx]
	if len(flavor.Zones) > 0 && !slices.Contains(flavor.Zones, zone) {
		return nil, fmt.Sprintf("Flavor %q is not available in zone %q.", flavorSlug, zone)
	}
	uuid := newUUID()
	srv := &cloudscale.Server{
		ZonalResource:  cloudscale.ZonalResource{Zone: cloudscale.Zone{Slug: zone}},
		TaggedResource: cloudscale.TaggedResource{Tags: cloudscale.TagMap{}},
		HREF:           s.URL + "/v1/servers/" + uuid,
		UUID:           uuid,
		Name:           name,
		Status:         "changing",
		Flavor: cloudscale.Flavor{
			Slug:      flavor.Slug,
			Name:      flavor.Name,
			VCPUCount: flavor.VCPUCount,
			MemoryGB:  flavor.MemoryGB,
		},
		Image:     cloudscale.Image{Slug: image, Name: image},
		CreatedAt: s.now().UTC(),
	}
	for k, v := range tags {
		srv.Tags[k] = v
	}
	s.servers[uuid] = srv
	return srv, ""
}

// ServerGroups returns every server group the fake holds, sorted by name.
func (s *Server) ServerGroups() []cloudscale.ServerGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cloudscale.ServerGroup, 0, len(s.groups))
	for _, g := range s.groups {
		c := *g
		c.Servers = slices.Clone(g.Servers)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ServerGroupSpec describes a server group to put into the fake directly.
type ServerGroupSpec struct {
	// UUID of the group; empty for a new random one.
	UUID string
	Name string
	Zone string
	Tags map[string]string
}

// AddServerGroup puts an empty anti-affinity server group into the fake,
// as if made by someone else, and returns its UUID.
func (s *Server) AddServerGroup(spec ServerGroupSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	uuid, name, zone, tags := spec.UUID, spec.Name, spec.Zone, spec.Tags
	if uuid == "" {
		uuid = newUUID()
	}
	if zone == "" {
		zone = s.defaultZone
	}
	g := &cloudscale.ServerGroup{
		ZonalResource:  cloudscale.ZonalResource{Zone: cloudscale.Zone{Slug: zone}},
		TaggedResource: cloudscale.TaggedResource{Tags: cloudscale.TagMap{}},
		HREF:           s.URL + "/v1/server-groups/" + uuid,
		UUID:           uuid, Name: name, Type: "anti-affinity", Servers: []cloudscale.ServerStub{},
	}
	for k, v := range tags {
		g.Tags[k] = v
	}
	s.groups[uuid] = g
	return uuid
}

func (s *Server) leaveGroupsLocked(srv *cloudscale.Server) {
	for _, stub := range srv.ServerGroups {
		if g, ok := s.groups[stub.UUID]; ok {
			g.Servers = slices.DeleteFunc(g.Servers, func(m cloudscale.ServerStub) bool { return m.UUID == srv.UUID })
		}
	}
}

func (s *Server) listServerGroups(w http.ResponseWriter, query url.Values) {
	s.mu.Lock()
	out := []cloudscale.ServerGroup{}
	for _, g := range s.groups {
		if hasTags(g.Tags, query) {
			c := *g
			c.Servers = slices.Clone(g.Servers)
			out = append(out, c)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createServerGroup(w http.ResponseWriter, body []byte) {
	var req cloudscale.ServerGroupRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeDetail(w, http.StatusBadRequest, "JSON parse error - "+err.Error())
		return
	}
	if req.Name == "" {
		writeJSON(w, http.StatusBadRequest, map[string][]string{"name": {"This field is required."}})
		return
	}
	if req.Type != "" && req.Type != "anti-affinity" {
		writeJSON(w, http.StatusBadRequest, map[string][]string{"type": {fmt.Sprintf("%q is not a valid choice.", req.Type)}})
		return
	}
	zone := req.Zone
	if zone == "" {
		zone = s.defaultZone
	}
	if !s.knownZone(zone) {
		writeJSON(w, http.StatusBadRequest, map[string][]string{"zone": {fmt.Sprintf("Object with slug=%s does not exist.", zone)}})
		return
	}
	uuid := newUUID()
	g := &cloudscale.ServerGroup{
		ZonalResource:  cloudscale.ZonalResource{Zone: cloudscale.Zone{Slug: zone}},
		TaggedResource: cloudscale.TaggedResource{Tags: cloudscale.TagMap{}},
		HREF:           s.URL + "/v1/server-groups/" + uuid,
		UUID:           uuid,
		Name:           req.Name,
		Type:           "anti-affinity",
		Servers:        []cloudscale.ServerStub{},
	}
	if req.Tags != nil {
		for k, v := range *req.Tags {
			g.Tags[k] = v
		}
	}
	s.mu.Lock()
	s.groups[uuid] = g
	out := *g
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) getServerGroup(w http.ResponseWriter, uuid string) {
	s.mu.Lock()
	g, ok := s.groups[uuid]
	var out cloudscale.ServerGroup
	if ok {
		out = *g
		out.Servers = slices.Clone(g.Servers)
	}
	s.mu.Unlock()
	if !ok {
		writeDetail(w, http.StatusNotFound, DetailNotFound)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteServerGroup(w http.ResponseWriter, uuid string) {
	s.mu.Lock()
	_, ok := s.groups[uuid]
	delete(s.groups, uuid)
	s.mu.Unlock()
	if !ok {
		writeDetail(w, http.StatusNotFound, DetailNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// knownZone reports whether any flavor is offered in zone (the fake knows
// zones through its flavors).
func (s *Server) knownZone(zone string) bool {
	if zone == s.defaultZone {
		return true
	}
	for _, f := range s.flavors {
		if slices.Contains(f.Zones, zone) {
			return true
		}
	}
	return false
}

func interfacesFor(req cloudscale.ServerRequest) []cloudscale.Interface {
	if req.Interfaces == nil {
		if req.UsePublicNetwork != nil && !*req.UsePublicNetwork {
			return []cloudscale.Interface{}
		}
		return []cloudscale.Interface{{Type: "public"}}
	}
	var out []cloudscale.Interface
	for _, i := range *req.Interfaces {
		if i.Network == "public" {
			out = append(out, cloudscale.Interface{Type: "public"})
			continue
		}
		iface := cloudscale.Interface{Type: "private", Network: cloudscale.NetworkStub{UUID: i.Network}}
		if i.Addresses != nil {
			for _, a := range *i.Addresses {
				iface.Addresses = append(iface.Addresses, cloudscale.Address{Version: 4, Subnet: cloudscale.SubnetStub{UUID: a.Subnet}})
			}
		}
		out = append(out, iface)
	}
	return out
}

func matches(wantMethod, wantPath, method, path string) bool {
	if wantMethod != "" && wantMethod != method {
		return false
	}
	path = strings.TrimSuffix(path, "/")
	switch {
	case wantPath == "":
		return true
	case strings.HasSuffix(wantPath, "/*"):
		return strings.HasPrefix(path, strings.TrimSuffix(wantPath, "*"))
	default:
		return strings.TrimSuffix(wantPath, "/") == path
	}
}

func writeDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, map[string]string{"detail": detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
