package scheduling

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// The kube-scheduler checks a hard topology spread when it binds the pod
// that has it, against the pods bound by then, and with the pods
// nominated to the node it tries. A pod packed here before the pods its
// selector counts (spreads go before plain pods) is checked against fewer
// pods than the scheduler will see: Karpenter's diverse mix spreads over
// selectors that count the generic pods, which were packed later onto the
// same nodes and zones, and most of its spread pods then failed on the
// node bought for them once the others were bound or nominated there.
// The room planned for them was not where they could go, and a round
// bought another node.
//
// So a pod placed in the round keeps its hard spreads: a pod its selector
// matches, packed later into a domain where it is, goes where the domain
// stays within the spread's skew, as if it had the spread itself. Once
// every pod is bound, each spread then holds on the node it was planned
// on, whatever order the scheduler bound them in; a pod the scheduler
// failed on its node at its turn (the domains were uneven then) finds its
// room there later, and a round that sees it pending meanwhile finds the
// same room rather than buying a node.
//
// The watches are a preference, not a constraint of the pods: a pod that
// no node with room can take within them (existing, opened, or new in any
// zone) is placed without them, where it would have been placed before,
// so they never leave a pod unschedulable, and open a node only where one
// in another zone keeps them.

// spreadWatch is the hard spreads of one selector, key and skew held by
// pods placed in the round, and the domains they are in.
type spreadWatch struct {
	tally   *tally
	key     string
	maxSkew int
	// required is the holders' node affinity: only nodes it admits are
	// domains (NodeAffinityPolicy Honor).
	required    nodeaffinity.RequiredNodeAffinity
	hasRequired bool
	// empty counts, per value of the key, what a node the holders could
	// open there would hold of the selector's pods (its DaemonSet pods):
	// such a node is a domain for the holders' own checks (see
	// placeCounted), and so for this one.
	empty map[string]int
	// in holds the values of the key the holders are in.
	in map[string]bool
	// only is the one class holding the watch, nil once there are more:
	// a class's own spread is checked as its pods are placed, and needs
	// no watch over them.
	only *podClass
	// least is the smallest domain as of snapshot change count at, and
	// domains, for holders with node affinity, what each domain holds of
	// the nodes it admits.
	least   int
	domains map[string]int
	at      int
	valid   bool
}

type watchKey struct {
	tally   *tally
	key     string
	maxSkew int32
	static  string
}

// watch records that a pod of the run's class, with hard spreads, was
// placed on n.
func (r *round) watch(run *classRun, n *simNode) error {
	cls := run.cls
	if run.watches == nil {
		run.watches = make([]*spreadWatch, len(cls.hardSpread))
		for i := range cls.hardSpread {
			w, err := r.watchFor(cls, i)
			if err != nil {
				return err
			}
			if w.only != cls {
				w.only = nil
			}
			run.watches[i] = w
		}
	}
	nodeLabels := r.s.snap.lookup(n.name).Node().Labels
	for i, c := range cls.hardSpread {
		if v, ok := nodeLabels[c.TopologyKey]; ok {
			run.watches[i].in[v] = true
		}
	}
	return nil
}

func (r *round) watchFor(cls *podClass, i int) (*spreadWatch, error) {
	c := cls.hardSpread[i]
	ns, sel := cls.rep.Namespace, cls.spreadSel[i]
	t := r.tally(tallyKey{ns: ns, sel: sel.String()}, func(p *corev1.Pod) bool {
		return p.DeletionTimestamp == nil && p.Namespace == ns && sel.Matches(labels.Set(p.Labels))
	})
	key := watchKey{tally: t, key: c.TopologyKey, maxSkew: c.MaxSkew, static: staticKey(cls.rep)}
	if w := r.watches[key]; w != nil {
		return w, nil
	}
	if r.watches == nil {
		r.watches = map[watchKey]*spreadWatch{}
	}
	a := cls.rep.Spec.Affinity
	w := &spreadWatch{
		tally: t, key: c.TopologyKey, maxSkew: int(c.MaxSkew),
		required:    nodeaffinity.GetRequiredNodeAffinity(cls.rep),
		hasRequired: len(cls.rep.Spec.NodeSelector) > 0 || a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil,
		empty:       map[string]int{},
		in:          map[string]bool{},
		only:        cls,
	}
	if r.allowOpen {
		opts, _, err := r.options(cls)
		if err != nil {
			return nil, err
		}
		for _, o := range opts {
			t, err := r.s.template(r.ctx, o.pool, largestOf(o), o.zone)
			if err != nil {
				return nil, err
			}
			v, ok := t.node.Labels[w.key]
			if !ok {
				continue
			}
			n := 0
			for _, p := range t.ds {
				if w.tally.matchesPod(p) {
					n++
				}
			}
			if old, seen := w.empty[v]; w.key == corev1.LabelHostname && (!seen || n < old) {
				w.empty[v] = n
			} else if w.key != corev1.LabelHostname {
				// Each pool's node is in the zone's domain.
				w.empty[v] = old + n
			}
		}
	}
	r.watches[key] = w
	r.watchOrder = append(r.watchOrder, w)
	return w, nil
}

