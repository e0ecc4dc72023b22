package scheduling

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
)

// classRun is the state of placing one run of a class through the full
// framework.
type classRun struct {
	cls *podClass
	// state is the class's PreFilter state, kept current with AddPod as
	// its pods are placed; nil when it must be computed again.
	state   fwk.CycleState
	stateAt int
	pre     *fwk.PreFilterResult
	failed  string
	// known are the topology values of spread constraint keys the state
	// has seen; a node bringing a new one makes the state stale.
	known map[string]map[string]bool
	// view names the nodes PreFilter is shown: those with pods the class
	// interacts with, one node per spread domain, and the nodes made
	// during the run. Other nodes add nothing to the class's PreFilter
	// state, and leaving them out keeps PreFilter from costing a pass over
	// the whole cluster per pod. viewAll is set when every node counts
	// (spread over hostnames, non-default inclusion policies).
	view    []string
	inView  map[string]bool
	viewAll bool
	// self is set when the class's pods count for its own terms, so the
	// nodes they land on join the view.
	self bool
	// spread decides a class whose only pod-dependent constraint is hard
	// spread, without the framework (see counted.go).
	counted *countedRun
	// watches are the class's hard spreads as watched (see watched.go),
	// once one of its pods is placed.
	watches []*spreadWatch
	// devicesAt is the DRA state's version the state was built on.
	devicesAt int
}

// buildView picks the nodes a class's PreFilter must see.
func (r *round) buildView(run *classRun) {
	cls := run.cls
	run.inView = map[string]bool{}
	run.self = cls.interacts(cls.rep, cls.info.GetRequiredAntiAffinityTerms(), r.s.nsLabels)
	for _, c := range cls.hardSpread {
		if c.TopologyKey == corev1.LabelHostname ||
			c.NodeAffinityPolicy != nil && *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyIgnore ||
			c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
			run.viewAll = true
			return
		}
	}
	// Pods are looked at a class at a time: members share labels and
	// terms, so one check stands for all of them.
	for _, c := range r.s.existing {
		if cls.interacts(c.rep, c.info.GetRequiredAntiAffinityTerms(), r.s.nsLabels) {
			for _, name := range r.s.boundWhere(c) {
				r.addToView(run, name)
			}
		}
	}
	for _, c := range r.placedClasses {
		if cls.interacts(c.rep, c.info.GetRequiredAntiAffinityTerms(), r.s.nsLabels) {
			for _, name := range c.where {
				r.addToView(run, name)
			}
		}
	}
	seen := map[*template]bool{}
	interacting := map[*template]bool{}
	for _, nodes := range [][]*simNode{r.nodes, r.slots} {
		for _, n := range nodes {
			if n.tmpl == nil || len(n.ds) == 0 {
				continue
			}
			if !seen[n.tmpl] {
				seen[n.tmpl] = true
				for _, p := range n.tmpl.ds {
					anti, _ := fwk.GetAffinityTerms(p, fwk.GetPodAntiAffinityTerms(p.Spec.Affinity))
					if cls.interacts(p, anti, r.s.nsLabels) {
						interacting[n.tmpl] = true
					}
				}
			}
			if interacting[n.tmpl] {
				r.addToView(run, n.name)
			}
		}
	}
	if len(cls.hardSpread) == 0 {
		return
	}
	// One node per spread domain keeps every domain in the count.
	required := nodeaffinity.GetRequiredNodeAffinity(cls.rep)
	domains := map[string]bool{}
	for _, ni := range r.s.snap.list() {
		node := ni.Node()
		if ok, _ := required.Match(node); !ok {
			continue
		}
		for _, c := range cls.hardSpread {
			v, has := node.Labels[c.TopologyKey]
			if key := c.TopologyKey + "\x00" + v; has && !domains[key] {
				domains[key] = true
				r.addToView(run, node.Name)
			}
		}
	}
}

