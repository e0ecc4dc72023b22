package scheduling

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	fwk "k8s.io/kube-scheduler/framework"
)

// consolidate empties new nodes that hold only pods spread over hostnames
// (and pods free to move), when their pods fit on the other new nodes and
// every such spread still holds on the nodes that remain.
//
// While a class spread over hostnames is packed, the nodes the round could
// still open are domains with none of its pods, as they are for zones:
// without them a class packed early would pile onto its first nodes, and
// the nodes opened later for other pods would each be a domain with none
// of it, which the spread forbids. So each node takes at most maxSkew of
// the class, and with few nodes in the end the class has more nodes of its
// own than needed. A node that is never opened is no domain, though: the
// kube-scheduler counts the nodes that exist. Once the round's nodes are
// known, a node whose pods all go elsewhere is dropped, its pods put on
// the nodes with the fewest of their kind, and the spread checked over
// the final nodes with the plugin's arithmetic. A node is dropped only if
// all holds; nodes are tried newest first.
func (r *round) consolidate(classes []*podClass) error {
	if !r.mayDropNodes(classes) {
		return nil
	}
	m := &movers{r: r, classes: classes, kind: map[*podClass]moverKind{}, watchers: map[*podClass][]*podClass{}}
	// A node that holds the fewest of a class and has no room for more
	// keeps the class's other nodes from growing until it is dropped
	// itself: another pass may then drop what the last one could not.
	for dropped := true; dropped; {
		dropped = false
		for i := len(r.opened) - 1; i >= 0; i-- {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			x := r.opened[i]
			if !m.drainable(x) {
				continue
			}
			done, err := r.drain(x, m)
			if err != nil {
				return err
			}
			if done {
				r.dropOpened(x)
				dropped = true
			}
		}
	}
	return nil
}

// mayDropNodes reports whether dropping a node can leave every other
// pod's verdict as it was. Dropping a node only takes domains away, which
// lowers no smallest domain, unless a spread asks for more domains than
// remain: with minDomains anywhere nothing is dropped. A DaemonSet pod's
// anti-affinity may keep a class off nodes, which the counts do not look
// at.
func (r *round) mayDropNodes(classes []*podClass) bool {
	for _, others := range [][]*podClass{classes, r.s.existing} {
		for _, o := range others {
			for _, sc := range o.hardSpread {
				if sc.MinDomains != nil && *sc.MinDomains > 1 {
					return false
				}
			}
		}
	}
	for _, ds := range r.s.daemonSets {
		if a := ds.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil &&
			len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return false
		}
	}
	return true
}

// movers says, per class and worked out when first asked, whether
// consolidate may move its pods: a class free to move (see
// movableClasses), or a class spread over hostnames only that counts
// decide (see countable; whether or not this round counts it), with no
// pod (anti-)affinity, that no other class of the round or of the bound
// pods counts or keeps away: moving its pods then changes no verdict but
// its own class's, and those of the classes whose required affinity
// selects it (its watchers), which are checked.
type movers struct {
	r        *round
	classes  []*podClass
	kind     map[*podClass]moverKind
	watchers map[*podClass][]*podClass
}

type moverKind int8

const (
	unknownMover moverKind = iota
	stays
	freeMover
	spreadMover
)

// drainable reports whether x holds pods, all of classes that may move,
// some of them spread over hostnames. The cheap tests go over every pod
// first: most nodes fail them.
func (m *movers) drainable(x *simNode) bool {
	spread := false
	for _, sg := range x.segs {
		c := sg.cls
		hostname := hostnameOnly(c)
		if !hostname && !(c.simple && c.ext == nil && !c.perNode) {
			return false
		}
		spread = spread || hostname
	}
	if !spread {
		return false
	}
	for _, sg := range x.segs {
		if m.of(sg.cls) == stays {
			return false
		}
	}
	return true
}

// hostnameOnly reports whether a class's only pod-dependent constraints
// are hard spreads over hostnames that counts decide.
func hostnameOnly(c *podClass) bool {
	if len(c.hardSpread) == 0 || len(c.info.GetRequiredAffinityTerms()) > 0 || len(c.info.GetRequiredAntiAffinityTerms()) > 0 {
		return false
	}
	for _, sc := range c.hardSpread {
		if sc.TopologyKey != corev1.LabelHostname {
			return false
		}
	}
	return c.countable(false)
}

func (m *movers) spread(c *podClass) bool { return m.of(c) == spreadMover }
func (m *movers) free(c *podClass) bool   { return m.of(c) == freeMover }

