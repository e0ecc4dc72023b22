package scheduling

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// Simulator answers scheduling questions about one cluster state. Build it
// once per decision with New; Solve and SimulateRemoval each work on a fork
// of its snapshot and leave it as it was, so one Simulator can answer many
// questions. It is not safe for concurrent use.
type Simulator struct {
	snap     *Snapshot
	fw       *frameworks
	nsLabels map[string]labels.Set
	// pools by weight (highest first), then name.
	pools      []*poolState
	poolByName map[string]*poolState
	daemonSets []*appsv1.DaemonSet
	// base holds the existing and phantom nodes, in that order, each by
	// name.
	base []*simNode
	// ref is the size dominant-resource shares are taken of.
	ref vec
	// existing are the classes of the pods bound to nodes; existingAnti
	// their required anti-affinity terms. With an Existing they are shared
	// with other decisions: nothing may write to them.
	existing     []*podClass
	existingAnti [][]fwk.AffinityTerm
	// existingInfos are the NodeInfos of the existing nodes as they were
	// given, and of the phantom nodes with pods planned on them, in the
	// order of base; boundOn, built from them on first use, lists the
	// nodes each existing class's pods are on.
	existingInfos []fwk.NodeInfo
	boundOn       map[*podClass][]string
	// staticIDs number distinct node signatures for the static cache.
	staticIDs map[string]int
	// sleeping counts the sleeping machines of every pool.
	sleeping int
	// pluginsOnly sends every class with constraints through the
	// framework, none through the counts (for tests that compare them).
	pluginsOnly bool
	// objs are the objects the plugins look up, kept for the frameworks
	// built on first use.
	objs objectStore
}

type nodeKind int

const (
	existingNode nodeKind = iota
	phantomNode
	newNode
)

// simNode is a node as the packer sees it.
type simNode struct {
	name     string
	kind     nodeKind
	staticID int
	labels   map[string]string

	// Phantom and new nodes.
	pool *poolState
	tmpl *template
	ds   []*corev1.Pod

	// New nodes only: the zone, the shapes that still hold everything
	// placed on it (cheapest first; nil for a flexible pool), the current
	// flexible size, and what it holds.
	zone    string
	cands   []*shapeInfo
	flex    [2]int
	contrib vec
	podReq  vec
	// podExt are the devices its pods take, nil for none.
	podExt *scalars
	nPods  int64
	pods   []*corev1.Pod
	// segs says which class each run of pods is of.
	segs     []podSeg
	addedAt  int
	maxAlloc vec
	maxExt   *scalars
	// ver counts changes to a new node's pods and shapes; front is the
	// frontier of its shapes (nil: to compute).
	ver   int
	front []*shapeInfo
	// wake is the sleeping machine a new node is, nil for a new machine:
	// its one shape and zone are fixed.
	wake *sleepingMachine
}

// flexible reports whether a new node takes any size of its pool's
// flexible range: a sleeping machine of a flexible pool has the one size
// it was made with.
func (n *simNode) flexible() bool { return n.pool.flex != nil && n.wake == nil }

// podSeg is a run of a new node's pods of one class.
type podSeg struct {
	cls *podClass
	n   int
}

// shapesChanged notes that a new node's shapes changed.
func (n *simNode) shapesChanged() {
	n.ver++
	n.front = nil
}

// New builds a Simulator for a cluster state.
func New(ctx context.Context, c Cluster) (*Simulator, error) {
	s := &Simulator{
		snap:       NewSnapshot(),
		nsLabels:   map[string]labels.Set{},
		poolByName: map[string]*poolState{},
		daemonSets: c.DaemonSets,
		staticIDs:  map[string]int{},
	}
	for _, ns := range c.Namespaces {
		s.nsLabels[ns.Name] = labels.Set(ns.Labels)
	}
	objs, err := newObjectStore(&c)
	if err != nil {
		return nil, err
	}
	s.objs = objs
	if s.fw, err = newFrameworks(ctx, s.snap, objs); err != nil {
		return nil, err
	}
	if !c.DRA.empty() || templatesHaveSlices(c.Pools) {
		s.snap.withDRA(newDRAState(c.DRA))
	}
	for i := range c.Pools {
		p, err := newPoolState(&c.Pools[i])
		if err != nil {
			return nil, err
		}
		if _, dup := s.poolByName[p.name]; dup {
			return nil, fmt.Errorf("pool %s given twice", p.name)
		}
		s.pools = append(s.pools, p)
		s.poolByName[p.name] = p
	}
	sort.SliceStable(s.pools, func(i, j int) bool {
		if s.pools[i].weight != s.pools[j].weight {
			return s.pools[i].weight > s.pools[j].weight
		}
		return s.pools[i].name < s.pools[j].name
	})
	if c.Existing != nil && c.Existing.usable() {
		err = s.addKept(c.Existing, c.Nodes)
	} else {
		err = s.addExisting(c.Nodes, c.Pods)
	}
	if err != nil {
		return nil, err
	}
	if err := s.addInFlight(ctx, c.InFlight); err != nil {
		return nil, err
	}
	if err := s.addSleeping(c.Sleeping); err != nil {
		return nil, err
	}
	s.ref = s.referenceSize()
	return s, nil
}

