package scheduling

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Solve places pending pods: each goes to an existing or in-flight node
// with room, else to a node opened earlier in this decision, else it opens
// a new node in the highest-weight pool that admits it (ties: the cheapest
// shape that holds it). Pods are taken by priority, then dominant resource
// share, largest first, then name. A new node ends with the cheapest shape
// that holds all its pods and DaemonSet pods; pool limits are never
// exceeded. The Simulator's state is unchanged afterwards.
func (s *Simulator) Solve(ctx context.Context, pending []*corev1.Pod) (Result, error) {
	s.snap.Fork()
	defer s.snap.Revert()
	r := s.newRound(ctx, s.base, true)
	items, err := s.classify(pending, true)
	if err != nil {
		return Result{}, err
	}
	if err := s.readyForClaims(ctx, items); err != nil {
		return Result{}, err
	}
	if err := r.pack(items); err != nil {
		return Result{}, err
	}
	classes := classesOf(items)
	if err := r.consolidate(classes); err != nil {
		return Result{}, err
	}
	if err := r.repack(classes); err != nil {
		return Result{}, err
	}
	return r.result()
}

// SimulateRemoval answers the disruption question: with nodes removed (and,
// if replacement is set, one new node of that pool, shape and zone added),
// where do the removed nodes' pods go? DaemonSet pods, mirror pods and
// terminated pods are not moved. No other node is opened. The Simulator's
// state is unchanged afterwards.
//
// Pending pods, when given, must find a place too: pods the scheduler is
// about to place on the nodes, whose room a removal must not take. The
// result places them like the displaced pods.
func (s *Simulator) SimulateRemoval(ctx context.Context, nodes []string, replacement *InFlight, pending ...*corev1.Pod) (RemovalResult, error) {
	s.snap.Fork()
	defer s.snap.Revert()
	removed := map[string]bool{}
	displaced := slices.Clone(pending)
	for _, name := range nodes {
		ni := s.snap.lookup(name)
		if ni == nil {
			return RemovalResult{}, fmt.Errorf("node %s not in snapshot", name)
		}
		for _, pi := range ni.GetPods() {
			p := pi.GetPod()
			if BelongsToNode(p) || Terminated(p) {
				continue
			}
			displaced = append(displaced, p)
			// Moved, a pod's own claims are allocated again where it goes.
			s.releaseDevices(p)
		}
		if err := s.snap.RemoveNode(name); err != nil {
			return RemovalResult{}, err
		}
		removed[name] = true
	}
	var keep []*simNode
	for _, n := range s.base {
		if !removed[n.name] {
			keep = append(keep, n)
		}
	}
	if replacement != nil {
		p, ok := s.poolByName[replacement.Pool]
		if !ok {
			return RemovalResult{}, fmt.Errorf("replacement names unknown pool %s", replacement.Pool)
		}
		t, err := s.template(ctx, p, p.shapeNamed(replacement.Shape), replacement.Zone)
		if err != nil {
			return RemovalResult{}, err
		}
		name := replacement.Name
		if name == "" {
			name = "replacement"
		}
		n := &simNode{name: name, kind: phantomNode, pool: p, tmpl: t, zone: replacement.Zone, staticID: t.staticID}
		if err := s.addTemplateNode(n, t); err != nil {
			return RemovalResult{}, err
		}
		keep = append(keep, n)
	}
	r := s.newRound(ctx, keep, false)
	items, err := s.classify(displaced, false)
	if err != nil {
		return RemovalResult{}, err
	}
	if err := s.readyForClaims(ctx, items); err != nil {
		return RemovalResult{}, err
	}
	if err := r.pack(items); err != nil {
		return RemovalResult{}, err
	}
	return RemovalResult{Placements: r.placements, Unschedulable: r.unschedulable}, nil
}

// classesOf lists the classes of items in order of first appearance.
func classesOf(items []item) []*podClass {
	var out []*podClass
	seen := map[*podClass]bool{}
	for _, it := range items {
		if !seen[it.cls] {
			seen[it.cls] = true
			out = append(out, it.cls)
		}
	}
	return out
}

type item struct {
	pod *corev1.Pod
	cls *podClass
}