func (r *round) addToView(run *classRun, name string) {
	if run == nil || run.viewAll || run.inView[name] {
		return
	}
	run.inView[name] = true
	run.view = append(run.view, name)
}

// placeComplex places pods one at a time through PreFilter and Filter of
// every plugin. Nodes that fail in a way more pods cannot undo are skipped
// for the rest of the run.
func (r *round) placeComplex(cls *podClass, pods []*corev1.Pod) error {
	run := &classRun{cls: cls}
	if cls.counted {
		// No PreFilter state: no view to build.
		run.counted, run.viewAll = r.newCountedRun(cls), true
	} else {
		r.buildView(run)
	}
	defer r.dropSlots()
	if len(cls.hardSpread) > 0 && r.allowOpen {
		// Every pool and zone the class could open a node in is a domain
		// with no pods yet: present them, as Karpenter does, so that
		// spreading opens nodes across zones.
		opts, _, err := r.options(cls)
		if err != nil {
			return err
		}
		if run.counted != nil {
			// Counted, they need no node in the snapshot.
			return r.placeCounted(run, pods, opts)
		}
		for _, o := range opts {
			n, err := r.createNode(o)
			if err != nil {
				return err
			}
			r.slots = append(r.slots, n)
			r.addToView(run, n.name)
		}
	}
	return r.placeEach(run, pods)
}

// placeCounted places a counted-spread class with the pools and zones it
// could open a node in as empty domains of its count.
func (r *round) placeCounted(run *classRun, pods []*corev1.Pod, opts []option) error {
	for _, o := range opts {
		largest := o.cands[0]
		for _, si := range o.cands {
			if si.alloc.cpu > largest.alloc.cpu || si.alloc.cpu == largest.alloc.cpu && si.alloc.mem > largest.alloc.mem {
				largest = si
			}
		}
		t, err := r.s.template(r.ctx, o.pool, largest, o.zone)
		if err != nil {
			return err
		}
		run.counted.empty = append(run.counted.empty, t)
	}
	return r.placeEach(run, pods)
}

// placeEach places a run's pods one at a time.
func (r *round) placeEach(run *classRun, pods []*corev1.Pod) error {
	cls := run.cls
	// dead is kept for the next run: one per class, and a class of one pod
	// is common.
	dead := r.dead[:0]
	defer func() { r.dead = dead }()
	cursor := 0
	for i, pod := range pods {
		if cls.dra {
			// Each pod has claims of its own: PreFilter reads them, and
			// the devices given to the pods before.
			run.state = nil
		}
		if err := r.ensureState(run, pod); err != nil {
			return err
		}
		if run.failed != "" {
			r.fail(pods[i:], run.failed)
			return nil
		}
		var target *simNode
		var taken []*simNode
		scan := len(r.nodes)
		if r.excludedEverywhere(run) {
			scan = 0
		}
		watched := r.watched(cls)
		for pass := 0; target == nil && pass < 2; pass++ {
			if pass == 1 {
				if !watched || scan == 0 {
					break
				}
				// No node takes the pod within the watches: one that
				// takes it without does, before a node is opened.
				r.breakWatches = true
			}
			for ni := cursor; ni < scan; ni++ {
				if ni < len(dead) && dead[ni] {
					continue
				}
				n := r.nodes[ni]
				st, err := r.try(run, pod, n)
				if err != nil {
					r.breakWatches = false
					return err
				}
				if st.IsSuccess() {
					target = n
					break
				}
				if pass == 0 && cls.dra && st.Plugin() == names.DynamicResources {
					ok, err := r.devicesWouldServe(cls, n)
					if err != nil {
						return err
					}
					if ok {
						taken = append(taken, n)
					}
				}
				if monotone(st) {
					for len(dead) <= ni {
						dead = append(dead, false)
					}
					dead[ni] = true
				}
			}
			r.breakWatches = false
		}
		for cursor < len(dead) && dead[cursor] {
			cursor++
		}
		if target == nil {
			if !r.allowOpen {
				r.fail(pods[i:], "no remaining node fits the pod")
				return nil
			}
			n, reason, refusals, err := r.openFor(run, pod)
			if err != nil {
				return err
			}
			if n == nil && watched {
				r.breakWatches = true
				n, reason, refusals, err = r.openFor(run, pod)
				r.breakWatches = false
				if err != nil {
					return err
				}
			}
			if n == nil {
				failed := len(r.unschedulable)
				if refusals != nil || reason == "" {
					r.failRefused(pods[i:], refusals)
				} else {
					r.fail(pods[i:], reason)
				}
				if note := takenNote(taken); note != "" {
					for k := failed; k < len(r.unschedulable); k++ {
						r.unschedulable[k].Reason += "; " + note
					}
				}
				return nil
			}
			target = n
		}
		if cls.dra {
			// Before place: narrowing a new node keeps the shapes that
			// have the devices the pod is given.
			if err := r.reserveDevices(run, pod, target); err != nil {
				return err
			}
		}
		pi, err := r.place(cls, target, pods[i:i+1])
		if err != nil {
			return err
		}
		if len(cls.hardSpread) > 0 {
			if err := r.watch(run, target); err != nil {
				return err
			}
		}
		if run.self {
			r.addToView(run, target.name)
		}
		if run.counted != nil {
			r.countedPlaced(cls, run.counted, target)
		}
		switch {
		case cls.dra:
			run.state = nil
		case len(cls.hardSpread) > 0:
			// PodTopologySpread's AddPod tracks only the two smallest
			// domains, which is wrong once a third exists: compute afresh.
			run.state = nil
		case run.state != nil:
			ni := r.s.snap.lookup(target.name)
			if st := r.s.fw.full.RunPreFilterExtensionAddPod(r.ctx, run.state, cls.rep, pi, ni); !st.IsSuccess() {
				run.state = nil
			}
		}
	}
	return nil
}

