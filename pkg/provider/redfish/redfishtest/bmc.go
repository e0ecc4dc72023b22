// Package redfishtest is a fake BMC: a Redfish service (DMTF DSP0266) on an
// httptest TLS server that answers the part of /redfish/v1 claimscale's
// redfish provider uses (the service root, sessions and basic
// authentication, the Systems collection, a ComputerSystem with its power
// state, Reset action, Boot override and VirtualMedia) the way BMCs do,
// with fault injection and inspection, for the provider's tests and for
// end-to-end tests.
//
// The behaviours that matter, and where they come from (commits of the
// public repositories: DMTF/Redfish-Mockup-Server and its public-rackmount1
// mockup, openstack/sushy-tools' emulator, stmcginnis/gofish v0.23.0):
//
//   - The service root /redfish/v1/ answers without credentials; everything
//     else needs them. gofish reads the service root before it authenticates
//     (client.go setupClientWithConfig calls ServiceRoot before
//     setupClientAuth); sushy-tools' auth_basic.py answers 401 with a
//     WWW-Authenticate header for a request without valid credentials.
//   - Sessions: POST /redfish/v1/SessionService/Sessions answers 201 with
//     the session's Location and its X-Auth-Token header
//     (redfishMockupServer.py); the token then stands for the credentials.
//     Basic authentication works on every request besides.
//   - A ComputerSystem (public-rackmount1 Systems/437XR1138R2) carries UUID,
//     PowerState (On, Off, PoweringOn, PoweringOff), ProcessorSummary
//     (Count, LogicalProcessorCount), MemorySummary (TotalSystemMemoryGiB),
//     Boot with BootSourceOverrideTarget@Redfish.AllowableValues, and its
//     Reset action with ResetType@Redfish.AllowableValues.
//   - Reset answers 204 at once, and the power state changes later:
//     sushy-tools' fakedriver.py set_power_state ("hardware actions are not
//     immediate") applies a new state 1 to 11 seconds after the call. Here
//     the state is PoweringOn or PoweringOff for Transition, on the fake's
//     clock. GracefulShutdown needs the operating system's cooperation: a
//     server whose OS ignores the ACPI request (IgnoreGracefulShutdown)
//     stays On until ForceOff.
//   - A ResetType the system does not list is refused with 400 and the Base
//     registry's ActionParameterNotSupported (an assumption in the status
//     code: sushy-tools' NotSupportedError answers 501; gofish refuses such
//     a type before it sends it, when the system lists its allowed types).
//   - Reset during a transition answers 409 Conflict with the Base
//     registry's ResourceInUse: an assumption, from what iDRAC and iLO are
//     reported to do; DSP0266 defines 409 for a request that conflicts with
//     the resource's current state.
//   - Error bodies are {"error": {"code", "message", "@Message.ExtendedInfo"}}
//     (sushy-tools templates/error.json, DSP0266's error response).
//   - Boot: PATCH of Boot.BootSourceOverrideTarget and
//     BootSourceOverrideEnabled (Once, Continuous, Disabled); a target not in
//     the allowable values is 400 PropertyValueNotInList. A Once override
//     is spent by the next power-on (DSP0266's Boot property: "Once" means
//     the next boot only).
//   - VirtualMedia: two devices, Cd (MediaTypes CD, DVD) and Floppy
//     (Floppy, USBStick), sushy-tools' default SUSHY_EMULATOR_VMEDIA_DEVICES
//     (doc/source/admin/emulator.conf); OneMediaDevice leaves only Cd, as
//     its OpenStack driver has. InsertMedia with Image and Inserted
//     answers 204 (controllers/virtual_media.py) once the image is
//     fetched: sushy-tools downloads it at insert (resources/vmedia.py
//     _get_image), and an image it cannot fetch is refused, 400 for a 4xx
//     of the image server and 502 for a 5xx, with a message naming the
//     image's URL ("Failed fetching image from URL …"). The fake keeps what
//     it fetched (Media). EjectMedia clears the device.
//   - InsertMedia on a device that holds an image is refused: the
//     VirtualMedia schema's InsertMedia says a service should reject it
//     unless Image is null, and users are expected to eject first
//     (gofish schemas/virtualmedia.go carries the text). The status, 400
//     with Base's ActionNotSupported, is an assumption.
//   - 503 with Retry-After (RFC 9110 §10.2.3), 401, 403 and 404 are injected
//     with Fail; a BMC that never answers is Hang.
package redfishtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
)

