package scheduling

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// round is one packing pass over a forked snapshot.
type round struct {
	s         *Simulator
	ctx       context.Context
	nodes     []*simNode
	allowOpen bool
	opened    []*simNode
	slots     []*simNode
	seq       int
	// version counts nodes added, so a class run knows whether its
	// PreFilter state saw a node.
	version       int
	placements    []Placement
	unschedulable []Unschedulable
	// failedCls is the class of each unschedulable pod; current the class
	// being packed.
	failedCls []*podClass
	current   *podClass
	// placedClasses are the classes with pods placed in this round.
	placedClasses []*podClass
	// openedIn counts the nodes opened per pool and zone.
	openedIn map[zoneKey]int
	// optCache holds each class's options while no pool has limits.
	optCache map[optionKey]cachedOptions
	// member is scratch space for frontier, by shapeInfo.idx.
	member []bool
	// tallies count the pods each spread selector matches, per node;
	// placed logs per node the pods placed on it, for the tallies.
	tallies map[tallyKey]*tally
	placed  map[string][]addedPods
	// rooms memoises room on new nodes by the node's version.
	rooms map[roomKey]roomEntry
	// woken are the sleeping machines the round opened.
	woken map[*sleepingMachine]bool
	// dead is placeEach's scratch space.
	dead []bool
	// watches are the hard spreads of the pods placed (see watched.go),
	// in the order they were made; watchedBy lists those that count a
	// class.
	watches    map[watchKey]*spreadWatch
	watchOrder []*spreadWatch
	watchedBy  map[*podClass]watchList
	// breakWatches is set while a pod is placed that no node takes within
	// the watches.
	breakWatches bool
}

// addedPods is k pods of cls that place added to a node, with the node's
// NodeInfo generation before and after.
type addedPods struct {
	cls           *podClass
	k             int
	before, after int64
}

type zoneKey struct {
	pool *poolState
	zone string
}

func (s *Simulator) newRound(ctx context.Context, nodes []*simNode, allowOpen bool) *round {
	for _, p := range s.pools {
		p.used = p.inUse
	}
	return &round{s: s, ctx: ctx, nodes: append([]*simNode(nil), nodes...), allowOpen: allowOpen, openedIn: map[zoneKey]int{}, rooms: map[roomKey]roomEntry{}, optCache: map[optionKey]cachedOptions{}, woken: map[*sleepingMachine]bool{}}
}

func (r *round) pack(items []item) error {
	if err := r.packOnce(items); err != nil {
		return err
	}
	// A pod with required affinity to pods packed after it failed for want
	// of them; one more pass places it next to them.
	var retry []item
	keep, keepCls := r.unschedulable[:0], r.failedCls[:0]
	for i, u := range r.unschedulable {
		if cls := r.failedCls[i]; len(cls.info.GetRequiredAffinityTerms()) > 0 {
			retry = append(retry, item{u.Pod, cls})
			continue
		}
		keep, keepCls = append(keep, u), append(keepCls, r.failedCls[i])
	}
	r.unschedulable, r.failedCls = keep, keepCls
	if len(retry) == 0 {
		return nil
	}
	return r.packOnce(retry)
}

