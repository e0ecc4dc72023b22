package scheduling

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// DRA are the Dynamic Resource Allocation objects a decision simulates
// pods with ResourceClaims on: the devices the drivers of real nodes
// publish, the claims (allocated ones hold their devices), and the
// classes that claims select devices by.
type DRA struct {
	ResourceSlices []*resourcev1.ResourceSlice
	ResourceClaims []*resourcev1.ResourceClaim
	DeviceClasses  []*resourcev1.DeviceClass
}

func (d DRA) empty() bool {
	return len(d.ResourceSlices) == 0 && len(d.ResourceClaims) == 0 && len(d.DeviceClasses) == 0
}

// draState is the scheduler framework's SharedDRAManager over the
// simulation: the ResourceSlices of real nodes, a copy of its template's
// slices for every phantom and new node, and the claims with what the
// simulation allocated to them. It forks, reverts and commits with the
// Snapshot that owns it, so a device the round gave one pod, or a booting
// node's pod, is given to no other, and a try that is taken back gives
// its devices back.
type draState struct {
	classes   map[string]*resourcev1.DeviceClass
	classList []*resourcev1.DeviceClass
	// shared are the slices that belong to no one node (a network-attached
	// pool, slices for all nodes or a node selector).
	shared []*resourcev1.ResourceSlice
	layers []*draLayer
	// all is the list of every slice, rebuilt after a change.
	all      []*resourcev1.ResourceSlice
	allValid bool
	// version counts changes to slices and claims: DynamicResources's
	// PreFilter takes both in, so a state older than a change is stale.
	version int
}

type draLayer struct {
	// nodeSlices of the nodes changed in the layer; a nil list hides the
	// node's slices below.
	nodeSlices map[string][]*resourcev1.ResourceSlice
	// claims changed in the layer, by namespace/name; nil is deleted.
	claims map[string]*resourcev1.ResourceClaim
	// allocated lists, for the nodes changed in the layer, the devices
	// the simulation allocated there.
	allocated map[string][]deviceRef
}

func newDRALayer() *draLayer {
	return &draLayer{
		nodeSlices: map[string][]*resourcev1.ResourceSlice{},
		claims:     map[string]*resourcev1.ResourceClaim{},
		allocated:  map[string][]deviceRef{},
	}
}

// deviceRef names a device as a template does: its driver, its pool (""
// for the node's own) and its name.
type deviceRef struct {
	driver, pool, device string
}

func newDRAState(d DRA) *draState {
	s := &draState{classes: map[string]*resourcev1.DeviceClass{}, layers: []*draLayer{newDRALayer()}}
	for _, c := range d.DeviceClasses {
		s.classes[c.Name] = c
		s.classList = append(s.classList, c)
	}
	base := s.layers[0]
	for _, sl := range d.ResourceSlices {
		if n := ptr.Deref(sl.Spec.NodeName, ""); n != "" {
			base.nodeSlices[n] = append(base.nodeSlices[n], sl)
		} else {
			s.shared = append(s.shared, sl)
		}
	}
	for _, c := range d.ResourceClaims {
		base.claims[c.Namespace+"/"+c.Name] = c
	}
	return s
}

func (s *draState) fork() { s.layers = append(s.layers, newDRALayer()) }

func (s *draState) revert() {
	if len(s.layers) > 1 {
		s.layers = s.layers[:len(s.layers)-1]
		s.allValid = false
		s.version++
	}
}

func (s *draState) commit() {
	if len(s.layers) < 2 {
		return
	}
	top, below := s.layers[len(s.layers)-1], s.layers[len(s.layers)-2]
	s.layers = s.layers[:len(s.layers)-1]
	for k, v := range top.nodeSlices {
		below.nodeSlices[k] = v
	}
	for k, v := range top.claims {
		below.claims[k] = v
	}
	for k, v := range top.allocated {
		below.allocated[k] = v
	}
}

func (s *draState) top() *draLayer { return s.layers[len(s.layers)-1] }

// setNodeSlices gives a node its slices (nil: none).
func (s *draState) setNodeSlices(node string, slices []*resourcev1.ResourceSlice) {
	s.top().nodeSlices[node] = slices
	s.allValid = false
	s.version++
}

// setBaseSlices gives a template node its slices once, below every fork:
// templates outlive the decisions that build them.
func (s *draState) setBaseSlices(node string, slices []*resourcev1.ResourceSlice) {
	s.layers[0].nodeSlices[node] = slices
	s.allValid = false
	s.version++
}

