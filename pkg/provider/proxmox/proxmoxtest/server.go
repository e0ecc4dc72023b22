// Package proxmoxtest is a fake Proxmox VE API on an httptest TLS server. It
// answers the part of /api2/json that claimscale's proxmox provider uses
// (nodes, guests, clone, create, config, start, shutdown, stop, destroy,
// tasks, login tickets and API tokens, PCI resource mappings) the way
// Proxmox does, with fault injection and inspection, for the provider's
// tests and for end-to-end tests.
//
// The behaviours that matter, and where they come from (commits of the
// public repositories: pve-manager 14a22df3, qemu-server e6352be6,
// pve-common f665029e, pve-cluster 7091d92e, pve-guest-common 4a8f6cbf):
//
//   - /cluster/resources?type=vm lags. pve-manager PVE/API2/Cluster.pm
//     (resources) builds each guest with PVE::API2Tools::extract_vm_stats
//     from PVE::Cluster::rrd_dump(), the data pvestatd publishes every
//     $updatetime = 10 seconds (PVE/Service/pvestatd.pm): name, status,
//     template, maxcpu, maxmem and uptime come from there, and a guest with
//     no published data yet has status "unknown" and no name. Only lock and
//     tags are read fresh from the config (get_guest_config_properties([qw(lock
//     tags)])). SetStatsLag turns the lag on; without it the fake publishes
//     on every request (a test convenience, not Proxmox's behaviour).
//   - Task exit status: pve-common src/PVE/RESTEnvironment.pm (fork_worker)
//     ends a task that logged warnings with "TASK WARNINGS: N" and exit code
//     0, and src/PVE/UPID.pm read_status turns that into the exitstatus
//     "WARNINGS: N", which status_is_error counts as success, like "OK". A
//     task whose worker died (a node crash) has a log without a TASK line:
//     read_status answers "unexpected status".
//   - Clone (qemu-server src/PVE/API2/Qemu.pm clone_vm): the early check
//     refuses a newid whose config exists on the node the call runs on
//     ("unable to create VM N: config file already exists"), synchronously.
//     The worker first writes "# qmclone temporary file\nlock: clone\n"
//     (a config with a lock and no name or description) with
//     PVE::Tools::file_set_contents; when the ID exists on another node,
//     pmxcfs refuses the rename and the task fails with "close (rename)
//     atomic file '/etc/pve/nodes/<node>/qemu-server/<id>.conf' failed: File
//     exists" (pve-common src/PVE/File.pm). The name and description are
//     written only with the first copied disk, the lock goes with the last.
//     Every option of the template but disks, nets, snapshots and unused
//     volumes is copied as is, so the clone carries the template's meta
//     (with its ctime) and its protection flag. A worker that dies mid-clone
//     leaves the temporary config, locked, forever (TaskFault.Crash).
//     The pool parameter must name an existing pool (check_pool_exist).
//   - Locks: PVE::AbstractConfig::check_lock (pve-guest-common) refuses
//     config, start, stop and destroy on a locked VM: "VM is locked (clone)";
//     only root@pam may pass skiplock.
//   - Protection: destroy_vm calls check_protection, which dies with "can't
//     remove VM N - protection mode enabled".
//   - Tags: assert_tag_permissions (pve-guest-common src/PVE/GuestHelpers.pm)
//     checks every added or removed tag against datacenter.cfg's
//     user-tag-access (pve-cluster src/PVE/DataCenterConfig.pm: user-allow
//     none, list, existing or free, and user-allow-list) for a user without
//     Sys.Modify on /, and refuses with 403 "Permission check failed (/,
//     Sys.Modify for modifying tag 'T')". Tags are stored sorted, unique
//     and lower-cased (get_unique_tags, tag-style case-sensitive unset).
//   - Power calls check nothing themselves (qemu-server commit 4d81a1d3,
//     2011, "dont raise errors if not needed", dropped the API's running
//     checks): POST status/start, status/stop and status/shutdown always
//     answer a UPID (src/PVE/API2/Qemu.pm vm_start, vm_stop, vm_shutdown)
//     and the worker decides. It takes the VM's flock first
//     (PVE::AbstractConfig::lock_config, 10 s; pve-common
//     PVE::Tools::lock_file_full fails with "can't lock file
//     '/var/lock/qemu-server/lock-N.conf' - got timeout"), which a running
//     shutdown holds for as long as it waits for the guest. No config lock
//     (the lock option) is set by these tasks; a config lock set by
//     something else fails them: "VM is locked (backup)".
//   - Start (src/PVE/QemuServer.pm vm_start): a running VM fails the task
//     with "VM N already running"; when QEMU exits, vm_start_nolock dies
//     "start failed: QEMU exited with code 1", and QEMU's stderr, which
//     fork_worker sends to the task log (pve-common RESTEnvironment.pm),
//     says why. QEMU's message when it cannot allocate the guest's RAM is
//     "cannot set up guest memory '<region>': Cannot allocate memory"
//     (QEMU's RAM block allocation, ram_block_add, error_setg_errno with
//     ENOMEM); the region name pc.ram and the program-name prefix kvm: are
//     an assumption (what a Proxmox host's i440fx VM would print). When a
//     host's memory runs out for a
//     start (Linux overcommit decides, not the free memory Proxmox shows)
//     is an assumption: the fake refuses a start beyond
//     Node.StartableMemoryMiB. A start that succeeds after log_warn (the
//     deprecated machine version warning at the end of vm_start_nolock)
//     ends "WARNINGS: N"; TaskFault{ExitStatus: "WARNINGS: 1"} makes one.
//   - Shutdown (vm_shutdown → vm_stop → _do_vm_stop): a VM not running is
//     done, OK. Otherwise QEMU is asked to power down (system_powerdown,
//     or the guest agent's guest-shutdown) and the worker waits the
//     timeout parameter's seconds (default 60, or the startup order's
//     down value); a guest still running then fails the task with "VM
//     quit/powerdown failed - got timeout", unless forceStop=1, which
//     kills it with a plain warn "VM still running - terminating now with
//     SIGTERM" (exit status OK: only log_warn counts toward WARNINGS, and
//     pvedaemon's __WARN__ handler only prints). A paused VM fails with
//     "VM is paused - cannot shutdown" (not modelled). The fake does not
//     wait the seconds: a task ends after its polls (SetTaskPolls,
//     TaskFault.Polls).
//   - Stop (vm_stop): a VM not running is done; else QEMU is killed.
//     overrule-shutdown=1 aborts the VM's running qmshutdown tasks first
//     (pve-guest-common GuestHelpers abort_guest_tasks; the aborted worker
//     dies "received interrupt", RESTEnvironment's SIGTERM handler); the
//     parameter exists since qemu-server 8.1.2 (commit 50b5893b, Proxmox
//     VE 8.2), and older versions refuse it with 400 "Parameter
//     verification failed." (JSONSchema: "property is not defined in
//     schema and the schema does not allow additional properties"); see
//     WithoutOverruleShutdown.
//   - Upload (pve-manager PVE/API2/Storage/Status.pm upload): a multipart
//     POST to /nodes/{node}/storage/{storage}/upload with content and
//     filename fields and the file; content must be iso (or vztmpl, import)
//     and the storage must allow that content, else 400 "storage 'S' does
//     not support 'iso' content"; the file becomes the volume
//     S:iso/<filename>; the task is imgcopy. Deleting it is DELETE
//     /nodes/{node}/storage/{storage}/content/{volume}; listing a
//     storage's volumes is GET /nodes/{node}/storage/{storage}/content
//     with an optional content filter, each volume with its volid (pve-
//     storage PVE/API2/Storage/Content.pm index).
//   - PCI resource mappings (pve-guest-common src/PVE/Mapping/PCI.pm,
//     listed by pve-manager PVE/API2/Cluster/Mapping/PCI.pm): GET
//     /cluster/mapping/pci lists each mapping with its map, one property
//     string per device and node (node, path, id, iommugroup,
//     subsystem-id). A VM's hostpciN: mapping=M[,options] is checked
//     against qemu-server's pve-qm-hostpci format when it is set (400
//     "Parameter verification failed."), and resolved only when the VM
//     starts: every entry of M for the VM's node is one alternative, each
//     hostpciN gets one no other VM holds, and the start fails with
//     qemu-server's message when the node has no entry ("PCI device
//     mapping not found for 'M'") or no free one ("could not find a free
//     device for 'hostpciN'", "PCI device 'ID' already in use by VMID
//     'V'"). A device is held while its VM starts or runs; a stopped VM
//     holds none (vm_stop_cleanup drops its reservations, and a leftover
//     reservation of a VM not running is taken over). See choosePCI.
//
// Authentication follows pveproxy: an API token header, or a ticket cookie
// with a CSRF token for requests that change something.
package proxmoxtest

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Node is a Proxmox node of the fake cluster.
type Node struct {
	Name    string
	Offline bool
	CPUs    int
	// MemoryMiB is the node's memory; UsedMemoryMiB what it uses besides
	// its running VMs, which are added to it.
	MemoryMiB     int64
	UsedMemoryMiB int64
	// CPULoad is the share of the CPUs in use, 0 to 1.
	CPULoad float64
	// StartableMemoryMiB is the memory QEMU can really get on the node
	// (page cache, a ZFS ARC or hugepages may hold what the node reports
	// free); a start beyond it fails. 0 means MemoryMiB. An assumption:
	// the kernel's overcommit rules decide this on a real host.
	StartableMemoryMiB int64
}