// Solve is New followed by Simulator.Solve, for a single question.
func Solve(ctx context.Context, in Input) (Result, error) {
	s, err := New(ctx, in.Cluster)
	if err != nil {
		return Result{}, err
	}
	return s.Solve(ctx, in.Pending)
}

func (s *Simulator) addExisting(nodes []*corev1.Node, pods []*corev1.Pod) error {
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if at := CountedOn(p); at != "" {
			byNode[at] = append(byNode[at], withUID(p))
		}
	}
	cl := newClassifier()
	for _, n := range liveNodesByName(nodes) {
		infos := make([]fwk.PodInfo, 0, len(byNode[n.Name]))
		for _, p := range byNode[n.Name] {
			cls, err := cl.classify(p)
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			infos = append(infos, &podInfo{pod: p, cls: cls})
		}
		if err := s.snap.addNode(n, infos); err != nil {
			return err
		}
		s.addExistingNode(n, s.snap.lookup(n.Name), nodeSignature(n))
	}
	s.setExistingClasses(cl.classes)
	return nil
}

// addKept starts the snapshot from the NodeInfos an Existing keeps, in a
// layer of its own that the simulation never writes to: they are shared
// with other decisions.
func (s *Simulator) addKept(existing *Existing, nodes []*corev1.Node) error {
	sorted := liveNodesByName(nodes)
	view, err := existing.view(sorted)
	if err != nil {
		return err
	}
	for i, n := range sorted {
		if err := s.snap.addNodeInfo(view.infos[i]); err != nil {
			return err
		}
		s.addExistingNode(n, view.infos[i], view.sigs[i])
	}
	s.snap.freeze()
	s.setExistingClasses(view.classes)
	return nil
}

// liveNodesByName is the nodes not being deleted, by name: the nodes a
// decision simulates, in the order it goes through them.
func liveNodesByName(nodes []*corev1.Node) []*corev1.Node {
	live := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		if n.DeletionTimestamp == nil {
			live = append(live, n)
		}
	}
	slices.SortFunc(live, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	return live
}

func (s *Simulator) addExistingNode(n *corev1.Node, ni fwk.NodeInfo, sig string) {
	s.base = append(s.base, &simNode{
		name:     n.Name,
		kind:     existingNode,
		labels:   n.Labels,
		staticID: s.staticID(sig),
	})
	s.existingInfos = append(s.existingInfos, ni)
}

func (s *Simulator) setExistingClasses(classes []*podClass) {
	s.existing = classes
	s.existingAnti = nil
	for _, c := range classes {
		if terms := c.info.GetRequiredAntiAffinityTerms(); len(terms) > 0 {
			s.existingAnti = append(s.existingAnti, terms)
		}
	}
}

// boundWhere lists the existing nodes a class's bound pods are on, in node
// order. It is worked out once, for every class, when first asked: only
// pods with affinity or spread constraints ask, and a class kept by an
// Existing is shared, so it cannot carry the list itself.
func (s *Simulator) boundWhere(cls *podClass) []string {
	if s.boundOn == nil {
		s.boundOn = map[*podClass][]string{}
		for _, ni := range s.existingInfos {
			name := ni.Node().Name
			for _, pi := range ni.GetPods() {
				info, ok := pi.(*podInfo)
				if !ok {
					continue
				}
				if where := s.boundOn[info.cls]; len(where) == 0 || where[len(where)-1] != name {
					s.boundOn[info.cls] = append(where, name)
				}
			}
		}
	}
	return s.boundOn[cls]
}