func (s *draState) nodeSlices(node string) []*resourcev1.ResourceSlice {
	for i := len(s.layers) - 1; i >= 0; i-- {
		if sl, ok := s.layers[i].nodeSlices[node]; ok {
			return sl
		}
	}
	return nil
}

// allocatedOn lists the devices the simulation allocated on a node.
func (s *draState) allocatedOn(node string) []deviceRef {
	for i := len(s.layers) - 1; i >= 0; i-- {
		if refs, ok := s.layers[i].allocated[node]; ok {
			return refs
		}
	}
	return nil
}

func (s *draState) noteAllocated(node string, refs []deviceRef) {
	if len(refs) == 0 {
		return
	}
	s.top().allocated[node] = append(append([]deviceRef(nil), s.allocatedOn(node)...), refs...)
}

func (s *draState) claim(key string) *resourcev1.ResourceClaim {
	for i := len(s.layers) - 1; i >= 0; i-- {
		if c, ok := s.layers[i].claims[key]; ok {
			return c
		}
	}
	return nil
}

func (s *draState) setClaim(c *resourcev1.ResourceClaim) {
	s.top().claims[c.Namespace+"/"+c.Name] = c
	s.version++
}

// claims lists every claim, each once, in no order.
func (s *draState) claimList() []*resourcev1.ResourceClaim {
	seen := map[string]bool{}
	var out []*resourcev1.ResourceClaim
	for i := len(s.layers) - 1; i >= 0; i-- {
		for k, c := range s.layers[i].claims {
			if seen[k] {
				continue
			}
			seen[k] = true
			if c != nil {
				out = append(out, c)
			}
		}
	}
	return out
}

func (s *draState) sliceList() []*resourcev1.ResourceSlice {
	if s.allValid {
		return s.all
	}
	s.all = append(s.all[:0], s.shared...)
	seen := map[string]bool{}
	for i := len(s.layers) - 1; i >= 0; i-- {
		for node, sl := range s.layers[i].nodeSlices {
			if seen[node] {
				continue
			}
			seen[node] = true
			s.all = append(s.all, sl...)
		}
	}
	s.allValid = true
	return s.all
}

var (
	_ fwk.SharedDRAManager     = (*draState)(nil)
	_ fwk.ResourceClaimTracker = draClaims{}
	_ fwk.ResourceSliceLister  = draSlices{}
	_ fwk.DeviceClassLister    = draClasses{}
)

func (s *draState) ResourceClaims() fwk.ResourceClaimTracker { return draClaims{s} }
func (s *draState) ResourceSlices() fwk.ResourceSliceLister  { return draSlices{s} }
func (s *draState) DeviceClasses() fwk.DeviceClassLister     { return draClasses{s} }

// DeviceClassResolver maps no extended resource to a device class: an
// extended resource is counted as the node advertises it (device
// plugins), not allocated from a DeviceClass's devices.
func (s *draState) DeviceClassResolver() fwk.DeviceClassResolver { return noClassResolver{} }

type noClassResolver struct{}

func (noClassResolver) GetDeviceClass(corev1.ResourceName) *resourcev1.DeviceClass { return nil }

type draSlices struct{ s *draState }

// ListWithDeviceTaintRules lists the slices as they are: DeviceTaintRules
// are not simulated (a device's own taints in its slice are).
func (l draSlices) ListWithDeviceTaintRules() ([]*resourcev1.ResourceSlice, error) {
	return l.s.sliceList(), nil
}

type draClasses struct{ s *draState }

func (l draClasses) List() ([]*resourcev1.DeviceClass, error) { return l.s.classList, nil }

func (l draClasses) Get(name string) (*resourcev1.DeviceClass, error) {
	if c, ok := l.s.classes[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("deviceclasses"), name)
}

// draClaims tracks claims for the DynamicResources plugin. The plugin's
// Reserve signals the allocation it chose; with no binding phase to write
// it, it is kept at once as the claim's allocation, so none of it is
// pending.
type draClaims struct{ s *draState }

func (t draClaims) List() ([]*resourcev1.ResourceClaim, error) { return t.s.claimList(), nil }

func (t draClaims) Get(namespace, name string) (*resourcev1.ResourceClaim, error) {
	if c := t.s.claim(namespace + "/" + name); c != nil {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaims"), name)
}

func (t draClaims) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	state, err := t.GatherAllocatedState()
	if err != nil {
		return nil, err
	}
	return state.AllocatedDevices, nil
}