// largestOf is the largest of an option's shapes, which a node opened for
// it starts as.
func largestOf(o option) *shapeInfo {
	if o.pool.flex != nil {
		return o.pool.flexMax
	}
	largest := o.cands[0]
	for _, si := range o.cands {
		if si.alloc.cpu > largest.alloc.cpu || si.alloc.cpu == largest.alloc.cpu && si.alloc.mem > largest.alloc.mem {
			largest = si
		}
	}
	return largest
}

// leastDomain is the smallest domain of the watch's selector now: over
// the nodes that have the key (and that the holders' node affinity
// admits), and the nodes the holders could open.
func (r *round) leastDomain(w *spreadWatch) int {
	snap := r.s.snap
	if w.valid && w.at == snap.changes {
		return w.least
	}
	least := -1
	lower := func(n int) {
		if least < 0 || n < least {
			least = n
		}
	}
	host := w.key == corev1.LabelHostname
	if !w.hasRequired {
		sums := w.tally.sumsOf(snap, w.key)
		if host {
			if l := sums.least(); l >= 0 {
				lower(l)
			}
			for _, n := range w.empty {
				lower(n)
			}
		} else {
			for v, n := range sums.domains {
				lower(n + w.empty[v])
			}
			for v, n := range w.empty {
				if _, ok := sums.domains[v]; !ok {
					lower(n)
				}
			}
		}
	} else {
		domains := map[string]int{}
		w.domains = domains
		for _, ni := range snap.list() {
			node := ni.Node()
			v, has := node.Labels[w.key]
			if !has {
				continue
			}
			if ok, _ := w.required.Match(node); !ok {
				continue
			}
			if host {
				lower(w.tally.count(ni))
				continue
			}
			domains[v] += w.tally.count(ni)
		}
		for v, n := range w.empty {
			if host {
				lower(n)
				continue
			}
			domains[v] += n
		}
		for _, n := range domains {
			lower(n)
		}
	}
	w.least, w.at, w.valid = max(least, 0), snap.changes, true
	return w.least
}

// watchedRoom is how many more pods of cls node n may take and keep the
// hard spreads of the pods placed earlier that count them: as many as
// leave each such domain within maxSkew of the smallest (math.MaxInt
// when no placed pod's spread counts the class there).
func (r *round) watchedRoom(cls *podClass, n *simNode) int {
	room := math.MaxInt
	if r.breakWatches {
		return room
	}
	watches := r.watchesOf(cls)
	if len(watches) == 0 {
		return room
	}
	ni := r.s.snap.lookup(n.name)
	nodeLabels := ni.Node().Labels
	for _, w := range watches {
		v, ok := nodeLabels[w.key]
		if !ok || !w.in[v] || w.only == cls {
			continue
		}
		if w.hasRequired {
			if ok, _ := w.required.Match(ni.Node()); !ok {
				continue
			}
		}
		least := r.leastDomain(w)
		var count int
		switch {
		case w.key == corev1.LabelHostname:
			count = w.tally.count(ni)
		case w.hasRequired:
			count = w.domains[v]
		default:
			// A zone's domain holds what its nodes hold, and what a node
			// the holders could open there would (as their own check
			// counts it).
			count = w.tally.sumsOf(r.s.snap, w.key).domains[v] + w.empty[v]
		}
		room = min(room, max(w.maxSkew+least-count, 0))
	}
	return room
}

// watched reports whether the spread of a pod of another class placed
// earlier counts the class's pods.
func (r *round) watched(cls *podClass) bool {
	for _, w := range r.watchesOf(cls) {
		if w.only != cls {
			return true
		}
	}
	return false
}

// watchesOf lists the watches whose selector matches the class's pods.
func (r *round) watchesOf(cls *podClass) []*spreadWatch {
	if len(r.watches) == 0 {
		return nil
	}
	// Watches are only added: the list is brought up to date from where
	// it was last looked at.
	e := r.watchedBy[cls]
	for _, w := range r.watchOrder[e.seen:] {
		if w.tally.matchesClass(cls) {
			e.watches = append(e.watches, w)
		}
	}
	e.seen = len(r.watchOrder)
	if r.watchedBy == nil {
		r.watchedBy = map[*podClass]watchList{}
	}
	r.watchedBy[cls] = e
	return e.watches
}

// watchList is the watches that count a class, of the first seen made.
type watchList struct {
	seen    int
	watches []*spreadWatch
}