func (r *round) packOnce(items []item) error {
	for i := 0; i < len(items); {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		j := i + 1
		for j < len(items) && items[j].cls == items[i].cls {
			j++
		}
		pods := make([]*corev1.Pod, 0, j-i)
		for _, it := range items[i:j] {
			pods = append(pods, it.pod)
		}
		r.current = items[i].cls
		var err error
		if items[i].cls.simple {
			err = r.placeSimple(items[i].cls, pods)
		} else {
			err = r.placeComplex(items[i].cls, pods)
		}
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// placeSimple places pods whose fit depends on nothing but static filters
// and resources: it fills each node with as many as fit in one step.
func (r *round) placeSimple(cls *podClass, pods []*corev1.Pod) error {
	i, err := r.fillNodes(cls, pods)
	if err != nil {
		return err
	}
	if i < len(pods) && r.watched(cls) {
		// What the nodes cannot take within the watches, they take
		// without, before a node is opened for it.
		r.breakWatches = true
		k, err := r.fillNodes(cls, pods[i:])
		r.breakWatches = false
		if err != nil {
			return err
		}
		i += k
	}
	for i < len(pods) {
		if !r.allowOpen {
			r.fail(pods[i:], "no remaining node has room for the pod")
			return nil
		}
		opts, reasons, err := r.options(cls)
		if err != nil {
			return err
		}
		if len(opts) == 0 {
			r.failRefused(pods[i:], r.refusals(reasons))
			return nil
		}
		// The pods left fit on no node there is, watched or not: a new
		// node goes where the watches let one pod go, and takes as many
		// as fit, so that the watches open no more nodes than without.
		n, err := r.openWatched(cls, opts)
		if err != nil {
			return err
		}
		if n == nil {
			if n, err = r.createNode(opts[0]); err != nil {
				return err
			}
		}
		r.activate(n)
		k := min(r.room(cls, n), len(pods)-i)
		if k == 0 {
			return fmt.Errorf("new node %s of pool %s has no room for pod %s/%s", n.name, n.pool.name, pods[i].Namespace, pods[i].Name)
		}
		if _, err := r.place(cls, n, pods[i:i+k]); err != nil {
			return err
		}
		i += k
	}
	return nil
}

// fillNodes places as many of pods as the nodes take, in node order, and
// returns how many.
func (r *round) fillNodes(cls *podClass, pods []*corev1.Pod) (int, error) {
	i := 0
	for ni := 0; ni < len(r.nodes) && i < len(pods); ni++ {
		n := r.nodes[ni]
		ok, err := r.staticOK(cls, n)
		if err != nil {
			return i, err
		}
		if !ok {
			continue
		}
		k := min(r.room(cls, n), len(pods)-i)
		if k > 0 {
			k = min(k, r.watchedRoom(cls, n))
		}
		if k > 0 {
			if _, err := r.place(cls, n, pods[i:i+k]); err != nil {
				return i, err
			}
			i += k
		}
	}
	return i, nil
}

// openWatched creates a node for the first option where a pod of cls
// keeps the spreads of the pods placed before it that count it (see
// watched.go); nil when there is none.
func (r *round) openWatched(cls *podClass, opts []option) (*simNode, error) {
	for _, o := range opts {
		n, err := r.createNode(o)
		if err != nil {
			return nil, err
		}
		if r.watchedRoom(cls, n) > 0 {
			return n, nil
		}
		r.removeNode(nil, n)
	}
	return nil, nil
}

func (r *round) fail(pods []*corev1.Pod, reason string) {
	for _, p := range pods {
		r.unschedulable = append(r.unschedulable, Unschedulable{Pod: p, Reason: reason})
		r.failedCls = append(r.failedCls, r.current)
	}
}

// failRefused fails pods that no pool could open a node for, keeping
// each pool's refusal.
func (r *round) failRefused(pods []*corev1.Pod, refusals []PoolRefusal) {
	reason := joinRefusals(refusals)
	if len(r.s.pools) == 0 {
		reason = "no node pool to open a node in"
	}
	for _, p := range pods {
		r.unschedulable = append(r.unschedulable, Unschedulable{Pod: p, Reason: reason, Pools: refusals})
		r.failedCls = append(r.failedCls, r.current)
	}
}

// refusals lists the per-pool refusals in pool order.
func (r *round) refusals(reasons map[*poolState]PoolRefusal) []PoolRefusal {
	var out []PoolRefusal
	for _, p := range r.s.pools {
		if why, ok := reasons[p]; ok {
			out = append(out, why)
		}
	}
	return out
}

// staticOK reports whether the static filters admit the class on a node;
// for a new node, on at least one of its remaining shapes.
func (r *round) staticOK(cls *podClass, n *simNode) (bool, error) {
	if n.kind != newNode {
		st, err := r.s.staticVerdict(r.ctx, cls, n, r.s.snap.lookup(n.name))
		return st.IsSuccess(), err
	}
	if n.flexible() {
		st, err := r.s.templateVerdict(r.ctx, cls, n.tmpl)
		return st.IsSuccess(), err
	}
	for _, si := range n.cands {
		t, err := r.s.template(r.ctx, n.pool, si, n.zone)
		if err != nil {
			return false, err
		}
		st, err := r.s.templateVerdict(r.ctx, cls, t)
		if err != nil {
			return false, err
		}
		if st.IsSuccess() {
			return true, nil
		}
	}
	return false, nil
}

// room is how many more pods of the class fit on a node by resources. For
// a new node it is the most any of its remaining shapes would take (within
// the pool's limits), which is how a new node grows to its largest shape
// before a cheaper one is picked to hold what it got.
func (r *round) room(cls *podClass, n *simNode) int {
	if n.kind != newNode {
		ni := r.s.snap.lookup(n.name)
		free := vecOf(ni.GetAllocatable()).sub(vecOf(ni.GetRequested()))
		slots := int64(ni.GetAllocatable().GetAllowedPodNumber() - len(ni.GetPods()))
		if cls.ext != nil {
			// A node's devices are read only for a pod that asks for some.
			slots = scalarFit(ni.GetAllocatable(), ni.GetRequested(), cls.ext, slots)
		}
		return fitCount(free, slots, cls.req)
	}
	p := n.pool
	if p.limCPU >= 0 || p.limMem >= 0 {
		// The budget moves with every node of the pool: no memo.
		return r.newNodeRoom(cls, n)
	}
	key := roomKey{n, cls}
	if e, ok := r.rooms[key]; ok && e.ver == n.ver {
		return e.room
	}
	room := r.newNodeRoom(cls, n)
	r.rooms[key] = roomEntry{ver: n.ver, room: room}
	return room
}

type roomKey struct {
	n   *simNode
	cls *podClass
}

type roomEntry struct {
	ver, room int
}

func (r *round) newNodeRoom(cls *podClass, n *simNode) int {
	p := n.pool
	bc, bm := p.budget(n.contrib)
	if n.flexible() {
		ci, mi, ok := p.flexLargest(bc, bm)
		if !ok {
			return 0
		}
		if cls.ext != nil {
			return 0 // a flexible range has no devices
		}
		free := p.flexAllocAt(ci, mi).sub(n.podReq).sub(n.tmpl.dsReq)
		return fitCount(free, p.maxPods-n.nPods-n.tmpl.dsCount, cls.req)
	}
	if n.front == nil {
		n.front = r.frontier(n)
	}
	// The frontier answers unless one of its shapes is out for the class
	// (a selector on instance type, the pool's limits): then all count.
	if best, ok := r.bestRoom(cls, n, n.front, bc, bm, true); ok {
		return best
	}
	best, _ := r.bestRoom(cls, n, n.cands, bc, bm, false)
	return best
}

// bestRoom is the most pods of the class any of shapes takes besides what
// the node holds. With strict set it gives up (false) on the first shape
// the class cannot use.
func (r *round) bestRoom(cls *podClass, n *simNode, shapes []*shapeInfo, bc, bm int64, strict bool) (int, bool) {
	best := 0
	for _, si := range shapes {
		if !withinBudget(si.cap, bc, bm) {
			if strict {
				return 0, false
			}
			continue
		}
		t, err := r.s.template(r.ctx, n.pool, si, n.zone)
		if err != nil {
			if strict {
				return 0, false
			}
			continue
		}
		if st, err := r.s.templateVerdict(r.ctx, cls, t); err != nil || !st.IsSuccess() {
			if strict {
				return 0, false
			}
			continue
		}
		free := si.alloc.sub(n.podReq).sub(t.dsReq)
		k := fitCount(free, si.allocPods-n.nPods-t.dsCount, cls.req)
		if cls.ext != nil && k > 0 {
			k = extRoom(si.ext, n.podExt, t.dsExt, cls.ext, k)
		}
		best = max(best, k)
	}
	return best, true
}

// frontier indexes a new node's shapes for room: those no other shape
// beats on every resource and pod slot left after its DaemonSet pods. A
// shape that is beaten holds no more of any class than the one beating
// it, so room need look at the frontier only: of a 400-shape catalog
// that is a handful. The pool's shapes are sorted for this once per zone;
// a node sweeps that order over its own shapes.
func (r *round) frontier(n *simNode) []*shapeInfo {
	if n.wake != nil {
		// One shape, and maybe one the pool no longer lists.
		return n.cands
	}
	order, err := r.effOrder(n.pool, n.zone)
	if err != nil {
		return n.cands
	}
	for len(r.member) < n.pool.nShapes {
		r.member = append(r.member, false)
	}
	for _, si := range n.cands {
		r.member[si.idx] = true
	}
	var kept []effShape
	for _, e := range order {
		if !r.member[e.si.idx] {
			continue
		}
		beaten := false
		for _, k := range kept {
			if e.eff.le(k.eff) && e.pods <= k.pods && (e.ext == nil || e.ext.within(k.ext)) {
				beaten = true
				break
			}
		}
		if !beaten {
			kept = append(kept, e)
		}
	}
	for _, si := range n.cands {
		r.member[si.idx] = false
	}
	front := make([]*shapeInfo, len(kept))
	for i, k := range kept {
		front[i] = k.si
	}
	return front
}

// effShape is a shape with what is left of it after its DaemonSet pods.
type effShape struct {
	si   *shapeInfo
	eff  vec
	pods int64
	// ext are the devices left, nil for none.
	ext *scalars
}

// effOrder is the pool's shapes in one zone, largest first by what is
// left after DaemonSet pods (cpu, then memory, disk, pod slots).
func (r *round) effOrder(p *poolState, zone string) ([]effShape, error) {
	if order, ok := p.effOrder[zone]; ok {
		return order, nil
	}
	shapes := p.shapesIn(zone)
	order := make([]effShape, 0, len(shapes))
	for _, si := range shapes {
		t, err := r.s.template(r.ctx, p, si, zone)
		if err != nil {
			return nil, err
		}
		e := effShape{si: si, eff: si.alloc.sub(t.dsReq), pods: si.allocPods - t.dsCount}
		if si.ext != nil || t.dsExt != nil {
			e.ext = combine(si.ext, t.dsExt, -1)
		}
		order = append(order, e)
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.eff.cpu != b.eff.cpu {
			return a.eff.cpu > b.eff.cpu
		}
		if a.eff.mem != b.eff.mem {
			return a.eff.mem > b.eff.mem
		}
		if a.eff.eph != b.eff.eph {
			return a.eff.eph > b.eff.eph
		}
		return a.pods > b.pods
	})
	p.effOrder[zone] = order
	return order, nil
}

// place binds pods of a class to a node and, for a new node, narrows its
// shapes to those that hold everything on it. It returns the last pod's
// PodInfo.
func (r *round) place(cls *podClass, n *simNode, pods []*corev1.Pod) (fwk.PodInfo, error) {
	// One allocation and one node lookup for the whole batch: a simple
	// class puts up to a node's pod slots here at once.
	infos := make([]podInfo, len(pods))
	for i, p := range pods {
		infos[i] = podInfo{pod: p, cls: cls}
	}
	before := r.s.snap.lookup(n.name).GetGeneration()
	if err := r.s.snap.addPodInfos(infos, n.name); err != nil {
		return nil, err
	}
	if r.placed != nil {
		r.placed[n.name] = append(r.placed[n.name], addedPods{cls: cls, k: len(pods), before: before, after: r.s.snap.lookup(n.name).GetGeneration()})
	}
	var last fwk.PodInfo = &infos[len(infos)-1]
	if len(cls.where) == 0 {
		r.placedClasses = append(r.placedClasses, cls)
	}
	cls.on(n.name)
	if n.kind != newNode {
		for _, p := range pods {
			r.placements = append(r.placements, Placement{Pod: p, Node: n.name})
		}
		return last, nil
	}
	n.ver++
	n.pods = append(n.pods, pods...)
	if k := len(n.segs); k > 0 && n.segs[k-1].cls == cls {
		n.segs[k-1].n += len(pods)
	} else {
		n.segs = append(n.segs, podSeg{cls, len(pods)})
	}
	n.podReq = n.podReq.add(cls.req.scale(len(pods)))
	if cls.ext != nil {
		n.podExt = combine(n.podExt, cls.ext, int64(len(pods)))
	}
	n.nPods += int64(len(pods))
	return last, r.narrow(cls, n)
}

// narrow keeps the shapes of a new node that hold all its pods (and admit
// the class), picks the cheapest as its current size, and updates what the
// node counts against the pool's limits and what the plugins see.
func (r *round) narrow(cls *podClass, n *simNode) error {
	p := n.pool
	bc, bm := p.budget(n.contrib)
	var contrib vec
	if n.flexible() {
		ci, mi, ok := p.flexFit(n.podReq.add(n.tmpl.dsReq), bc, bm)
		if !ok || n.nPods+n.tmpl.dsCount > p.maxPods {
			return fmt.Errorf("node %s of pool %s outgrew its shapes", n.name, p.name)
		}
		n.flex = [2]int{ci, mi}
		contrib = p.flexCapAt(ci, mi)
	} else {
		// The shapes are copied only once one is dropped, and then at
		// their full length: a node of a 400-shape catalog narrows with
		// every pod, and the slice is shared with what drain saved.
		var keep []*shapeInfo
		dropped := false
		var given []deviceRef
		if dra := r.s.snap.dra; dra != nil {
			given = dra.allocatedOn(n.name)
		}
		for i, si := range n.cands {
			t, err := r.s.template(r.ctx, p, si, n.zone)
			if err != nil {
				return err
			}
			st, err := r.s.templateVerdict(r.ctx, cls, t)
			if err != nil {
				return err
			}
			fits := st.IsSuccess() && withinBudget(si.cap, bc, bm) &&
				n.podReq.add(t.dsReq).le(si.alloc) && n.nPods+t.dsCount <= si.allocPods &&
				(n.podExt == nil && t.dsExt == nil || extFits(n.podExt, t.dsExt, si.ext)) &&
				(len(given) == 0 || holdsDevices(si.shape.ResourceSlices, n.deviceTemplates(), given))
			switch {
			case !fits && !dropped:
				dropped = true
				keep = make([]*shapeInfo, i, len(n.cands)-1)
				copy(keep, n.cands[:i])
			case fits && dropped:
				keep = append(keep, si)
			}
		}
		if dropped || len(n.cands) == 0 {
			if len(keep) == 0 {
				return fmt.Errorf("node %s of pool %s outgrew its shapes", n.name, p.name)
			}
			n.shapesChanged()
			n.cands = keep
		}
		if kept := r.withoutExhausted(n, n.cands); len(kept) != len(n.cands) {
			n.shapesChanged()
			n.cands = kept
		}
		contrib = n.cands[0].cap
	}
	p.used.cpu += contrib.cpu - n.contrib.cpu
	p.used.mem += contrib.mem - n.contrib.mem
	n.contrib = contrib
	return r.refreshNode(n)
}

// refreshNode rebuilds what the plugins see of a new node when its largest
// remaining shape changed: the node object (with the largest allocatable of
// its shapes) and its DaemonSet pods.
func (r *round) refreshNode(n *simNode) error {
	if n.flexible() {
		return nil
	}
	largest, maxAlloc := n.cands[0], vec{}
	var maxPods int64
	var maxExt *scalars
	for _, si := range n.cands {
		maxAlloc = vec{max(maxAlloc.cpu, si.alloc.cpu), max(maxAlloc.mem, si.alloc.mem), max(maxAlloc.eph, si.alloc.eph)}
		if si.ext != nil {
			maxExt = maxScalars(maxExt, si.ext)
		}
		maxPods = max(maxPods, si.allocPods)
		if si.alloc.cpu > largest.alloc.cpu || si.alloc.cpu == largest.alloc.cpu && si.alloc.mem > largest.alloc.mem {
			largest = si
		}
	}
	if maxAlloc == n.maxAlloc && maxExt.equal(n.maxExt) && largest == n.tmpl.shape {
		return nil
	}
	t, err := r.s.template(r.ctx, n.pool, largest, n.zone)
	if err != nil {
		return err
	}
	node, err := TemplateNode(n.pool.pool, largest.shape, n.zone, n.name)
	if err != nil {
		return err
	}
	node.Status.Allocatable = maxAlloc.list()
	maxExt.addTo(node.Status.Allocatable)
	node.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(maxPods, resource.DecimalSI)
	if err := r.s.snap.setNode(node); err != nil {
		return err
	}
	n.labels, n.maxAlloc, n.maxExt = node.Labels, maxAlloc, maxExt
	if dra := r.s.snap.dra; dra != nil && t != n.tmpl && (len(t.shape.shape.ResourceSlices) > 0 || len(n.tmpl.shape.shape.ResourceSlices) > 0) {
		// The node publishes the devices of its largest shape; narrowing
		// kept only shapes with the devices it gave pods.
		dra.setNodeSlices(n.name, templateSlices(t.shape.shape.ResourceSlices, n.name))
	}
	if !sameDaemonSets(t.ds, n.tmpl.ds) {
		for _, p := range n.ds {
			if err := r.s.snap.RemovePod(p, n.name); err != nil {
				return err
			}
		}
		n.ds = instantiate(t.ds, n.name)
		for _, p := range n.ds {
			pi, err := framework.NewPodInfo(p)
			if err != nil {
				return err
			}
			if _, err := r.s.snap.addPodInfo(pi, n.name); err != nil {
				return err
			}
		}
	}
	n.tmpl = t
	return nil
}

func sameDaemonSets(a, b []*corev1.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}