// GatherAllocatedState is what the claims hold: devices allocated whole,
// and with consumable capacity on, shares of devices and their capacity.
// Admin access holds nothing, as for the scheduler.
func (t draClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	consumable := utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity)
	state := &structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, c := range t.s.claimList() {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if consumable && r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state, nil
}

func (t draClaims) SignalClaimPendingAllocation(uid types.UID, allocated *resourcev1.ResourceClaim) error {
	current := t.s.claim(allocated.Namespace + "/" + allocated.Name)
	if current == nil || current.UID != uid {
		return fmt.Errorf("claim %s/%s (UID %s) is not in the simulation", allocated.Namespace, allocated.Name, uid)
	}
	t.s.setClaim(allocated)
	return nil
}

func (t draClaims) GetPendingAllocation(types.UID) *resourcev1.AllocationResult { return nil }

func (t draClaims) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool { return false }

func (t draClaims) AssumeClaimAfterAPICall(*resourcev1.ResourceClaim) error {
	return fmt.Errorf("the simulation makes no API calls")
}

func (t draClaims) AssumedClaimRestore(string, string) {}

// templateSlices are the ResourceSlices a node named node publishes for
// a shape's template slices.
func templateSlices(templates []v1alpha1.TemplateResourceSlice, node string) []*resourcev1.ResourceSlice {
	if len(templates) == 0 {
		return nil
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(templates))
	for _, t := range templates {
		slice := t.ForNode(node)
		slice.UID = types.UID("claimscale-sim/slice/" + node + "/" + t.Driver)
		out = append(out, slice)
	}
	return out
}

// templateDevice finds a device of a template by its reference.
func templateDevice(templates []v1alpha1.TemplateResourceSlice, ref deviceRef) (v1alpha1.TemplateDevice, bool) {
	for _, t := range templates {
		if t.Driver != ref.driver || t.Pool != ref.pool {
			continue
		}
		for _, d := range t.Devices {
			if d.Name == ref.device {
				return d, true
			}
		}
	}
	return v1alpha1.TemplateDevice{}, false
}

// holdsDevices reports whether a shape's template has every device in
// refs, each as the node's current template has it: a node may narrow to
// the shape without losing a device it gave a pod.
func holdsDevices(shape, current []v1alpha1.TemplateResourceSlice, refs []deviceRef) bool {
	for _, ref := range refs {
		want, ok := templateDevice(current, ref)
		if !ok {
			return false
		}
		have, ok := templateDevice(shape, ref)
		if !ok || !reflect.DeepEqual(have, want) {
			return false
		}
	}
	return true
}

// refsOf lists the devices of a claim's allocation on a node, as
// template references: a device of the node's own pool has pool "".
func refsOf(c *resourcev1.ResourceClaim, node string) []deviceRef {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []deviceRef
	for _, r := range c.Status.Allocation.Devices.Results {
		pool := r.Pool
		if pool == node {
			pool = ""
		}
		out = append(out, deviceRef{driver: r.Driver, pool: pool, device: r.Device})
	}
	return out
}

// templatesHaveSlices reports whether any fixed shape of the pools has
// template ResourceSlices.
func templatesHaveSlices(pools []Pool) bool {
	for _, p := range pools {
		for _, s := range p.Shapes.Fixed {
			if len(s.ResourceSlices) > 0 {
				return true
			}
		}
	}
	return false
}

// ensureDRA readies the simulation for pods with ResourceClaims: the DRA
// state (empty when the cluster has no DRA objects and no pool template
// slices: then no device exists) and the frameworks that run
// DynamicResources.
func (s *Simulator) ensureDRA(ctx context.Context) error {
	if s.snap.dra == nil {
		s.snap.withDRA(newDRAState(DRA{}))
	}
	return s.fw.draFrameworks(ctx, s.snap, s.objs)
}

// fullFor is the framework that decides a class: with DynamicResources
// for pods with ResourceClaims.
func (s *Simulator) fullFor(cls *podClass) framework.Framework {
	if cls.dra {
		return s.fw.withDRA
	}
	return s.fw.full
}