// excludedEverywhere reports whether a counted class's anti-affinity
// keeps its pods off every node there is: every node has the key of one
// of its terms, and every domain of the key holds a pod the term matches.
// A scan would fail on each node in turn: a class whose pods each need a
// node of their own (the anti-affine fifth of the diverse mix) would scan
// every node opened before it, for each of its pods, to open one anyway.
func (r *round) excludedEverywhere(run *classRun) bool {
	sr := run.counted
	if sr == nil || len(sr.anti) == 0 {
		return false
	}
	nodes := len(r.s.snap.list())
	for _, tc := range sr.anti {
		// Only sums kept already, followed from the log of changed
		// nodes: summing a term anew is a pass over every node, which the
		// scan it would spare may not cost (refreshCounts, which would
		// also count the class's spread domains, is not called either).
		if !tc.tally.summing(r.s.snap, tc.term.TopologyKey) {
			continue
		}
		sums := tc.tally.sumsOf(r.s.snap, tc.term.TopologyKey)
		withKey, free := 0, false
		if sums.host {
			for count, n := range sums.perNode {
				withKey += n
				free = free || count == 0 && n > 0
			}
		} else {
			for v, n := range sums.nodes {
				withKey += n
				free = free || sums.domains[v] == 0
			}
		}
		if withKey == nodes && !free {
			return true
		}
	}
	return false
}

// monotone reports whether a Filter failure stays a failure as more pods
// are added: everything but topology spread and pod affinity, which more
// pods can satisfy.
func monotone(st *fwk.Status) bool {
	switch st.Plugin() {
	case names.PodTopologySpread:
		return false
	case names.InterPodAffinity:
		for _, r := range st.Reasons() {
			if r == interpodaffinity.ErrReasonAffinityRulesNotMatch {
				return false
			}
		}
	}
	return true
}