// VM is a guest of the fake cluster. Config holds its options as Proxmox
// stores them (cores, memory in MiB, tags, description, net0, …); the name
// is kept in Config["name"] as well.
type VM struct {
	VMID     int
	Node     string
	Name     string
	Template bool
	// Status is "running" or "stopped".
	Status string
	// Lock is set while Proxmox works on the VM: "clone", "create",
	// "destroyed".
	Lock   string
	Config map[string]string
	// Pool is the resource pool the VM was added to.
	Pool string
	// IgnoresShutdown is a guest that does not act on the ACPI power
	// button (no acpid, hung, still booting): a shutdown times out.
	IgnoresShutdown bool
	// PCI are the host PCI devices the VM holds while it starts or runs
	// (qemu-server's reservations, see choosePCI); set by the fake.
	PCI []string
}

// Tags returns the VM's tags.
func (vm VM) Tags() []string { return splitTags(vm.Config["tags"]) }

// Request is one request the server received, below /api2/json.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	// Params are the query, form or JSON parameters, as strings; a password
	// is replaced by "[redacted]".
	Params map[string]string
	Header http.Header
}

// Fault changes the answer to matching requests.
type Fault struct {
	// Method matches the request method; empty matches all.
	Method string
	// Path is a regular expression matched against the path below
	// /api2/json; empty matches all.
	Path string
	// Times is how many matching requests the fault hits; 0 means one.
	Times int
	// Status, when set, is answered instead of the real answer, with
	// Message as Proxmox's reason (in the status line, as Proxmox sends it).
	Status  int
	Message string
	// Before runs before the request is answered, without the server's
	// lock: it may change the server, e.g. add a VM that takes an ID.
	Before func()
	// LoseResponse handles the request and then drops the connection
	// without answering, as a proxy or network failure would: the change
	// is made, the client never learns of it.
	LoseResponse bool

	re *regexp.Regexp
}

// TaskFault changes how matching tasks end.
type TaskFault struct {
	// Type matches the task type (qmclone, qmcreate, qmconfig, qmstart,
	// qmstop, qmdestroy); empty matches all.
	Type string
	// ExitStatus the task ends with; empty means "OK".
	ExitStatus string
	// Polls is how many status polls answer "running" before the task
	// stops; 0 means the server's default.
	Polls int
	// Times is how many matching tasks the fault hits; 0 means one.
	Times int
	// Crash makes the worker die (its node crashed): the task ends with
	// "unexpected status" and a clone keeps its temporary config, locked.
	Crash bool
}

// Storage is a storage of the fake cluster, available on every node.
type Storage struct {
	Name string
	// Content lists the content types the storage allows: images, iso,
	// vztmpl, snippets, import.
	Content []string
}

// UserTagAccess is datacenter.cfg's user-tag-access for users without
// Sys.Modify on /, which the API token and user of the fake are.
type UserTagAccess struct {
	// Allow is none, list, existing or free (the default).
	Allow string
	// List is user-allow-list.
	List []string
}

// Server is the fake Proxmox VE API.
type Server struct {
	// URL is the server's base URL, https://127.0.0.1:PORT.
	URL string

	srv *httptest.Server

	mu          sync.Mutex
	nodes       []Node
	vms         map[int]*VM
	tasks       map[string]*task
	faults      []*Fault
	taskFaults  []*TaskFault
	requests    []Request
	taskPolls   int
	tokenID     string
	tokenSecret string
	username    string
	password    string
	tickets     map[string]string // ticket → CSRF token
	pid         int

	// statsClock and statsInterval make /cluster/resources lag as pvestatd
	// does; a zero interval publishes on every request.
	statsClock    clock.PassiveClock
	statsInterval time.Duration
	lastPublish   time.Time
	published     map[int]vmStats

	// faultsHit and taskFaultsHit count the injected faults that matched a
	// request or a task; idConflicts the clone and create calls refused
	// because their VM ID was taken.
	faultsHit, taskFaultsHit, idConflicts int

	tagAccess UserTagAccess
	// noOverruleShutdown is a qemu-server before 8.1.2 (Proxmox VE 8.2),
	// whose stop call has no overrule-shutdown parameter.
	noOverruleShutdown bool
	pools              map[string]bool
	storages           map[string]Storage
	// pciMappings are the cluster PCI resource mappings by ID.
	pciMappings map[string]*PCIMapping
	// volumes are uploaded files by volume ID (storage:iso/name).
	volumes map[string][]byte
}

// vmStats is what pvestatd publishes about a guest.
type vmStats struct {
	name     string
	status   string
	template bool
	maxcpu   int64
	maxmem   int64
}

type task struct {
	upid      string
	node      string
	typ       string
	id        string
	user      string
	started   time.Time
	pollsLeft int
	exit      string
	crash     bool
	log       []string
	done      bool
	finish    func(ok bool)
}