// Power states of a ComputerSystem.
const (
	On          = "On"
	Off         = "Off"
	PoweringOn  = "PoweringOn"
	PoweringOff = "PoweringOff"
)

// System is one ComputerSystem of the fake BMC.
type System struct {
	ID   string
	UUID string
	// CPUs is ProcessorSummary.LogicalProcessorCount; MemoryGiB is
	// MemorySummary.TotalSystemMemoryGiB.
	CPUs      int
	MemoryGiB float64
	// PowerState is On or Off at the start.
	PowerState string
	// ResetTypes are the allowable reset types; unset, those of the DMTF
	// mockup.
	ResetTypes []string
	// IgnoreGracefulShutdown: the OS does not act on the ACPI request.
	IgnoreGracefulShutdown bool

	// What the BMC did, for tests to read with BMC.System.
	BootTarget  string
	BootEnabled string
	// BootedFrom is the override target the last power-on used ("" when
	// none was set).
	BootedFrom string
	// MediaImage is the image in the Cd device.
	MediaImage string
	// Media is what each virtual media device (Cd, Floppy) holds: the
	// image's URL and what the fake fetched from it.
	Media map[string]Media
	// OneMediaDevice: the BMC has only the Cd device.
	OneMediaDevice bool
	Resets         []string

	pending   string
	settledAt time.Time
}

// Media is an inserted virtual media image.
type Media struct {
	Image   string
	Content []byte
}

// mediaDevices are the fake's virtual media devices and their media
// types, as sushy-tools has them by default.
var mediaDevices = []struct {
	id, name string
	types    []string
}{
	{"Cd", "Virtual CD", []string{"CD", "DVD"}},
	{"Floppy", "Virtual Removable Media", []string{"Floppy", "USBStick"}},
}

// Failure is an answer injected for matching requests.
type Failure struct {
	// Method and PathSuffix select requests; empty matches all.
	Method, PathSuffix string
	Status             int
	// RetryAfter is sent with the answer, in seconds, when not zero.
	RetryAfter int
	// Times the failure answers; zero means until cleared.
	Times int
}

// BMC is a fake Redfish service.
type BMC struct {
	Server *httptest.Server
	// Transition is how long a power change takes; on the fake's clock.
	Transition time.Duration

	mu       sync.Mutex
	now      func() time.Time
	username string
	password string
	systems  map[string]*System
	order    []string
	sessions map[string]bool
	failures []*Failure
	hang     chan struct{}
	requests []string
	inFlight int
	maxSeen  int
}

// New starts a fake BMC with the given account and systems.
func New(username, password string, systems ...System) *BMC {
	b := &BMC{
		now: time.Now, username: username, password: password,
		systems: map[string]*System{}, sessions: map[string]bool{},
		Transition: 200 * time.Millisecond,
	}
	for i := range systems {
		system := systems[i]
		if system.ResetTypes == nil {
			system.ResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn", "PushPowerButton"}
		}
		if system.PowerState == "" {
			system.PowerState = Off
		}
		system.Media = map[string]Media{}
		b.systems[system.ID] = &system
		b.order = append(b.order, system.ID)
	}
	b.Server = httptest.NewTLSServer(http.HandlerFunc(b.serve))
	return b
}

// Close stops the server, releasing hung requests.
func (b *BMC) Close() {
	b.mu.Lock()
	if b.hang != nil {
		close(b.hang)
		b.hang = nil
	}
	b.mu.Unlock()
	b.Server.Close()
}

// URL is the endpoint to configure.
func (b *BMC) URL() string { return b.Server.URL }

// SetClock makes the fake read time from now.
func (b *BMC) SetClock(now func() time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = now
}

// Fail injects a failure; it is matched before anything else.
func (b *BMC) Fail(f Failure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = append(b.failures, &f)
}

// ClearFailures removes every injected failure and releases a hang.
func (b *BMC) ClearFailures() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = nil
	if b.hang != nil {
		close(b.hang)
		b.hang = nil
	}
}

// Hang makes every request after the service root wait until
// ClearFailures or Close: a BMC that accepts connections and never
// answers.
func (b *BMC) Hang() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hang == nil {
		b.hang = make(chan struct{})
	}
}

// SetPower changes a system's power as a person at the server would (the
// power button): at once, without a transition.
func (b *BMC) SetPower(id, state string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	system := b.systems[id]
	system.PowerState, system.pending = state, ""
}

// IgnoreGracefulShutdown makes the system's OS ignore the ACPI request.
func (b *BMC) IgnoreGracefulShutdown(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.systems[id].IgnoreGracefulShutdown = true
}