func (m *movers) of(c *podClass) moverKind {
	if k := m.kind[c]; k != unknownMover {
		return k
	}
	k := stays
	nsLabels := m.r.s.nsLabels
	switch {
	case hostnameOnly(c):
		k = spreadMover
		var watchers []*podClass
	others:
		for _, others := range [][]*podClass{m.classes, m.r.s.existing} {
			for _, o := range others {
				if o == c || !o.interacts(c.rep, nil, nsLabels) {
					continue
				}
				// Required affinity to the class is checked once its pods
				// moved; bound pods keep theirs whatever moves
				// (IgnoredDuringExecution).
				if o.countsOrExcludes(c.rep, nsLabels) {
					k = stays
					break others
				}
				if !slices.Contains(m.r.s.existing, o) {
					watchers = append(watchers, o)
				}
			}
		}
		m.watchers[c] = watchers
	case c.simple && c.ext == nil && !c.perNode:
		k = freeMover
		for _, o := range m.classes {
			if !o.simple && o.interacts(c.rep, nil, nsLabels) {
				k = stays
				break
			}
		}
	}
	m.kind[c] = k
	return k
}

// drain moves x's pods onto the other new nodes and takes x out of the
// snapshot. It keeps the change and reports true when every pod found
// room and every spread class moved still holds; otherwise it puts
// everything back.
func (r *round) drain(x *simNode, m *movers) (bool, error) {
	saved := map[*simNode]simNode{}
	used := map[*poolState]usage{}
	for _, p := range r.s.pools {
		used[p] = p.used
	}
	keep := func(n *simNode) {
		if _, ok := saved[n]; !ok {
			v := *n
			v.segs, v.pods = slices.Clone(n.segs), slices.Clone(n.pods)
			saved[n] = v
		}
	}
	r.s.snap.Fork()
	undo := func() {
		r.s.snap.Revert()
		for n, v := range saved {
			ver := n.ver
			*n = v
			n.ver = ver + 1
			n.front = nil
		}
		for p, u := range used {
			p.used = u
		}
	}
	if err := r.s.snap.RemoveNode(x.name); err != nil {
		undo()
		return false, err
	}
	var spread []*podClass
	at := 0
	for _, sg := range x.segs {
		pods := x.pods[at : at+sg.n]
		at += sg.n
		if m.spread(sg.cls) {
			spread = append(spread, sg.cls)
		}
		for _, pod := range pods {
			y, err := r.drainTarget(sg.cls, x, m, keep)
			if err != nil {
				undo()
				return false, err
			}
			if y == nil {
				undo()
				return false, nil
			}
			keep(y)
			if _, err := r.place(sg.cls, y, []*corev1.Pod{pod}); err != nil {
				undo()
				return false, err
			}
		}
	}
	for _, c := range spread {
		if !r.spreadHolds(c) {
			undo()
			return false, nil
		}
		for _, o := range m.watchers[c] {
			if !r.affinityHolds(o) {
				undo()
				return false, nil
			}
		}
	}
	r.s.snap.Commit()
	return true, nil
}

// drainTarget picks the new node other than x that a pod of the class
// goes to: of those that admit it and have room, the first; for a spread
// class the one with the fewest pods its spread counts. When that one has
// no room, pods free to move go from it to other nodes to make some: a
// full node with few of the class would otherwise hold every other node
// of the class to at most maxSkew more.
func (r *round) drainTarget(cls *podClass, x *simNode, m *movers, keep func(*simNode)) (*simNode, error) {
	if !m.spread(cls) {
		for _, y := range r.opened {
			if y == x {
				continue
			}
			ok, err := r.staticOK(cls, y)
			if err != nil {
				return nil, err
			}
			if ok && r.room(cls, y) > 0 {
				return y, nil
			}
		}
		return nil, nil
	}
	sr := r.newCountedRun(cls)
	var least, roomy *simNode
	leastCount, roomyCount := 0, 0
	for _, y := range r.opened {
		if y == x {
			continue
		}
		ok, err := r.staticOK(cls, y)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ni := r.s.snap.lookup(y.name)
		n := 0
		for _, t := range sr.tallies {
			n += t.count(ni)
		}
		if least == nil || n < leastCount {
			least, leastCount = y, n
		}
		if (roomy == nil || n < roomyCount) && r.room(cls, y) > 0 {
			roomy, roomyCount = y, n
		}
	}
	if least == nil || least == roomy || roomy != nil && roomyCount == leastCount {
		return roomy, nil
	}
	made, err := r.makeRoom(cls, least, x, m, keep)
	if err != nil || !made {
		return roomy, err
	}
	return least, nil
}

// makeRoom moves pods free to move off y, last placed first, onto other
// new nodes (not x) until a pod of the class fits on y. It reports
// whether one does; the moves made stay either way (drain undoes them
// with the rest).
func (r *round) makeRoom(cls *podClass, y, x *simNode, m *movers, keep func(*simNode)) (bool, error) {
	for r.room(cls, y) < 1 {
		k := len(y.segs) - 1
		for k >= 0 && !m.free(y.segs[k].cls) {
			k--
		}
		if k < 0 {
			return false, nil
		}
		free := y.segs[k].cls
		var z *simNode
		for _, n := range r.opened {
			if n == x || n == y {
				continue
			}
			ok, err := r.staticOK(free, n)
			if err != nil {
				return false, err
			}
			if ok && r.room(free, n) > 0 {
				z = n
				break
			}
		}
		if z == nil {
			return false, nil
		}
		keep(y)
		keep(z)
		pod, err := r.unplaceLast(y, k)
		if err != nil {
			return false, err
		}
		if _, err := r.place(free, z, []*corev1.Pod{pod}); err != nil {
			return false, err
		}
	}
	return true, nil
}