// deviceVerdict runs DynamicResources for the class's pod on a template
// node: whether a fresh node of that shape has the devices its claims ask
// for. Nothing is allocated on a template, so the verdict holds for the
// whole decision.
func (s *Simulator) deviceVerdict(ctx context.Context, cls *podClass, t *template) (*fwk.Status, error) {
	if cls.deviceState == nil || cls.deviceAt != s.snap.dra.version {
		// The allocator PreFilter builds holds the slices of the
		// templates made so far.
		cls.deviceAt = s.snap.dra.version
		state := framework.NewCycleState()
		_, st, _ := s.fw.draOnly.RunPreFilterPlugins(ctx, state, cls.rep)
		cls.deviceState, cls.devicePre = state, deviceError(st)
	}
	if st := cls.devicePre; st != nil && !st.IsSuccess() {
		if st.IsSkip() {
			return nil, nil
		}
		return st, nil
	}
	return deviceError(s.fw.draOnly.RunFilterPlugins(ctx, cls.deviceState, cls.rep, t.info)), nil
}

// deviceError makes an error of DynamicResources (a claim or class it
// cannot read, a CEL expression that does not compile) the pod's refusal:
// it concerns that pod's claims, and must not fail the decision for all
// the others.
func deviceError(st *fwk.Status) *fwk.Status {
	if st.IsSuccess() || st.IsSkip() || st.IsRejected() {
		return st
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, st.Message()).WithPlugin(names.DynamicResources)
}

// reserveDevices keeps the devices Filter chose for a pod on a node: the
// plugin's Reserve writes the allocation into the DRA state, and the
// devices are noted against the node, so that it narrows only to shapes
// that have them.
func (r *round) reserveDevices(run *classRun, pod *corev1.Pod, n *simNode) error {
	if st := r.s.fw.withDRA.RunReservePluginsReserve(r.ctx, run.state, pod, n.name); !st.IsSuccess() {
		return fmt.Errorf("reserving the devices of pod %s/%s on %s: %w", pod.Namespace, pod.Name, n.name, st.AsError())
	}
	dra := r.s.snap.dra
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		if c := dra.claim(pod.Namespace + "/" + *name); c != nil {
			dra.noteAllocated(n.name, refsOf(c, n.name))
		}
	}
	return nil
}

// releaseDevices gives back the devices of the claims a pod owns, as
// deleting the pod would: a pod moved by a removal is allocated afresh.
func (s *Simulator) releaseDevices(pod *corev1.Pod) {
	dra := s.snap.dra
	if dra == nil {
		return
	}
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		c := dra.claim(pod.Namespace + "/" + *name)
		if c == nil || c.Status.Allocation == nil || resourceclaim.IsForPod(pod, c, false) != nil {
			continue
		}
		released := c.DeepCopy()
		released.Status.Allocation, released.Status.ReservedFor = nil, nil
		dra.setClaim(released)
	}
}

// deviceTemplates are the template slices of a node's current template.
func (n *simNode) deviceTemplates() []v1alpha1.TemplateResourceSlice {
	if n.tmpl == nil {
		return nil
	}
	return n.tmpl.shape.shape.ResourceSlices
}

// readyForClaims readies DRA when a pod of items has ResourceClaims.
func (s *Simulator) readyForClaims(ctx context.Context, items []item) error {
	for _, it := range items {
		if it.cls.dra {
			return s.ensureDRA(ctx)
		}
	}
	return nil
}

// describeClaims says what a pod's claims ask for: per request, how many
// devices of which class, with which selectors.
func describeClaims(pod *corev1.Pod, dra *draState) string {
	var parts []string
	for i := range pod.Spec.ResourceClaims {
		ref := &pod.Spec.ResourceClaims[i]
		name, _, err := resourceclaim.Name(pod, ref)
		if err != nil {
			parts = append(parts, fmt.Sprintf("claim %s has no ResourceClaim yet", ref.Name))
			continue
		}
		if name == nil {
			continue
		}
		var c *resourcev1.ResourceClaim
		if dra != nil {
			c = dra.claim(pod.Namespace + "/" + *name)
		}
		if c == nil {
			parts = append(parts, fmt.Sprintf("claim %s/%s not found", pod.Namespace, *name))
			continue
		}
		for _, req := range c.Spec.Devices.Requests {
			parts = append(parts, fmt.Sprintf("claim %s/%s request %s: %s", c.Namespace, c.Name, req.Name, describeRequest(req, dra)))
		}
	}
	return strings.Join(parts, "; ")
}

func describeRequest(req resourcev1.DeviceRequest, dra *draState) string {
	if e := req.Exactly; e != nil {
		return describeExact(e.DeviceClassName, e.AllocationMode, e.Count, e.Selectors, dra)
	}
	var alts []string
	for _, sub := range req.FirstAvailable {
		alts = append(alts, describeExact(sub.DeviceClassName, sub.AllocationMode, sub.Count, sub.Selectors, dra))
	}
	return "the first available of " + strings.Join(alts, ", or ")
}