// NewServer starts a fake API on 127.0.0.1 with the given nodes (one node
// "pve" with 16 CPUs and 64 GiB when none are given). It accepts every
// request until SetAPIToken or SetUser asks for credentials. Close it when
// done.
func NewServer(nodes ...Node) *Server {
	if len(nodes) == 0 {
		nodes = []Node{{Name: "pve", CPUs: 16, MemoryMiB: 64 << 10, UsedMemoryMiB: 2 << 10}}
	}
	s := &Server{
		nodes:     slices.Clone(nodes),
		vms:       map[int]*VM{},
		tasks:     map[string]*task{},
		tickets:   map[string]string{},
		taskPolls: 1,
		pid:       0x1000,
		published: map[int]vmStats{},
		pools:     map[string]bool{},
		storages:  map[string]Storage{},
		volumes:   map[string][]byte{},

		pciMappings: map[string]*PCIMapping{},
	}
	s.srv = httptest.NewUnstartedServer(s)
	// Clients that refuse the certificate are part of the tests; their
	// handshake errors are not news.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Endpoint is the API's base URL, as spec.proxmox.endpoint takes it.
func (s *Server) Endpoint() string { return s.URL + "/api2/json" }

// CACertPEM is the server certificate's CA in PEM, for the ca.crt key of a
// credentials Secret.
func (s *Server) CACertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// CertPool holds the server certificate's CA.
func (s *Server) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(s.srv.Certificate())
	return pool
}

// SetAPIToken makes the server require this API token (or a ticket of the
// user set with SetUser).
func (s *Server) SetAPIToken(tokenID, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenID, s.tokenSecret = tokenID, secret
}

// SetUser makes the server require a login ticket of this user (or the API
// token set with SetAPIToken).
func (s *Server) SetUser(username, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.username, s.password = username, password
}

// ExpireTickets invalidates every login ticket, as their two hours passing
// would.
func (s *Server) ExpireTickets() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tickets)
}

// SetTaskPolls sets how many status polls a task answers "running" before
// it stops (1 unless set).
func (s *Server) SetTaskPolls(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskPolls = n
}

// SetStatsLag makes /cluster/resources show guests' names, status,
// template flag and size as they were when they were last published, every
// interval of clk, as pvestatd does (every 10 s in Proxmox).
func (s *Server) SetStatsLag(clk clock.PassiveClock, interval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statsClock, s.statsInterval = clk, interval
	s.publishLocked()
}

// PublishStats publishes the guests' stats now, as a pvestatd round does.
func (s *Server) PublishStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked()
}

func (s *Server) publishLocked() {
	s.published = map[int]vmStats{}
	for id, vm := range s.vms {
		s.published[id] = statsOf(vm)
	}
	if s.statsClock != nil {
		s.lastPublish = s.statsClock.Now()
	}
}

func (s *Server) maybePublish() {
	if s.statsInterval <= 0 || s.statsClock == nil {
		s.publishLocked()
		return
	}
	if s.statsClock.Since(s.lastPublish) >= s.statsInterval {
		s.publishLocked()
	}
}

func statsOf(vm *VM) vmStats {
	return vmStats{
		name: vm.Config["name"], status: vm.Status, template: vm.Config["template"] == "1",
		maxcpu: atoi(vm.Config["cores"], 1) * atoi(vm.Config["sockets"], 1),
		maxmem: atoi(vm.Config["memory"], 512) * mib,
	}
}

// SetUserTagAccess sets datacenter.cfg's user-tag-access.
func (s *Server) SetUserTagAccess(a UserTagAccess) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tagAccess = a
}

// WithoutOverruleShutdown makes the server a Proxmox VE older than 8.2
// (qemu-server before 8.1.2, commit 50b5893b "fix #4474"), whose stop call
// refuses the overrule-shutdown parameter as JSONSchema refuses any
// parameter it does not define (400).
func (s *Server) WithoutOverruleShutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noOverruleShutdown = true
}

// AddPool adds a resource pool.
func (s *Server) AddPool(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools[name] = true
}

// AddStorage adds a storage, or replaces the one of the same name.
func (s *Server) AddStorage(st Storage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.storages[st.Name] = st
}

// Volumes returns the uploaded files by volume ID.
func (s *Server) Volumes() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.volumes)
}

// SetNode adds a node or replaces the one of the same name.
func (s *Server) SetNode(n Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.nodes {
		if s.nodes[i].Name == n.Name {
			s.nodes[i] = n
			return
		}
	}
	s.nodes = append(s.nodes, n)
}

// AddVM adds a guest, e.g. a template to clone or someone else's VM. Its
// status defaults to stopped, and Name goes into its config.
func (s *Server) AddVM(vm VM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := vm
	c.Config = maps.Clone(vm.Config)
	if c.Config == nil {
		c.Config = map[string]string{}
	}
	if c.Name != "" {
		c.Config["name"] = c.Name
	}
	if c.Status == "" {
		c.Status = "stopped"
	}
	if c.Template {
		c.Config["template"] = "1"
	}
	if _, ok := c.Config["meta"]; !ok {
		c.Config["meta"] = fmt.Sprintf("creation-qemu=9.0.2,ctime=%d", time.Now().Unix())
	}
	c.PCI = nil
	if c.Status == "running" {
		// A running guest holds the devices its start reserved.
		ids, failed := s.choosePCI(&c)
		if failed != "" {
			panic(fmt.Sprintf("proxmoxtest: running VM %d cannot hold its PCI devices: %s", c.VMID, failed))
		}
		c.PCI = ids
	}
	s.vms[c.VMID] = &c
	// A guest added this way has been there for a while: pvestatd knows it.
	s.published[c.VMID] = statsOf(&c)
}

// AddTemplate adds a cloud-init template VM to clone: 2 cores, 2 GiB, a
// NIC on vmbr0, a disk and a cloud-init drive on local-lvm.
func (s *Server) AddTemplate(vmid int, node, name string) {
	s.AddVM(VM{VMID: vmid, Node: node, Name: name, Template: true, Config: map[string]string{
		"cores": "2", "memory": "2048", "ostype": "l26", "agent": "1",
		"net0":  "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"scsi0": fmt.Sprintf("local-lvm:base-%d-disk-0,size=20G", vmid),
		"ide2":  fmt.Sprintf("local-lvm:vm-%d-cloudinit,media=cdrom", vmid),
	}})
}

// RemoveVM deletes a guest behind the provider's back.
func (s *Server) RemoveVM(vmid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.vms, vmid)
}

// VM returns a copy of a guest.
func (s *Server) VM(vmid int) (VM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[vmid]
	if !ok {
		return VM{}, false
	}
	return vm.copy(), true
}

// VMs returns copies of all guests, by VM ID.
func (s *Server) VMs() []VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VM, 0, len(s.vms))
	for _, vm := range s.vms {
		out = append(out, vm.copy())
	}
	slices.SortFunc(out, func(a, b VM) int { return a.VMID - b.VMID })
	return out
}