// unplaceLast takes the last pod of y's k-th run off y. The node keeps
// its shapes: each still holds what is left.
func (r *round) unplaceLast(y *simNode, k int) (*corev1.Pod, error) {
	end := 0
	for _, sg := range y.segs[:k+1] {
		end += sg.n
	}
	pod := y.pods[end-1]
	if err := r.s.snap.RemovePod(pod, y.name); err != nil {
		return nil, err
	}
	cls := y.segs[k].cls
	y.pods = slices.Delete(y.pods, end-1, end)
	if y.segs[k].n--; y.segs[k].n == 0 {
		y.segs = slices.Delete(y.segs, k, k+1)
	}
	y.podReq = y.podReq.sub(cls.req)
	y.nPods--
	y.ver++
	return pod, nil
}

// affinityHolds reports whether each pod of the class still finds, in
// its node's domain of each required affinity term, a pod the term
// matches other than itself.
func (r *round) affinityHolds(o *podClass) bool {
	for _, term := range o.info.GetRequiredAffinityTerms() {
		tc := r.termCount(term)
		tc.sums = tc.tally.sumsOf(r.s.snap, term.TopologyKey)
		self := 0
		if term.Matches(o.rep, nil) {
			self = 1
		}
		for _, name := range o.where {
			ni := r.s.snap.lookup(name)
			if ni == nil || !holdsClass(ni, o) {
				continue
			}
			n, has := tc.in(ni)
			if !has || n-self < 1 && (tc.sums.total-self > 0 || self == 0) {
				return false
			}
		}
	}
	return true
}

// spreadHolds reports whether each pod of the class passes its spread
// constraints (all over hostnames) on the snapshot's nodes, as the
// plugin decides it with the pod taken off its node: the pods its
// selector matches on the node, less the smallest count over the nodes
// its node affinity admits (the node's own counted without the pod if it
// matches itself), at most maxSkew.
func (r *round) spreadHolds(cls *podClass) bool {
	sr := r.newCountedRun(cls)
	all := r.s.snap.list()
	for i, c := range cls.hardSpread {
		// The two smallest counts, and where the smallest is.
		least, second, at := -1, -1, ""
		for _, ni := range all {
			if !sr.eligible(cls, ni.Node()) {
				continue
			}
			n := sr.tallies[i].count(ni)
			switch {
			case least < 0 || n < least:
				second, least, at = least, n, ni.Node().Name
			case second < 0 || n < second:
				second = n
			}
		}
		for _, ni := range all {
			if !holdsClass(ni, cls) {
				continue
			}
			n := sr.tallies[i].count(ni)
			own := n
			if sr.self[i] {
				own--
			}
			others := least
			if ni.Node().Name == at {
				others = second
			}
			floor := own
			if others >= 0 && others < floor {
				floor = others
			}
			if n-floor > int(c.MaxSkew) {
				return false
			}
		}
	}
	return true
}

// holdsClass reports whether a pod of the class is on the node.
func holdsClass(ni fwk.NodeInfo, cls *podClass) bool {
	if !cls.whereOn[ni.Node().Name] {
		return false
	}
	for _, pi := range ni.GetPods() {
		if own, ok := pi.(*podInfo); ok && own.cls == cls {
			return true
		}
	}
	return false
}

// dropOpened takes a drained node out of the round.
func (r *round) dropOpened(x *simNode) {
	p := x.pool
	p.used.nodes--
	p.used.cpu -= x.contrib.cpu
	p.used.mem -= x.contrib.mem
	r.openedIn[zoneKey{p, x.zone}]--
	if x.wake != nil {
		delete(r.woken, x.wake)
	}
	r.opened = slices.DeleteFunc(r.opened, func(n *simNode) bool { return n == x })
	r.nodes = slices.DeleteFunc(r.nodes, func(n *simNode) bool { return n == x })
}

// countsOrExcludes reports whether the class's spread counts p or its
// required anti-affinity keeps p away.
func (c *podClass) countsOrExcludes(p *corev1.Pod, nsLabels map[string]labels.Set) bool {
	if p.Namespace == c.rep.Namespace {
		for _, sel := range c.spreadSel {
			if sel.Matches(labels.Set(p.Labels)) {
				return true
			}
		}
	}
	return matchesAny(c.info.GetRequiredAntiAffinityTerms(), p, nsLabels[p.Namespace])
}