// SetResetTypes sets the system's allowable reset types.
func (b *BMC) SetResetTypes(id string, types ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.systems[id].ResetTypes = types
}

// SetOneMediaDevice leaves the system only its Cd device.
func (b *BMC) SetOneMediaDevice(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.systems[id].OneMediaDevice = true
}

// System returns a copy of a system as it stands now.
func (b *BMC) System(id string) System {
	b.mu.Lock()
	defer b.mu.Unlock()
	system := b.systems[id]
	b.settle(system)
	copied := *system
	copied.Resets = append([]string(nil), system.Resets...)
	copied.Media = map[string]Media{}
	for id, media := range system.Media {
		copied.Media[id] = media
	}
	return copied
}

// Requests are the method and path of every request so far.
func (b *BMC) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// MaxConcurrent is the most requests that were in flight at once.
func (b *BMC) MaxConcurrent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxSeen
}

// settle applies a transition whose time has come.
func (b *BMC) settle(system *System) {
	if system.pending != "" && !b.now().Before(system.settledAt) {
		system.PowerState, system.pending = system.pending, ""
	}
}

func (b *BMC) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	b.mu.Lock()
	b.requests = append(b.requests, r.Method+" "+path)
	b.inFlight++
	b.maxSeen = max(b.maxSeen, b.inFlight)
	hang := b.hang
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()

	if path == "/redfish/v1" || path == "/redfish" {
		writeJSON(w, http.StatusOK, b.serviceRoot())
		return
	}
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
		return
	}
	if b.injected(w, r.Method, path) {
		return
	}
	if r.Method == http.MethodPost && path == "/redfish/v1/SessionService/Sessions" {
		b.createSession(w, r)
		return
	}
	if !b.authenticated(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="Redfish"`)
		writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
		return
	}
	switch {
	case r.Method == http.MethodGet && path == "/redfish/v1/Systems":
		writeJSON(w, http.StatusOK, b.systemCollection())
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/redfish/v1/SessionService/Sessions/"):
		b.mu.Lock()
		delete(b.sessions, strings.TrimPrefix(path, "/redfish/v1/SessionService/Sessions/"))
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(path, "/redfish/v1/Systems/"):
		b.serveSystem(w, r, strings.Split(strings.TrimPrefix(path, "/redfish/v1/Systems/"), "/"))
	default:
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", path))
	}
}

func (b *BMC) injected(w http.ResponseWriter, method, path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, f := range b.failures {
		if (f.Method != "" && f.Method != method) || !strings.HasSuffix(path, f.PathSuffix) {
			continue
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				b.failures = append(b.failures[:i], b.failures[i+1:]...)
			}
		}
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(f.RetryAfter))
		}
		code := map[int]string{
			http.StatusUnauthorized:       "Base.1.8.NoValidSession",
			http.StatusForbidden:          "Base.1.8.InsufficientPrivilege",
			http.StatusNotFound:           "Base.1.8.ResourceMissingAtURI",
			http.StatusConflict:           "Base.1.8.ResourceInUse",
			http.StatusServiceUnavailable: "Base.1.8.ServiceTemporarilyUnavailable",
		}[f.Status]
		if code == "" {
			code = "Base.1.8.GeneralError"
		}
		writeError(w, f.Status, code, http.StatusText(f.Status))
		return true
	}
	return false
}

func (b *BMC) authenticated(r *http.Request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if token := r.Header.Get("X-Auth-Token"); token != "" {
		return b.sessions[token]
	}
	username, password, ok := r.BasicAuth()
	return ok && username == b.username && password == b.password
}

func (b *BMC) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if body.UserName != b.username || body.Password != b.password {
		writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
		return
	}
	token := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s-%d", body.UserName, time.Now().UnixNano()))
	b.mu.Lock()
	b.sessions[token] = true
	b.mu.Unlock()
	location := "/redfish/v1/SessionService/Sessions/" + token
	w.Header().Set("Location", location)
	w.Header().Set("X-Auth-Token", token)
	writeJSON(w, http.StatusCreated, map[string]any{"@odata.id": location, "Id": token, "UserName": body.UserName})
}

func (b *BMC) serviceRoot() map[string]any {
	return map[string]any{
		"@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "@odata.id": "/redfish/v1/", "Id": "RootService",
		"Name": "Root Service", "RedfishVersion": "1.17.0", "UUID": "92384634-2938-2342-8820-489239905423",
		"Systems":        map[string]string{"@odata.id": "/redfish/v1/Systems"},
		"SessionService": map[string]string{"@odata.id": "/redfish/v1/SessionService"},
		"Links":          map[string]any{"Sessions": map[string]string{"@odata.id": "/redfish/v1/SessionService/Sessions"}},
	}
}

func (b *BMC) systemCollection() map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var members []map[string]string
	for _, id := range b.order {
		members = append(members, map[string]string{"@odata.id": "/redfish/v1/Systems/" + id})
	}
	return map[string]any{
		"@odata.type": "#ComputerSystemCollection.ComputerSystemCollection", "@odata.id": "/redfish/v1/Systems",
		"Name": "Computer System Collection", "Members@odata.count": len(members), "Members": members,
	}
}

func (b *BMC) serveSystem(w http.ResponseWriter, r *http.Request, parts []string) {
	b.mu.Lock()
	system := b.systems[parts[0]]
	b.mu.Unlock()
	if system == nil {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	rest := strings.Join(parts[1:], "/")
	switch {
	case rest == "" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, b.systemJSON(system))
	case rest == "" && r.Method == http.MethodPatch:
		b.patchSystem(w, r, system)
	case rest == "Actions/ComputerSystem.Reset" && r.Method == http.MethodPost:
		b.reset(w, r, system)
	case rest == "VirtualMedia" && r.Method == http.MethodGet:
		var members []map[string]string
		for _, device := range b.devices(system) {
			members = append(members, map[string]string{"@odata.id": "/redfish/v1/Systems/" + system.ID + "/VirtualMedia/" + device})
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"@odata.id": "/redfish/v1/Systems/" + system.ID + "/VirtualMedia", "Name": "Virtual Media Services",
			"Members": members, "Members@odata.count": len(members),
		})
	case strings.HasPrefix(rest, "VirtualMedia/") && slices.Contains(b.devices(system), mediaDevice(rest)):
		b.virtualMedia(w, r, system, mediaDevice(rest), strings.TrimPrefix(rest, "VirtualMedia/"+mediaDevice(rest)))
	default:
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
	}
}

var bootTargets = []string{"None", "Pxe", "Cd", "Usb", "Hdd", "BiosSetup", "UefiHttp"}

func (b *BMC) systemJSON(system *System) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(system)
	state := system.PowerState
	if system.pending == On {
		state = PoweringOn
	} else if system.pending == Off {
		state = PoweringOff
	}
	base := "/redfish/v1/Systems/" + system.ID
	bootEnabled := system.BootEnabled
	if bootEnabled == "" {
		bootEnabled = "Disabled"
	}
	bootTarget := system.BootTarget
	if bootTarget == "" {
		bootTarget = "None"
	}
	return map[string]any{
		"@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "@odata.id": base, "Id": system.ID,
		"Name": system.ID, "SystemType": "Physical", "UUID": system.UUID, "PowerState": state,
		"Status":           map[string]string{"State": "Enabled", "Health": "OK"},
		"ProcessorSummary": map[string]any{"Count": 2, "LogicalProcessorCount": system.CPUs},
		"MemorySummary":    map[string]any{"TotalSystemMemoryGiB": system.MemoryGiB},
		"Boot": map[string]any{
			"BootSourceOverrideEnabled": bootEnabled, "BootSourceOverrideTarget": bootTarget,
			"BootSourceOverrideTarget@Redfish.AllowableValues": bootTargets,
		},
		"VirtualMedia": map[string]string{"@odata.id": base + "/VirtualMedia"},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": base + "/Actions/ComputerSystem.Reset", "ResetType@Redfish.AllowableValues": system.ResetTypes,
		}},
	}
}

// mediaDevice is the device of a path VirtualMedia/<device>/….
func mediaDevice(rest string) string {
	device, _, _ := strings.Cut(strings.TrimPrefix(rest, "VirtualMedia/"), "/")
	return device
}

// devices are the ids of the system's virtual media devices.
func (b *BMC) devices(system *System) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if system.OneMediaDevice {
		return []string{mediaDevices[0].id}
	}
	ids := make([]string, 0, len(mediaDevices))
	for _, device := range mediaDevices {
		ids = append(ids, device.id)
	}
	return ids
}

// virtualMedia answers a virtual media device and its actions.
func (b *BMC) virtualMedia(w http.ResponseWriter, r *http.Request, system *System, device, rest string) {
	switch {
	case rest == "" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, b.mediaJSON(system, device))
	case rest == "/Actions/VirtualMedia.InsertMedia" && r.Method == http.MethodPost:
		var body struct {
			Image    string
			Inserted *bool
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Image == "" {
			writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.")
			return
		}
		b.mu.Lock()
		held := system.Media[device].Image
		b.mu.Unlock()
		if held != "" {
			writeError(w, http.StatusBadRequest, "Base.1.8.ActionNotSupported", fmt.Sprintf("The action VirtualMedia.InsertMedia is not supported by the resource: device %s holds an image; eject it first.", device))
			return
		}
		content, status, err := fetchImage(r.Context(), body.Image)
		if err != nil {
			writeError(w, status, "Base.1.8.GeneralError", fmt.Sprintf("Failed fetching image from URL %s: %v", body.Image, err))
			return
		}
		b.mu.Lock()
		system.Media[device] = Media{Image: body.Image, Content: content}
		if device == mediaDevices[0].id {
			system.MediaImage = body.Image
		}
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case rest == "/Actions/VirtualMedia.EjectMedia" && r.Method == http.MethodPost:
		b.mu.Lock()
		delete(system.Media, device)
		if device == mediaDevices[0].id {
			system.MediaImage = ""
		}
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
	}
}

// fetchImage downloads an image at insert, as sushy-tools does; the
// status is the BMC's answer when it cannot.
func fetchImage(ctx context.Context, image string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, image, nil)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 400 {
		status := http.StatusBadRequest
		if resp.StatusCode >= 500 {
			status = http.StatusBadGateway
		}
		return nil, status, fmt.Errorf("Cannot download virtual media: got error %d from the server", resp.StatusCode)
	}
	content, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	return content, 0, nil
}

func (b *BMC) mediaJSON(system *System, device string) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	base := "/redfish/v1/Systems/" + system.ID + "/VirtualMedia/" + device
	var name string
	var types []string
	for _, known := range mediaDevices {
		if known.id == device {
			name, types = known.name, known.types
		}
	}
	image := system.Media[device].Image
	return map[string]any{
		"@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia", "@odata.id": base, "Id": device, "Name": name,
		"MediaTypes": types, "Image": image, "Inserted": image != "",
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]string{"target": base + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  map[string]string{"target": base + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
}

func (b *BMC) patchSystem(w http.ResponseWriter, r *http.Request, system *System) {
	var body struct {
		Boot *struct {
			BootSourceOverrideTarget  string
			BootSourceOverrideEnabled string
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if body.Boot == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if body.Boot.BootSourceOverrideTarget != "" && !slices.Contains(bootTargets, body.Boot.BootSourceOverrideTarget) {
		writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", fmt.Sprintf("The value %s for the property BootSourceOverrideTarget is not in the list of acceptable values.", body.Boot.BootSourceOverrideTarget))
		return
	}
	b.mu.Lock()
	if body.Boot.BootSourceOverrideTarget != "" {
		system.BootTarget = body.Boot.BootSourceOverrideTarget
	}
	if body.Boot.BootSourceOverrideEnabled != "" {
		system.BootEnabled = body.Boot.BootSourceOverrideEnabled
	}
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) reset(w http.ResponseWriter, r *http.Request, system *System) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Contains(system.ResetTypes, body.ResetType) {
		writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterNotSupported", fmt.Sprintf("The parameter ResetType for the action ComputerSystem.Reset is not supported on the target resource: %s.", body.ResetType))
		return
	}
	b.settle(system)
	if system.pending != "" {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "The change to the requested resource failed because the resource is in use or in transition.")
		return
	}
	system.Resets = append(system.Resets, body.ResetType)
	var next string
	switch body.ResetType {
	case "On", "ForceOn":
		next = On
	case "ForceOff":
		next = Off
	case "GracefulShutdown":
		if system.IgnoreGracefulShutdown {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next = Off
	case "PushPowerButton":
		next = map[string]string{On: Off, Off: On}[system.PowerState]
	default:
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if system.PowerState != next {
		if next == On {
			// A one-time override is spent by this boot.
			system.BootedFrom = ""
			if system.BootEnabled == "Once" || system.BootEnabled == "Continuous" {
				system.BootedFrom = system.BootTarget
			}
			if system.BootEnabled == "Once" {
				system.BootEnabled, system.BootTarget = "Disabled", "None"
			}
		}
		system.pending, system.settledAt = next, b.now().Add(b.Transition)
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": code, "message": message,
		"@Message.ExtendedInfo": []map[string]any{{"@odata.type": "#Message.v1_1_1.Message", "MessageId": code, "Message": message, "Severity": "Warning"}},
	}})
}