// classify sorts pods into equivalence classes, decides which classes are
// simple, and orders the pods for packing: by priority, then the classes
// whose pods exclude each other from a node, then those with hard spread
// constraints, then by dominant resource share, largest first.
//
// Terminated pods are left out, and with unboundOnly pods bound to a node.
func (s *Simulator) classify(pods []*corev1.Pod, unboundOnly bool) ([]item, error) {
	cl := newClassifier()
	skip := func(p *corev1.Pod) bool { return Terminated(p) || unboundOnly && p.Spec.NodeName != "" }
	// Most often every pod is kept: no copy then.
	live := pods
	for i, p := range pods {
		if skip(p) {
			live = append(make([]*corev1.Pod, 0, len(pods)), pods[:i]...)
			for _, p := range pods[i+1:] {
				if !skip(p) {
					live = append(live, p)
				}
			}
			break
		}
	}
	classes, err := cl.classifyAll(live)
	if err != nil {
		return nil, err
	}
	// A pod selected by someone's required anti-affinity depends on where
	// that someone is, so it cannot skip the full framework.
	anti := append([][]fwk.AffinityTerm(nil), s.existingAnti...)
	holder := make([]*podClass, len(anti))
	for _, c := range cl.classes {
		if terms := c.info.GetRequiredAntiAffinityTerms(); len(terms) > 0 {
			anti = append(anti, terms)
			holder = append(holder, c)
		}
	}
	// Static twins share their static verdicts (and so their options);
	// a class with claims has verdicts on devices too, its own.
	twins := map[string]*staticCache{}
	for _, c := range cl.classes {
		if c.perNode || c.dra {
			continue
		}
		key := staticKey(c.rep)
		if shared, ok := twins[key]; ok {
			c.statics = shared
		} else {
			twins[key] = c.statics
		}
	}
	// A DaemonSet pod's anti-affinity may keep a class off nodes: the
	// counts do not look at it, the plugins do.
	dsAnti := false
	for _, ds := range s.daemonSets {
		if a := ds.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil &&
			len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			dsAnti = true
		}
	}
	for _, c := range cl.classes {
		selected, byOthers := false, false
		for i, terms := range anti {
			if matchesAny(terms, c.rep, s.nsLabels[c.rep.Namespace]) {
				selected = true
				if byOthers = holder[i] != c && !c.keepsAwayFrom(holder[i], terms, s.nsLabels); byOthers {
					break
				}
			}
		}
		c.simple = !selected && !c.needsFullFramework()
		c.counted = !s.pluginsOnly && !dsAnti && c.countable(byOthers)
		c.dominant = max(float64(c.req.cpu)/float64(s.ref.cpu), float64(c.req.mem)/float64(s.ref.mem))
		c.exclusive = c.excludesItself(s.nsLabels[c.rep.Namespace])
	}
	// Sorting works on classes: their pods are gathered per class (one
	// pass), classes are ordered, and pods are ordered by name only within
	// a class, or within classes that tie.
	count := make([]int, len(cl.classes)+1)
	for _, c := range classes {
		count[c.id+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	byClass := make([]*corev1.Pod, len(live))
	next := append([]int(nil), count[:len(cl.classes)]...)
	for i, p := range live {
		byClass[next[classes[i].id]] = p
		next[classes[i].id]++
	}
	order := append([]*podClass(nil), cl.classes...)
	slices.SortStableFunc(order, classOrder)
	items := make([]item, 0, len(live))
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && classOrder(order[i], order[j]) == 0 {
			j++
		}
		start := len(items)
		for _, c := range order[i:j] {
			for _, p := range byClass[count[c.id]:count[c.id+1]] {
				items = append(items, item{p, c})
			}
		}
		run := items[start:]
		if j-i == 1 && sortedByName(run) {
			i = j
			continue
		}
		// Names are unique in a namespace: no two pods tie.
		slices.SortFunc(run, func(a, b item) int {
			if a.pod.Namespace != b.pod.Namespace {
				return strings.Compare(a.pod.Namespace, b.pod.Namespace)
			}
			return strings.Compare(a.pod.Name, b.pod.Name)
		})
		i = j
	}
	return items, nil
}

// classOrder orders classes for packing: by priority, then the classes
// whose pods exclude each other from a node, then those with hard spread
// constraints, then by dominant resource share, largest first.
func classOrder(a, b *podClass) int {
	if a.priority != b.priority {
		return cmp.Compare(b.priority, a.priority)
	}
	// Pods that each need a node of their own decide how many nodes
	// there are: they go first, and every other pod fills the room they
	// leave. Placed later, they find the nodes full (often on pod slots
	// or one resource) and open more.
	if a.exclusive != b.exclusive {
		if a.exclusive {
			return -1
		}
		return 1
	}
	// Then pods that spread over zones: placed after plain pods they find
	// the nodes of some zone full and open one there.
	if sa, sb := len(a.hardSpread) > 0, len(b.hardSpread) > 0; sa != sb {
		if sa {
			return -1
		}
		return 1
	}
	return cmp.Compare(b.dominant, a.dominant)
}

// sortedByName reports whether items are in namespace and name order.
func sortedByName(items []item) bool {
	for i := 1; i < len(items); i++ {
		a, b := items[i-1].pod, items[i].pod
		if a.Namespace > b.Namespace || a.Namespace == b.Namespace && a.Name > b.Name {
			return false
		}
	}
	return true
}

func (r *round) result() (Result, error) {
	res := Result{Placements: r.placements, Unschedulable: r.unschedulable}
	if len(r.opened) > 0 {
		res.NewNodes = make([]NewNode, 0, len(r.opened))
	}
	for _, n := range r.opened {
		p := n.pool
		nn := NewNode{Name: n.name, Pool: p.name, Zone: n.zone, Pods: n.pods, Requests: n.podReq.list()}
		n.podExt.addTo(nn.Requests)
		if n.wake != nil {
			nn.Wake = n.wake.claim
		}
		if n.flexible() {
			nn.Shape = p.flex.at(n.flex[0], n.flex[1])
			nn.DaemonSetRequests = n.tmpl.dsReq.list()
			n.tmpl.dsExt.addTo(nn.DaemonSetRequests)
		} else {
			nn.Shape = n.cands[0].shape
			t, err := r.s.template(r.ctx, p, n.cands[0], n.zone)
			if err != nil {
				return Result{}, err
			}
			nn.DaemonSetRequests = t.dsReq.list()
			t.dsExt.addTo(nn.DaemonSetRequests)
		}
		if n.zone != "" {
			nn.Requirements = []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{n.zone},
			}}
		}
		res.NewNodes = append(res.NewNodes, nn)
	}
	return res, nil
}