// ensureState runs PreFilter for the class if its state is missing.
func (r *round) ensureState(run *classRun, pod *corev1.Pod) error {
	if run.state != nil && run.cls.dra && run.devicesAt != r.s.snap.dra.version {
		// A node came or went since PreFilter, and its devices with it.
		run.state = nil
	}
	if run.state != nil || run.failed != "" || run.counted != nil {
		return nil
	}
	state := framework.NewCycleState()
	var nodes []fwk.NodeInfo
	if run.viewAll {
		nodes = r.s.snap.list()
	} else {
		nodes = make([]fwk.NodeInfo, 0, len(run.view))
		for _, name := range run.view {
			if ni := r.s.snap.lookup(name); ni != nil {
				nodes = append(nodes, ni)
			}
		}
	}
	r.s.snap.view = nodes
	res, st, _ := r.s.fullFor(run.cls).RunPreFilterPlugins(r.ctx, state, pod)
	r.s.snap.view = nil
	if run.cls.dra {
		st = deviceError(st)
	}
	if !st.IsSuccess() {
		if !st.IsRejected() {
			return fmt.Errorf("pre-filtering pod %s/%s: %w", pod.Namespace, pod.Name, st.AsError())
		}
		run.failed = st.Message()
		return nil
	}
	run.state, run.pre, run.stateAt = state, res, r.version
	if run.cls.dra {
		run.devicesAt = r.s.snap.dra.version
	}
	byValue := false
	for _, c := range run.cls.hardSpread {
		byValue = byValue || c.TopologyKey != corev1.LabelHostname
	}
	if byValue {
		run.known = map[string]map[string]bool{}
		required := nodeaffinity.GetRequiredNodeAffinity(run.cls.rep)
		for _, ni := range nodes {
			node := ni.Node()
			if ok, _ := required.Match(node); !ok {
				continue
			}
			for _, c := range run.cls.hardSpread {
				if c.TopologyKey == corev1.LabelHostname {
					// Every node is a domain of its own: noteAdded
					// needs no list of them.
					continue
				}
				if v, ok := node.Labels[c.TopologyKey]; ok {
					if run.known[c.TopologyKey] == nil {
						run.known[c.TopologyKey] = map[string]bool{}
					}
					run.known[c.TopologyKey][v] = true
				}
			}
		}
	}
	return nil
}

// noteAdded marks the run's state stale when a node just added could change
// what PreFilter computed: a new spread domain, or DaemonSet pods the class's
// terms see.
func (r *round) noteAdded(run *classRun, n *simNode) {
	if run == nil || run.state == nil {
		return
	}
	for _, p := range n.ds {
		anti, _ := fwk.GetAffinityTerms(p, fwk.GetPodAntiAffinityTerms(p.Spec.Affinity))
		if run.cls.interacts(p, anti, r.s.nsLabels) {
			run.state = nil
			return
		}
	}
	for _, c := range run.cls.hardSpread {
		if c.NodeAffinityPolicy != nil && *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyIgnore ||
			c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
			run.state = nil
			return
		}
		if v, ok := n.labels[c.TopologyKey]; ok && (c.TopologyKey == corev1.LabelHostname || !run.known[c.TopologyKey][v]) {
			run.state = nil
			return
		}
	}
}

// try runs the checks for one pod of a class on one node, cheapest first.
func (r *round) try(run *classRun, pod *corev1.Pod, n *simNode) (*fwk.Status, error) {
	ok, err := r.staticOK(run.cls, n)
	if err != nil {
		return nil, err
	}
	if !ok {
		return failStatic, nil
	}
	if run.pre != nil && !run.pre.AllNodes() && !run.pre.NodeNames.Has(n.name) {
		return failPreFilter, nil
	}
	if r.room(run.cls, n) < 1 {
		return failResources, nil
	}
	if r.watchedRoom(run.cls, n) < 1 {
		// More pods the spread selector of a pod placed earlier counts
		// would break its spread.
		return failSpreadSkew, nil
	}
	if run.counted != nil {
		// Resources and the static filters are decided above; the class
		// has no ports, volumes or pod (anti-)affinity, and no pod's
		// anti-affinity selects it.
		return r.countedFilter(run.cls, run.counted, n), nil
	}
	if run.cls.dra {
		if err := r.ensureState(run, pod); err != nil {
			return nil, err
		}
		if run.failed != "" {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, run.failed), nil
		}
	}
	st := r.s.fullFor(run.cls).RunFilterPlugins(r.ctx, run.state, pod, r.s.snap.lookup(n.name))
	if run.cls.dra {
		st = deviceError(st)
	}
	if !st.IsSuccess() && !st.IsRejected() {
		return nil, fmt.Errorf("filtering pod %s/%s on %s: %w", pod.Namespace, pod.Name, n.name, st.AsError())
	}
	return st, nil
}