// VMByName returns a copy of the first guest with the name.
func (s *Server) VMByName(name string) (VM, bool) {
	for _, vm := range s.VMs() {
		if vm.Name == name {
			return vm, true
		}
	}
	return VM{}, false
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// RequestsTo returns the requests with the method (empty: any) whose path
// matches the regular expression.
func (s *Server) RequestsTo(method, pathPattern string) []Request {
	re := regexp.MustCompile(pathPattern)
	var out []Request
	for _, r := range s.Requests() {
		if (method == "" || r.Method == method) && re.MatchString(r.Path) {
			out = append(out, r)
		}
	}
	return out
}

// InjectFault adds a fault; faults are matched in the order they were added.
func (s *Server) InjectFault(f Fault) {
	c := f
	c.re = regexp.MustCompile(f.Path)
	if c.Times <= 0 {
		c.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &c)
}

// FailTask makes matching tasks end differently.
func (s *Server) FailTask(f TaskFault) {
	c := f
	if c.Times <= 0 {
		c.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskFaults = append(s.taskFaults, &c)
}

func (vm *VM) copy() VM {
	c := *vm
	c.Config = maps.Clone(vm.Config)
	c.PCI = slices.Clone(vm.PCI)
	c.Name = vm.Config["name"]
	return c
}

// apiError is an answer other than 200: Proxmox puts the reason in the
// status line.
type apiError struct {
	code int
	msg  string
}

func errorf(code int, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

type route struct {
	method  string
	pattern *regexp.Regexp
	handle  func(s *Server, c *call) (any, *apiError)
}

// call is one request being answered, with the server's lock held.
type call struct {
	r      *http.Request
	args   []string
	params map[string]string
	// file is the file part of a multipart upload.
	file []byte
	user string
}

var routes = []route{
	{http.MethodGet, regexp.MustCompile(`^/version$`), (*Server).version},
	{http.MethodGet, regexp.MustCompile(`^/cluster/resources$`), (*Server).clusterResources},
	{http.MethodGet, regexp.MustCompile(`^/cluster/nextid$`), (*Server).nextID},
	{http.MethodGet, regexp.MustCompile(`^/cluster/status$`), (*Server).clusterStatus},
	{http.MethodGet, regexp.MustCompile(`^/cluster/mapping/pci$`), (*Server).listPCIMappings},
	{http.MethodGet, regexp.MustCompile(`^/cluster/mapping/pci/([^/]+)$`), (*Server).getPCIMapping},
	{http.MethodGet, regexp.MustCompile(`^/nodes$`), (*Server).listNodes},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/status$`), (*Server).nodeStatus},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/tasks/([^/]+)/status$`), (*Server).taskStatus},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/tasks/([^/]+)/log$`), (*Server).taskLog},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/storage/([^/]+)/upload$`), (*Server).upload},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/storage/([^/]+)/content$`), (*Server).listVolumes},
	{http.MethodDelete, regexp.MustCompile(`^/nodes/([^/]+)/storage/([^/]+)/content/(.+)$`), (*Server).deleteVolume},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/qemu$`), (*Server).listQemu},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/qemu$`), (*Server).createVM},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/clone$`), (*Server).cloneVM},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/config$`), (*Server).getConfig},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/config$`), (*Server).postConfig},
	{http.MethodPut, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/config$`), (*Server).putConfig},
	{http.MethodGet, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/status/current$`), (*Server).currentStatus},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/status/start$`), (*Server).startVM},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/status/stop$`), (*Server).stopVM},
	{http.MethodPost, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)/status/shutdown$`), (*Server).shutdownVM},
	{http.MethodDelete, regexp.MustCompile(`^/nodes/([^/]+)/qemu/(\d+)$`), (*Server).destroyVM},
}

// ServeHTTP answers one request of the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/api2/json")
	if !ok {
		writeError(w, errorf(http.StatusNotFound, "Not Found"))
		return
	}
	params, file, err := readParams(r)
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, "unable to parse parameters: %v", err))
		return
	}
	s.record(r, path, params)

	if r.Method == http.MethodPost && path == "/access/ticket" {
		data, failed := s.login(params)
		writeAnswer(w, data, failed)
		return
	}
	user, failed := s.authenticate(r)
	if failed != nil {
		writeError(w, failed)
		return
	}
	fault := s.fault(r.Method, path)
	if fault != nil {
		if fault.Before != nil {
			fault.Before()
		}
		if fault.Status != 0 {
			writeError(w, errorf(fault.Status, "%s", orDefault(fault.Message, http.StatusText(fault.Status))))
			return
		}
	}

	data, failed := s.route(r, path, params, file, user)
	if fault != nil && fault.LoseResponse {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	}
	writeAnswer(w, data, failed)
}

func (s *Server) route(r *http.Request, path string, params map[string]string, file []byte, user string) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rt := range routes {
		m := rt.pattern.FindStringSubmatch(path)
		if m == nil {
			continue
		}
		if rt.method != r.Method {
			continue
		}
		return rt.handle(s, &call{r: r, args: m[1:], params: params, file: file, user: user})
	}
	return nil, errorf(http.StatusNotImplemented, "Method '%s %s' not implemented", r.Method, path)
}

func (s *Server) record(r *http.Request, path string, params map[string]string) {
	p := maps.Clone(params)
	if _, ok := p["password"]; ok {
		p["password"] = "[redacted]"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: path, Query: r.URL.Query(), Params: p, Header: r.Header.Clone()})
}

// fault returns the first live fault matching the request, using it up.
func (s *Server) fault(method, path string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if (f.Method == "" || f.Method == method) && f.re.MatchString(path) {
			s.faultsHit++
			f.Times--
			if f.Times <= 0 {
				s.faults = slices.Delete(s.faults, i, i+1)
			}
			return f
		}
	}
	return nil
}

// authenticate checks the API token or the ticket (and, for requests that
// change something, the CSRF token) as pveproxy does.
func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokenID == "" && s.username == "" {
		return "root@pam", nil
	}
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "PVEAPIToken="); ok {
		id, secret, _ := strings.Cut(token, "=")
		if s.tokenID != "" && id == s.tokenID && secret == s.tokenSecret {
			return id, nil
		}
		return "", errorf(http.StatusUnauthorized, "authentication failure")
	}
	if c, err := r.Cookie("PVEAuthCookie"); err == nil {
		csrf, ok := s.tickets[c.Value]
		if !ok {
			return "", errorf(http.StatusUnauthorized, "authentication failure")
		}
		if r.Method != http.MethodGet && r.Header.Get("CSRFPreventionToken") != csrf {
			return "", errorf(http.StatusUnauthorized, "Permission denied - invalid csrf token")
		}
		return s.username, nil
	}
	return "", errorf(http.StatusUnauthorized, "No ticket")
}

func (s *Server) login(params map[string]string) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.username == "" || params["username"] != s.username || params["password"] != s.password {
		return nil, errorf(http.StatusUnauthorized, "authentication failure")
	}
	ticket := "PVE:" + s.username + ":" + randomHex(4) + "::" + randomHex(16)
	csrf := randomHex(4) + ":" + randomHex(16)
	s.tickets[ticket] = csrf
	return map[string]any{"username": s.username, "ticket": ticket, "CSRFPreventionToken": csrf, "cap": map[string]any{}}, nil
}

func (s *Server) version(*call) (any, *apiError) {
	return map[string]string{"version": "8.2.4", "release": "8.2", "repoid": "faa83925c9641325"}, nil
}

func (s *Server) node(name string) *Node {
	for i := range s.nodes {
		if s.nodes[i].Name == name {
			return &s.nodes[i]
		}
	}
	return nil
}

// usedMemory is what a node uses: its own use plus its running VMs.
func (s *Server) usedMemory(n *Node) int64 {
	used := n.UsedMemoryMiB
	for _, vm := range s.vms {
		if vm.Node == n.Name && vm.Status == "running" {
			used += atoi(vm.Config["memory"], 512)
		}
	}
	return used * mib
}

const mib = 1 << 20

func (s *Server) nodeEntry(n *Node) map[string]any {
	e := map[string]any{"node": n.Name, "id": "node/" + n.Name, "type": "node", "level": ""}
	if n.Offline {
		e["status"] = "offline"
		return e
	}
	e["status"] = "online"
	e["maxcpu"] = n.CPUs
	e["cpu"] = n.CPULoad
	e["maxmem"] = n.MemoryMiB * mib
	e["mem"] = s.usedMemory(n)
	e["uptime"] = 86400
	return e
}

// vmEntry is a guest as the node's own listing shows it, read fresh.
func (s *Server) vmEntry(vm *VM) map[string]any {
	return entryOf(vm, statsOf(vm), true)
}

// resourceEntry is a guest as /cluster/resources shows it: the published
// stats, with lock and tags fresh.
func (s *Server) resourceEntry(vm *VM) map[string]any {
	st, ok := s.published[vm.VMID]
	return entryOf(vm, st, ok)
}

func entryOf(vm *VM, st vmStats, known bool) map[string]any {
	e := map[string]any{
		"id": fmt.Sprintf("qemu/%d", vm.VMID), "type": "qemu", "vmid": vm.VMID,
		"node": vm.Node, "status": "unknown",
	}
	if known {
		e["status"] = st.status
		e["template"] = boolInt(st.template)
		e["maxcpu"] = st.maxcpu
		e["maxmem"] = st.maxmem
		e["maxdisk"] = 32 << 30
		if st.name != "" {
			e["name"] = st.name
		}
		if st.status == "running" {
			e["mem"] = st.maxmem / 2
			e["uptime"] = 60
		}
	}
	if t := vm.Config["tags"]; t != "" {
		e["tags"] = t
	}
	if vm.Lock != "" {
		e["lock"] = vm.Lock
	}
	if vm.Pool != "" {
		e["pool"] = vm.Pool
	}
	return e
}

func (s *Server) clusterResources(c *call) (any, *apiError) {
	typ := c.params["type"]
	out := []map[string]any{}
	if typ == "" || typ == "node" {
		for i := range s.nodes {
			out = append(out, s.nodeEntry(&s.nodes[i]))
		}
	}
	if typ == "" || typ == "vm" {
		s.maybePublish()
		for _, vmid := range slices.Sorted(maps.Keys(s.vms)) {
			out = append(out, s.resourceEntry(s.vms[vmid]))
		}
	}
	return out, nil
}

func (s *Server) nextID(c *call) (any, *apiError) {
	if v := c.params["vmid"]; v != "" {
		id := int(atoi(v, 0))
		if _, ok := s.vms[id]; ok {
			return nil, errorf(http.StatusBadRequest, "VM %d already exists", id)
		}
		return strconv.Itoa(id), nil
	}
	for id := 100; ; id++ {
		if _, ok := s.vms[id]; !ok {
			return strconv.Itoa(id), nil
		}
	}
}

func (s *Server) clusterStatus(*call) (any, *apiError) {
	out := []map[string]any{{"type": "cluster", "id": "cluster", "name": "fake", "quorate": 1, "nodes": len(s.nodes), "version": 1}}
	for i, n := range s.nodes {
		out = append(out, map[string]any{"type": "node", "id": "node/" + n.Name, "name": n.Name, "nodeid": i + 1, "online": boolInt(!n.Offline), "local": boolInt(i == 0), "ip": fmt.Sprintf("10.0.0.%d", i+1)})
	}
	return out, nil
}

func (s *Server) listNodes(*call) (any, *apiError) {
	out := []map[string]any{}
	for i := range s.nodes {
		out = append(out, s.nodeEntry(&s.nodes[i]))
	}
	return out, nil
}

func (s *Server) onlineNode(name string) (*Node, *apiError) {
	n := s.node(name)
	if n == nil {
		return nil, errorf(http.StatusInternalServerError, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", name, name)
	}
	if n.Offline {
		return nil, errorf(595, "Connection refused")
	}
	return n, nil
}

func (s *Server) nodeStatus(c *call) (any, *apiError) {
	n, failed := s.onlineNode(c.args[0])
	if failed != nil {
		return nil, failed
	}
	used := s.usedMemory(n)
	return map[string]any{
		"cpu":        n.CPULoad,
		"memory":     map[string]any{"total": n.MemoryMiB * mib, "used": used, "free": n.MemoryMiB*mib - used},
		"cpuinfo":    map[string]any{"cpus": n.CPUs, "cores": n.CPUs, "sockets": 1, "model": "fake"},
		"uptime":     86400,
		"pveversion": "pve-manager/8.2.4/faa83925c9641325",
		"kversion":   "Linux 6.8.12-1-pve",
	}, nil
}

// vmOn returns the VM if it is on the node, with Proxmox's error when not.
func (s *Server) vmOn(node, id string) (*VM, *apiError) {
	vmid := int(atoi(id, 0))
	vm, ok := s.vms[vmid]
	if !ok || vm.Node != node {
		return nil, errorf(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
	}
	return vm, nil
}

func (s *Server) listQemu(c *call) (any, *apiError) {
	out := []map[string]any{}
	for _, vmid := range slices.Sorted(maps.Keys(s.vms)) {
		if vm := s.vms[vmid]; vm.Node == c.args[0] {
			out = append(out, s.vmEntry(vm))
		}
	}
	return out, nil
}

func (s *Server) createVM(c *call) (any, *apiError) {
	node, failed := s.onlineNode(c.args[0])
	if failed != nil {
		return nil, failed
	}
	vmid := int(atoi(c.params["vmid"], 0))
	if vmid < 100 {
		return nil, errorf(http.StatusBadRequest, "Parameter verification failed.")
	}
	if failed := checkHostPCI(c.params); failed != nil {
		return nil, failed
	}
	if existing, ok := s.vms[vmid]; ok {
		s.idConflicts++
		return nil, errorf(http.StatusInternalServerError, "VM %d already exists on node '%s'", vmid, existing.Node)
	}
	cfg := map[string]string{}
	for k, v := range c.params {
		if k != "vmid" && k != "start" {
			cfg[k] = v
		}
	}
	if t, ok := cfg["tags"]; ok {
		if failed := s.checkTags("", t); failed != nil {
			return nil, failed
		}
		cfg["tags"] = normalizeTags(t)
	}
	cfg["meta"] = fmt.Sprintf("creation-qemu=9.0.2,ctime=%d", time.Now().Unix())
	// Like Proxmox, the VM holds only its lock until the task has written
	// the configuration.
	vm := &VM{VMID: vmid, Node: node.Name, Status: "stopped", Lock: "create", Config: map[string]string{}}
	s.vms[vmid] = vm
	return s.newTask(node.Name, "qmcreate", strconv.Itoa(vmid), c.user, func(ok bool) {
		vm.Lock, vm.Config = "", cfg
		if !ok {
			delete(s.vms, vmid)
		}
	}), nil
}

func (s *Server) cloneVM(c *call) (any, *apiError) {
	src, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	newid := int(atoi(c.params["newid"], 0))
	if newid < 100 {
		return nil, errorf(http.StatusBadRequest, "Parameter verification failed.")
	}
	// load_and_check: only the config file on this node is looked for.
	existing, taken := s.vms[newid]
	if taken && existing.Node == src.Node {
		s.idConflicts++
		return nil, errorf(http.StatusInternalServerError, "unable to create VM %d: config file already exists", newid)
	}
	if src.Lock != "" {
		return nil, errorf(http.StatusInternalServerError, "VM is locked (%s)", src.Lock)
	}
	pool := c.params["pool"]
	if pool != "" && !s.pools[pool] {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", pool)
	}
	target := src.Node
	if t := c.params["target"]; t != "" {
		if _, failed := s.onlineNode(t); failed != nil {
			return nil, failed
		}
		target = t
	}
	// Everything but the template flag is copied, meta (and its ctime)
	// and protection included.
	cfg := maps.Clone(src.Config)
	delete(cfg, "template")
	cfg["name"] = orDefault(c.params["name"], "Copy-of-VM-"+src.Config["name"])
	if d, ok := c.params["description"]; ok && d != "" {
		cfg["description"] = d
	}
	if taken {
		// The worker's temporary config collides in pmxcfs with the
		// VM of that ID on another node.
		s.idConflicts++
		upid := s.newTask(src.Node, "qmclone", strconv.Itoa(src.VMID), c.user, func(bool) {})
		s.tasks[upid].exit = fmt.Sprintf("close (rename) atomic file '/etc/pve/nodes/%s/qemu-server/%d.conf' failed: File exists", src.Node, newid)
		return upid, nil
	}
	// The clone holds only its lock (no name, no description) until its
	// disks are copied and the task writes the configuration.
	vm := &VM{VMID: newid, Node: target, Status: "stopped", Lock: "clone", Config: map[string]string{}}
	s.vms[newid] = vm
	return s.newTask(src.Node, "qmclone", strconv.Itoa(src.VMID), c.user, func(ok bool) {
		if !ok {
			delete(s.vms, newid)
			return
		}
		vm.Lock, vm.Config, vm.Pool = "", cfg, pool
	}), nil
}

func (s *Server) getConfig(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	out := map[string]any{"digest": randomHex(20)}
	for k, v := range vm.Config {
		switch k {
		case "cores", "sockets", "template", "onboot":
			out[k] = atoi(v, 0)
		default:
			// memory is a string since Proxmox VE 8.1.
			out[k] = v
		}
	}
	if vm.Lock != "" {
		out["lock"] = vm.Lock
	}
	return out, nil
}

func (s *Server) postConfig(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	if failed := checkHostPCI(c.params); failed != nil {
		return nil, failed
	}
	if vm.Lock != "" {
		return nil, errorf(http.StatusInternalServerError, "VM is locked (%s)", vm.Lock)
	}
	if t, ok := c.params["tags"]; ok {
		if failed := s.checkTags(vm.Config["tags"], t); failed != nil {
			return nil, failed
		}
	}
	params := maps.Clone(c.params)
	return s.newTask(vm.Node, "qmconfig", strconv.Itoa(vm.VMID), c.user, func(ok bool) {
		if ok {
			applyConfig(vm, params)
		}
	}), nil
}

func (s *Server) putConfig(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	if failed := checkHostPCI(c.params); failed != nil {
		return nil, failed
	}
	if vm.Lock != "" {
		return nil, errorf(http.StatusInternalServerError, "VM is locked (%s)", vm.Lock)
	}
	if t, ok := c.params["tags"]; ok {
		if failed := s.checkTags(vm.Config["tags"], t); failed != nil {
			return nil, failed
		}
	}
	applyConfig(vm, c.params)
	return nil, nil
}

// checkTags applies datacenter.cfg's user-tag-access to the tags a change
// adds or removes, as assert_tag_permissions does for a user without
// Sys.Modify on /.
func (s *Server) checkTags(old, updated string) *apiError {
	allow := orDefault(s.tagAccess.Allow, "free")
	if allow == "free" {
		return nil
	}
	allowed := map[string]bool{}
	if allow != "none" {
		for _, t := range s.tagAccess.List {
			allowed[t] = true
		}
	}
	if allow == "existing" {
		for _, vm := range s.vms {
			for _, t := range vm.Tags() {
				allowed[t] = true
			}
		}
	}
	count := map[string]int{}
	for _, t := range splitTags(old) {
		count[t]++
	}
	for _, t := range splitTags(strings.ToLower(updated)) {
		count[t]--
	}
	for _, t := range slices.Sorted(maps.Keys(count)) {
		if count[t] != 0 && !allowed[t] {
			return errorf(http.StatusForbidden, "Permission check failed (/, Sys.Modify for modifying tag '%s')", t)
		}
	}
	return nil
}

func applyConfig(vm *VM, params map[string]string) {
	for _, k := range strings.Split(params["delete"], ",") {
		delete(vm.Config, strings.TrimSpace(k))
	}
	for k, v := range params {
		switch k {
		case "delete", "digest", "skiplock":
		case "tags":
			vm.Config[k] = normalizeTags(v)
		default:
			vm.Config[k] = v
		}
	}
}

func (s *Server) currentStatus(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	e := s.vmEntry(vm)
	e["qmpstatus"] = vm.Status
	e["cpus"] = e["maxcpu"]
	return e, nil
}

// startVM answers POST status/start. Like qemu-server since 2011, the
// API call itself checks nothing: the qmstart worker finds the VM running
// ("VM N already running"), locked ("VM is locked (L)") or its flock held
// by a shutdown still running ("can't lock file … - got timeout"), its
// PCI devices are missing or held by another VM (choosePCI), or QEMU
// fails to start it (a missing volume, memory the node cannot give).
func (s *Server) startVM(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	starting := false
	upid := s.newTask(vm.Node, "qmstart", strconv.Itoa(vm.VMID), c.user, func(ok bool) {
		switch {
		case ok:
			vm.Status = "running"
		case starting:
			// The failed start's cleanup_pci_devices drops the
			// reservations it took.
			vm.PCI = nil
		}
	})
	t := s.tasks[upid]
	if t.exit != "OK" && statusIsError(t.exit) {
		return upid, nil // an injected failure
	}
	switch missing := s.missingVolume(vm); {
	case s.shutdownRunning(vm.VMID, upid):
		t.fail(lockTimeout(vm.VMID))
	case vm.Lock != "":
		t.fail(fmt.Sprintf("VM is locked (%s)", vm.Lock))
	case vm.Status == "running":
		t.fail(fmt.Sprintf("VM %d already running", vm.VMID))
	case missing != "":
		t.fail(fmt.Sprintf("volume '%s' does not exist", missing))
	default:
		// The devices are chosen and reserved (a time reservation) when
		// the worker builds QEMU's command line, before QEMU runs.
		ids, refused := s.choosePCI(vm)
		if refused != "" {
			t.fail(refused)
			break
		}
		vm.PCI, starting = ids, true
		switch {
		case s.lacksMemory(vm):
			t.log = append(t.log, "kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory")
			t.fail("start failed: QEMU exited with code 1")
		case warningsStatus.MatchString(t.exit):
			t.log = append(t.log, "WARN: current machine version 'pc-i440fx-5.1' is deprecated - see the documentation and change to a newer one")
		}
	}
	return upid, nil
}

// lacksMemory says whether QEMU could not get the VM's memory on its node.
func (s *Server) lacksMemory(vm *VM) bool {
	n := s.node(vm.Node)
	return n != nil && s.usedMemory(n)+atoi(vm.Config["memory"], 512)*mib > orDefaultInt(n.StartableMemoryMiB, n.MemoryMiB)*mib
}

// fail ends the task, when polled, with the error: the worker's die
// message, which fork_worker writes as the log's last line "TASK ERROR: …"
// and read_status returns as the exit status.
func (t *task) fail(msg string) {
	t.exit = msg
	t.log = append(t.log, "TASK ERROR: "+msg)
}

// lockTimeout is what PVE::Tools::lock_file_full says when the VM's flock
// (/var/lock/qemu-server/lock-N.conf) stays held for its 10 seconds.
func lockTimeout(vmid int) string {
	return fmt.Sprintf("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout", vmid)
}

// shutdownRunning says whether a qmshutdown task of the VM other than
// except is still running: it holds the VM's flock for as long as it waits
// for the guest.
func (s *Server) shutdownRunning(vmid int, except string) bool {
	for _, t := range s.tasks {
		if t.upid != except && t.typ == "qmshutdown" && t.id == strconv.Itoa(vmid) && !t.done && t.pollsLeft > 0 {
			return true
		}
	}
	return false
}

// shutdownVM answers POST status/shutdown as qemu-server's vm_shutdown
// and _do_vm_stop do: a VM that is not running is done at once (OK); a
// locked one fails; a guest that acts on the ACPI power button stops; one
// that does not (VM.IgnoresShutdown) fails the task with "VM quit/powerdown
// failed - got timeout" after the timeout parameter's seconds (default
// 60), unless forceStop=1, which kills it instead (a plain warn line in the
// log, exit status OK: only log_warn counts toward WARNINGS). The fake does
// not wait the seconds: the task ends after its polls.
func (s *Server) shutdownVM(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	upid := s.newTask(vm.Node, "qmshutdown", strconv.Itoa(vm.VMID), c.user, func(ok bool) {
		if ok {
			// vm_stop_cleanup drops the VM's PCI reservations.
			vm.Status, vm.PCI = "stopped", nil
		}
	})
	t := s.tasks[upid]
	if t.exit != "OK" && statusIsError(t.exit) {
		return upid, nil
	}
	switch {
	case vm.Status != "running":
	case s.shutdownRunning(vm.VMID, upid):
		t.fail(lockTimeout(vm.VMID))
	case vm.Lock != "":
		t.fail(fmt.Sprintf("VM is locked (%s)", vm.Lock))
	case vm.IgnoresShutdown && c.params["forceStop"] == "1":
		t.log = append(t.log, "VM still running - terminating now with SIGTERM")
	case vm.IgnoresShutdown:
		t.fail("VM quit/powerdown failed - got timeout")
	}
	return upid, nil
}

// stopVM answers POST status/stop (qemu-server vm_stop): a VM that is not
// running is done at once; a locked one fails; with overrule-shutdown=1
// the VM's running qmshutdown tasks are aborted first (abort_guest_tasks:
// the aborted worker ends "received interrupt"), else a running shutdown
// keeps the VM's flock and the stop fails after 10 seconds.
func (s *Server) stopVM(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	if _, ok := c.params["overrule-shutdown"]; ok && s.noOverruleShutdown {
		return nil, errorf(http.StatusBadRequest, "Parameter verification failed. (overrule-shutdown: property is not defined in schema and the schema does not allow additional properties)")
	}
	if c.params["overrule-shutdown"] == "1" {
		for _, t := range s.tasks {
			if t.typ == "qmshutdown" && t.id == strconv.Itoa(vm.VMID) && !t.done && t.pollsLeft > 0 {
				t.exit, t.pollsLeft = "received interrupt", 0
				t.log = append(t.log, "TASK ERROR: received interrupt")
				t.end()
			}
		}
	}
	upid := s.newTask(vm.Node, "qmstop", strconv.Itoa(vm.VMID), c.user, func(ok bool) {
		if ok {
			vm.Status, vm.PCI = "stopped", nil
		}
	})
	t := s.tasks[upid]
	if t.exit != "OK" && statusIsError(t.exit) {
		return upid, nil
	}
	switch {
	case vm.Status != "running":
	case s.shutdownRunning(vm.VMID, upid):
		t.fail(lockTimeout(vm.VMID))
	case vm.Lock != "":
		t.fail(fmt.Sprintf("VM is locked (%s)", vm.Lock))
	}
	return upid, nil
}

func (s *Server) destroyVM(c *call) (any, *apiError) {
	vm, failed := s.vmOn(c.args[0], c.args[1])
	if failed != nil {
		return nil, failed
	}
	switch {
	case vm.Lock != "":
		return nil, errorf(http.StatusInternalServerError, "VM is locked (%s)", vm.Lock)
	case vm.Config["protection"] == "1":
		return nil, errorf(http.StatusInternalServerError, "can't remove VM %d - protection mode enabled", vm.VMID)
	case vm.Status == "running":
		return nil, errorf(http.StatusInternalServerError, "VM %d is running - destroy failed", vm.VMID)
	}
	vm.Lock = "destroyed"
	return s.newTask(vm.Node, "qmdestroy", strconv.Itoa(vm.VMID), c.user, func(ok bool) {
		if ok {
			delete(s.vms, vm.VMID)
			return
		}
		vm.Lock = ""
	}), nil
}

// newTask starts a task whose effect, finish, is applied when a status
// poll sees it stop.
func (s *Server) newTask(node, typ, id, user string, finish func(ok bool)) string {
	s.pid++
	now := time.Now()
	t := &task{node: node, typ: typ, id: id, user: user, started: now, pollsLeft: s.taskPolls, exit: "OK", finish: finish}
	for i, f := range s.taskFaults {
		if f.Type == "" || f.Type == typ {
			s.taskFaultsHit++
			if f.ExitStatus != "" {
				t.exit = f.ExitStatus
			}
			if f.Crash {
				t.crash, t.exit = true, "unexpected status"
			}
			if f.Polls > 0 {
				t.pollsLeft = f.Polls
			}
			f.Times--
			if f.Times <= 0 {
				s.taskFaults = slices.Delete(s.taskFaults, i, i+1)
			}
			break
		}
	}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, s.pid, s.pid*7, now.Unix(), typ, id, user)
	s.tasks[t.upid] = t
	return t.upid
}

// FaultsHit says how many injected request faults and task faults matched
// a request or a task so far, and how many clone or create calls were
// refused because their VM ID was taken: what a test injected, it can see
// happen.
func (s *Server) FaultsHit() (requests, tasks, idConflicts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faultsHit, s.taskFaultsHit, s.idConflicts
}

// FinishTasks ends every running task now, as if its work were done,
// applying its effect (a clone gets its configuration, a destroyed VM goes).
func (s *Server) FinishTasks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks {
		t.pollsLeft = 0
		t.end()
	}
}

// end applies the task's effect once; a crashed worker applies none.
func (t *task) end() {
	if t.done {
		return
	}
	t.done = true
	if !t.crash {
		t.finish(!statusIsError(t.exit))
	}
}

// statusIsError is PVE::UPID::status_is_error: OK and WARNINGS: N are
// success.
func statusIsError(status string) bool {
	return status != "OK" && !warningsStatus.MatchString(status)
}

var warningsStatus = regexp.MustCompile(`^WARNINGS: \d+$`)

func (s *Server) taskLog(c *call) (any, *apiError) {
	t, ok := s.tasks[c.args[1]]
	if !ok || t.node != c.args[0] {
		return nil, errorf(http.StatusInternalServerError, "unable to parse worker upid '%s'", c.args[1])
	}
	out := []map[string]any{}
	for i, line := range t.log {
		out = append(out, map[string]any{"n": i + 1, "t": line})
	}
	return out, nil
}

func (s *Server) taskStatus(c *call) (any, *apiError) {
	t, ok := s.tasks[c.args[1]]
	if !ok || t.node != c.args[0] {
		return nil, errorf(http.StatusInternalServerError, "unable to parse worker upid '%s'", c.args[1])
	}
	out := map[string]any{
		"upid": t.upid, "node": t.node, "type": t.typ, "id": t.id, "user": t.user,
		"pid": 4242, "pstart": 1234, "starttime": t.started.Unix(),
	}
	if t.pollsLeft > 0 {
		t.pollsLeft--
		out["status"] = "running"
		return out, nil
	}
	t.end()
	out["status"] = "stopped"
	out["exitstatus"] = t.exit
	return out, nil
}

// readParams merges the query with a JSON, form or multipart body, as
// strings; the file part of a multipart body is returned apart.
func readParams(r *http.Request) (map[string]string, []byte, error) {
	out := map[string]string{}
	for k, v := range r.URL.Query() {
		out[k] = v[0]
	}
	if r.Body == nil {
		return out, nil, nil
	}
	if mediaType, ps, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mediaType == "multipart/form-data" {
		var file []byte
		mr := multipart.NewReader(io.LimitReader(r.Body, 16<<20), ps["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return out, file, nil
			}
			if err != nil {
				return nil, nil, err
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return nil, nil, err
			}
			if part.FileName() != "" {
				file = data
				out["filename"] = orDefault(out["filename"], part.FileName())
				continue
			}
			out[part.FormName()] = string(data)
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || len(body) == 0 {
		return out, nil, err
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, nil, err
		}
		for k, v := range m {
			if v == nil {
				continue
			}
			out[k] = fmt.Sprint(v)
		}
		return out, nil, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range form {
		out[k] = v[0]
	}
	return out, nil, nil
}

// upload stores a multipart upload as a volume of an ISO-capable storage,
// checking what pve-storage's upload checks (see the package comment).
func (s *Server) upload(c *call) (any, *apiError) {
	if _, failed := s.onlineNode(c.args[0]); failed != nil {
		return nil, failed
	}
	if mediaType, _, _ := mime.ParseMediaType(c.r.Header.Get("Content-Type")); mediaType != "multipart/form-data" || c.file == nil {
		return nil, errorf(http.StatusBadRequest, "Parameter verification failed. (tmpfilename: missing temporary file name)")
	}
	content := c.params["content"]
	if content != "iso" && content != "vztmpl" && content != "import" {
		return nil, errorf(http.StatusBadRequest, "Parameter verification failed. (content: value '%s' does not have a value in the enumeration 'iso, vztmpl, import')", content)
	}
	st, ok := s.storages[c.args[1]]
	if !ok {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", c.args[1])
	}
	if !slices.Contains(st.Content, content) {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support '%s' content", st.Name, content)
	}
	name := c.params["filename"]
	if content == "iso" && !isoName.MatchString(name) {
		return nil, errorf(http.StatusBadRequest, "Parameter verification failed. (filename: wrong file extension)")
	}
	volid := st.Name + ":" + content + "/" + name
	data := slices.Clone(c.file)
	return s.newTask(c.args[0], "imgcopy", "", c.user, func(ok bool) {
		if ok {
			s.volumes[volid] = data
		}
	}), nil
}

var isoName = regexp.MustCompile(`(?i)^[^/]+\.(iso|img)$`)

// listVolumes lists a storage's volumes as pve-storage's content index
// does (GET /nodes/{node}/storage/{storage}/content, optionally filtered by
// content type): volid, content, format and size of each.
func (s *Server) listVolumes(c *call) (any, *apiError) {
	if _, failed := s.onlineNode(c.args[0]); failed != nil {
		return nil, failed
	}
	if _, ok := s.storages[c.args[1]]; !ok {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", c.args[1])
	}
	out := []map[string]any{}
	for _, volid := range slices.Sorted(maps.Keys(s.volumes)) {
		storage, rest, _ := strings.Cut(volid, ":")
		content, _, _ := strings.Cut(rest, "/")
		if storage != c.args[1] || c.params["content"] != "" && c.params["content"] != content {
			continue
		}
		out = append(out, map[string]any{"volid": volid, "content": content, "format": content, "size": len(s.volumes[volid])})
	}
	return out, nil
}

// deleteVolume removes an uploaded volume, named storage:iso/name or
// iso/name.
func (s *Server) deleteVolume(c *call) (any, *apiError) {
	if _, failed := s.onlineNode(c.args[0]); failed != nil {
		return nil, failed
	}
	volid := c.args[2]
	if !strings.Contains(volid, ":") {
		volid = c.args[1] + ":" + volid
	}
	if _, ok := s.volumes[volid]; !ok {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", volid)
	}
	return s.newTask(c.args[0], "imgdel", "", c.user, func(ok bool) {
		if ok {
			delete(s.volumes, volid)
		}
	}), nil
}

// missingVolume returns the first uploaded-style volume (storage:iso/…) of
// a registered storage that a VM's config names and that does not exist.
func (s *Server) missingVolume(vm *VM) string {
	for _, v := range vm.Config {
		volid, _, _ := strings.Cut(v, ",")
		storage, rest, ok := strings.Cut(volid, ":")
		if !ok || !strings.HasPrefix(rest, "iso/") {
			continue
		}
		if _, registered := s.storages[storage]; !registered {
			continue
		}
		if _, ok := s.volumes[volid]; !ok {
			return volid
		}
	}
	return ""
}

func writeAnswer(w http.ResponseWriter, data any, failed *apiError) {
	if failed != nil {
		writeError(w, failed)
		return
	}
	body, _ := json.Marshal(map[string]any{"data": data})
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_, _ = w.Write(body)
}

// writeError answers as pveproxy does: the reason in the status line, the
// body {"data":null} with the message. net/http writes only standard
// reasons, so the connection is taken over to write the status line.
func writeError(w http.ResponseWriter, e *apiError) {
	msg := strings.NewReplacer("\r", " ", "\n", " ").Replace(e.msg)
	body, _ := json.Marshal(map[string]any{"data": nil, "message": msg + "\n"})
	if hj, ok := w.(http.Hijacker); ok {
		if conn, buf, err := hj.Hijack(); err == nil {
			defer func() { _ = conn.Close() }()
			_, _ = fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				e.code, msg, len(body), body)
			_ = buf.Flush()
			return
		}
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(e.code)
	_, _ = w.Write(body)
}

// normalizeTags sorts and de-duplicates tags and joins them with ';', as
// Proxmox stores them.
func normalizeTags(tags string) string {
	t := splitTags(strings.ToLower(tags))
	slices.Sort(t)
	return strings.Join(slices.Compact(t), ";")
}

func splitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

func atoi(s string, def int64) int64 {
	s, _, _ = strings.Cut(s, ",")
	s = strings.TrimPrefix(s, "current=")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return def
	}
	return n
}

func orDefaultInt(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}