func (s *Simulator) addInFlight(ctx context.Context, claims []InFlight) error {
	sorted := append([]InFlight(nil), claims...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	cl := newClassifier()
	for _, c := range sorted {
		if s.snap.lookup(c.Name) != nil {
			// The claim's node has registered: the real node counts.
			continue
		}
		p, ok := s.poolByName[c.Pool]
		if !ok {
			return fmt.Errorf("in-flight claim %s names unknown pool %s", c.Name, c.Pool)
		}
		si := p.shapeNamed(c.Shape)
		t, err := s.template(ctx, p, si, c.Zone)
		if err != nil {
			return err
		}
		n := &simNode{name: c.Name, kind: phantomNode, pool: p, tmpl: t, zone: c.Zone, staticID: t.staticID}
		if err := s.addTemplateNode(n, t); err != nil {
			return fmt.Errorf("adding in-flight claim %s: %w", c.Name, err)
		}
		s.base = append(s.base, n)
		if len(c.Pods) == 0 {
			continue
		}
		var ni fwk.NodeInfo
		for _, p := range c.Pods {
			if Terminated(p) {
				continue
			}
			p = withUID(p)
			cls, err := cl.classify(p)
			if err != nil {
				return fmt.Errorf("pod %s/%s planned on in-flight claim %s: %w", p.Namespace, p.Name, c.Name, err)
			}
			if ni, err = s.snap.addPodInfo(&podInfo{pod: p, cls: cls}, c.Name); err != nil {
				return fmt.Errorf("pod %s/%s planned on in-flight claim %s: %w", p.Namespace, p.Name, c.Name, err)
			}
		}
		if ni != nil {
			// The planned pods count as bound ones do: their classes'
			// anti-affinity and the nodes they are on.
			s.existingInfos = append(s.existingInfos, ni)
		}
	}
	if len(cl.classes) > 0 {
		// A copy: the existing classes may be an Existing's, shared with
		// other decisions.
		s.setExistingClasses(append(slices.Clip(s.existing), cl.classes...))
	}
	return nil
}

// CountedOn is the node a pod counts on, "" for none: its node while it is
// bound and has not finished, as the scheduler's cache counts it, and a
// pending pod's nominated node. The scheduler keeps a nominated pod's room
// on its node and, in the first of its two Filter passes, counts it there
// for every pod of no higher priority; the packer counts it there too.
// Left out, a round would see a pod whose spread is even only once the
// nominated pods bind (the scheduler clears the nomination of a pod it
// failed, and the pod is pending again) as needing a node of its own, and
// buy one while the room planned for it waits.
func CountedOn(p *corev1.Pod) string {
	switch {
	case Terminated(p):
		return ""
	case p.Spec.NodeName != "":
		return p.Spec.NodeName
	case p.DeletionTimestamp == nil && !BelongsToNode(p):
		return p.Status.NominatedNodeName
	}
	return ""
}

// Terminated reports whether a pod has finished (Succeeded or Failed).
func Terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// withUID gives a pod without a UID one derived from its name, since the
// scheduler's NodeInfo tells pods apart by UID.
func withUID(p *corev1.Pod) *corev1.Pod {
	if p.UID != "" {
		return p
	}
	c := *p
	c.UID = types.UID("claimscale-sim/" + p.Namespace + "/" + p.Name)
	return &c
}

// referenceSize is the largest allocatable any pool offers, else the largest
// node's: the yardstick for "dominant resource".
func (s *Simulator) referenceSize() vec {
	var ref vec
	grow := func(v vec) {
		ref.cpu, ref.mem, ref.eph = max(ref.cpu, v.cpu), max(ref.mem, v.mem), max(ref.eph, v.eph)
	}
	for _, p := range s.pools {
		for _, si := range p.shapes {
			grow(si.alloc)
		}
		if p.flex != nil {
			grow(p.flexMax.alloc)
		}
	}
	if ref.cpu == 0 || ref.mem == 0 {
		for _, n := range s.base {
			if ni := s.snap.lookup(n.name); ni != nil {
				grow(vecOf(ni.GetAllocatable()))
			}
		}
	}
	ref.cpu, ref.mem = max(ref.cpu, 1), max(ref.mem, 1)
	return ref
}