// openFor opens a node for a pod of a class that needs the full framework,
// trying the options in order. When it opens none, it returns either a
// reason that concerns every pool or each pool's refusal.
func (r *round) openFor(run *classRun, pod *corev1.Pod) (*simNode, string, []PoolRefusal, error) {
	opts, reasons, err := r.options(run.cls)
	if err != nil {
		return nil, "", nil, err
	}
	for _, o := range opts {
		n := r.slotFor(o)
		fresh := n == nil
		if fresh {
			if n, err = r.createNode(o); err != nil {
				return nil, "", nil, err
			}
			r.addToView(run, n.name)
			r.noteAdded(run, n)
		} else {
			n.cands = append([]*shapeInfo(nil), o.cands...)
			n.shapesChanged()
		}
		if err := r.ensureState(run, pod); err != nil {
			return nil, "", nil, err
		}
		if run.failed != "" {
			if fresh {
				r.removeNode(run, n)
			}
			return nil, run.failed, nil, nil
		}
		st, err := r.try(run, pod, n)
		if err != nil {
			return nil, "", nil, err
		}
		if st.IsSuccess() {
			if !fresh {
				if err := r.takeSlot(run, n); err != nil {
					return nil, "", nil, err
				}
			}
			r.activate(n)
			return n, "", nil, nil
		}
		reasons[o.pool] = filterRefusal(o.pool, st, pod, r.s.snap.lookup(n.name).Node(), r.s.snap.dra)
		if fresh {
			r.removeNode(run, n)
		}
	}
	return nil, "", r.refusals(reasons), nil
}

func (r *round) slotFor(o option) *simNode {
	for _, n := range r.slots {
		if n.pool == o.pool && n.zone == o.zone && n.wake == o.sleeping {
			return n
		}
	}
	return nil
}

// takeSlot turns a slot into a node being opened and puts a fresh slot in
// its place, so the pool and zone stay a domain with room.
func (r *round) takeSlot(run *classRun, n *simNode) error {
	for i, s := range r.slots {
		if s == n {
			r.slots = append(r.slots[:i], r.slots[i+1:]...)
			break
		}
	}
	// The slot is about to count against the pool, so the replacement must
	// fit the limits with it, and a sleeping machine wakes once.
	n.pool.used.nodes++
	if n.wake != nil {
		r.woken[n.wake] = true
	}
	opts, _, err := r.options(run.cls)
	n.pool.used.nodes--
	if err != nil {
		return err
	}
	for _, o := range opts {
		if o.pool != n.pool || o.zone != n.zone || o.sleeping != nil {
			continue
		}
		s, err := r.createNode(o)
		if err != nil {
			return err
		}
		r.slots = append(r.slots, s)
		r.addToView(run, s.name)
		r.noteAdded(run, s)
		return nil
	}
	return nil
}

func (r *round) dropSlots() {
	for _, n := range r.slots {
		_ = r.s.snap.RemoveNode(n.name)
	}
	r.slots = nil
}

func (r *round) removeNode(run *classRun, n *simNode) {
	_ = r.s.snap.RemoveNode(n.name)
	if run != nil && run.state != nil && run.stateAt >= n.addedAt {
		run.state = nil
	}
}