func describeExact(class string, mode resourcev1.DeviceAllocationMode, count int64, selectors []resourcev1.DeviceSelector, dra *draState) string {
	n := "1 device"
	switch {
	case mode == resourcev1.DeviceAllocationModeAll:
		n = "all devices"
	case count > 1:
		n = fmt.Sprintf("%d devices", count)
	}
	out := fmt.Sprintf("%s of device class %s", n, class)
	var cels []string
	if dra != nil {
		if c, ok := dra.classes[class]; ok {
			for _, s := range c.Spec.Selectors {
				if s.CEL != nil {
					cels = append(cels, s.CEL.Expression)
				}
			}
		} else {
			out += " (no such DeviceClass)"
		}
	}
	for _, s := range selectors {
		if s.CEL != nil {
			cels = append(cels, s.CEL.Expression)
		}
	}
	if len(cels) > 0 {
		out += " where " + strings.Join(cels, " && ")
	}
	return out
}

// devicesOffered says which devices the pool's shapes have, by driver
// and count ("gpu.example.com: 1 on g1, 4 on g4"), "" for none.
func (p *poolState) devicesOffered() string {
	var shapes []*shapeInfo
	if p.flex == nil {
		shapes = p.shapes
	}
	byDriver := map[string][]string{}
	var order []string
	for _, si := range shapes {
		for _, t := range si.shape.ResourceSlices {
			if _, ok := byDriver[t.Driver]; !ok {
				order = append(order, t.Driver)
			}
			byDriver[t.Driver] = append(byDriver[t.Driver], fmt.Sprintf("%d on %s", len(t.Devices), si.shape.Name))
		}
	}
	sort.Strings(order)
	parts := make([]string, 0, len(order))
	for _, d := range order {
		parts = append(parts, d+": "+strings.Join(byDriver[d], ", "))
	}
	return strings.Join(parts, "; ")
}

// takenNote says which nodes have devices the pod's claims could not get
// there, by pool: their devices are allocated to other pods (or to the
// pods this round placed before), "" for none.
func takenNote(nodes []*simNode) string {
	if len(nodes) == 0 {
		return ""
	}
	byPool := map[string][]string{}
	var pools []string
	for _, n := range nodes {
		pool := ""
		if n.pool != nil {
			pool = n.pool.name
		} else {
			pool = n.labels[v1alpha1.LabelNodePool]
		}
		if _, ok := byPool[pool]; !ok {
			pools = append(pools, pool)
		}
		byPool[pool] = append(byPool[pool], n.name)
	}
	sort.Strings(pools)
	parts := make([]string, 0, len(pools))
	for _, pool := range pools {
		what := "node"
		if len(byPool[pool]) > 1 {
			what = "nodes"
		}
		if pool == "" {
			parts = append(parts, fmt.Sprintf("%s %s", what, strings.Join(byPool[pool], ", ")))
		} else {
			parts = append(parts, fmt.Sprintf("pool %q's %s %s", pool, what, strings.Join(byPool[pool], ", ")))
		}
	}
	return "the devices of " + strings.Join(parts, " and ") + " that the claims could use are allocated to other pods"
}

// devicesWouldServe reports whether a node's devices would satisfy the
// class's claims were none of them allocated: whether a fresh node of its
// pool and shape would (the template of a booting or new node; an
// existing node's by its pool and instance-type labels).
func (r *round) devicesWouldServe(cls *podClass, n *simNode) (bool, error) {
	t := n.tmpl
	if t == nil {
		p := r.s.poolByName[n.labels[v1alpha1.LabelNodePool]]
		if p == nil {
			return false, nil
		}
		si := p.byName[n.labels[corev1.LabelInstanceTypeStable]]
		if si == nil || len(si.shape.ResourceSlices) == 0 {
			return false, nil
		}
		zone := n.labels[corev1.LabelTopologyZone]
		if !slices.Contains(p.zones, zone) {
			zone = p.zones[0]
		}
		var err error
		if t, err = r.s.template(r.ctx, p, si, zone); err != nil {
			return false, err
		}
	}
	if len(t.shape.shape.ResourceSlices) == 0 {
		return false, nil
	}
	st, err := r.s.templateVerdict(r.ctx, cls, t)
	return err == nil && st.IsSuccess(), err
}
