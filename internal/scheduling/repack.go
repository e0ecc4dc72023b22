package scheduling

import (
	"math"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
)

// repack re-packs, per pool and zone, the new nodes that hold only pods
// free to move, when fewer or as many nodes cost less. Packing in size
// order fills nodes on one resource (memory-heavy pods take a node's
// memory, cpu-heavy ones the next node's cpu); this pass builds the nodes
// again one at a time, each of the shape, and with the mix of pods, that
// buys the most of the pods' value per unit of price, so cpu-heavy and
// memory-heavy pods share nodes.
//
// A pod is free to move when its fit depends on nothing but static
// filters and resources (a simple class) and no pod of another kind looks
// at it (affinity, spread, anti-affinity): moving it within a zone then
// changes no other pod's verdict. Pools with limits, a flexible range or
// an inventory's counts, and woken sleeping machines, are left as packed, as are groups above repackBudget. It runs once,
// when packing is over: what the snapshot shows of the nodes is not
// updated, Solve reverts it anyway.
func (r *round) repack(classes []*podClass) error {
	free := r.movableClasses(classes)
	var keys []zoneKey
	groups := map[zoneKey][]*simNode{}
	for _, n := range r.opened {
		p := n.pool
		// A sleeping machine has the shape it has.
		if n.wake != nil || p.flex != nil || len(p.shapes) < 2 || p.limNodes >= 0 || p.limCPU >= 0 || p.limMem >= 0 || p.free != nil {
			continue
		}
		movable := len(n.segs) > 0
		for _, sg := range n.segs {
			movable = movable && free[sg.cls]
		}
		if !movable {
			continue
		}
		k := zoneKey{p, n.zone}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], n)
	}
	for _, k := range keys {
		if err := r.repackGroup(k, groups[k]); err != nil {
			return err
		}
	}
	return nil
}

// movableClasses are the simple classes no other class of the round
// interacts with.
func (r *round) movableClasses(classes []*podClass) map[*podClass]bool {
	free := map[*podClass]bool{}
	for _, c := range classes {
		// A pod that selects on a node's name stays where it is, and so
		// does one with devices: re-packing counts cpu and memory only.
		if !c.simple || c.ext != nil || c.perNode {
			continue
		}
		ok := true
		for _, o := range classes {
			if !o.simple && o.interacts(c.rep, nil, r.s.nsLabels) {
				ok = false
				break
			}
		}
		free[c] = ok
	}
	return free
}

// repackShape is a shape of the pool with what is left of it after its
// DaemonSet pods in the zone.
type repackShape struct {
	si   *shapeInfo
	t    *template
	eff  vec
	pods int64
	// admits says, by local class index, whether the static filters admit
	// the class.
	admits []bool
	// greedy is set when no larger shape is as cheap per unit of every
	// resource: only those are worth filling, a smaller one of the same
	// make only ends a solution.
	greedy bool
}

type repackNode struct {
	shape  *repackShape
	counts []int
}

func (r *round) repackGroup(k zoneKey, nodes []*simNode) error {
	if len(nodes) < 2 {
		return nil
	}
	p := k.pool
	// The pods by class, in the order they were packed.
	idx := map[*podClass]int{}
	var cls []*podClass
	var byClass [][]podRef
	var oldCost float64
	for _, n := range nodes {
		oldCost += n.cands[0].shape.Price
		at := 0
		for _, sg := range n.segs {
			i, ok := idx[sg.cls]
			if !ok {
				i = len(cls)
				idx[sg.cls] = i
				cls = append(cls, sg.cls)
				byClass = append(byClass, nil)
			}
			byClass[i] = append(byClass[i], podRef{n, at, sg.n})
			at += sg.n
		}
	}
	counts := make([]int, len(cls))
	var total vec
	for i, refs := range byClass {
		for _, rf := range refs {
			counts[i] += rf.ln
		}
		total = total.add(cls[i].req.scale(counts[i]))
	}
	shapes, err := r.repackShapes(p, k.zone, cls, len(nodes))
	if err != nil {
		return err
	}
	greedy := 0
	for _, sh := range shapes {
		if sh.greedy {
			greedy++
		}
	}
	if len(nodes)*greedy*len(cls) > repackBudget {
		return nil
	}
	lc, lm := unitPrices(shapes, total)
	// A charge per node, as a share of the largest shape's price, makes
	// the greedy choice prefer large nodes. Of the solutions found with a
	// few charges that cost less than packing's, the one with the fewest
	// nodes wins, then the cheapest.
	var top float64
	for _, sh := range shapes {
		top = max(top, sh.si.shape.Price)
	}
	// The charges are tried on all cores; the answer is chosen in charge
	// order, whatever the number of cores.
	shares := []float64{0, 0.05, 0.15, 0.4, 1}
	builds := make([][]repackNode, len(shares))
	costs := make([]float64, len(shares))
	workqueue.ParallelizeUntil(r.ctx, runtime.GOMAXPROCS(0), len(shares), func(i int) {
		builds[i], costs[i] = buildNodes(shapes, cls, counts, len(nodes), oldCost*(1-1e-9), lc, lm, shares[i]*top)
	})
	if err := r.ctx.Err(); err != nil {
		return err
	}
	var best []repackNode
	bestCost := math.Inf(1)
	for i, built := range builds {
		if built != nil && (best == nil || fewerOrCheaper(len(built), costs[i], len(best), bestCost)) {
			best, bestCost = built, costs[i]
		}
	}
	if best == nil {
		return nil
	}
	return r.applyRepack(nodes, cls, byClass, best)
}

// buildNodes builds at most limit nodes for the pods counted, one at a
// time, each of the shape whose greedy fill has the lowest price plus
// charge per unit of value. Whenever what is left fits on one node, ending
// there with the cheapest shape that holds it is a solution too; the
// solution with the fewest nodes, then the cheapest, that costs less than
// below is returned; nil when there is none.
func buildNodes(shapes []*repackShape, cls []*podClass, counts0 []int, limit int, below, lc, lm, charge float64) ([]repackNode, float64) {
	counts := append([]int(nil), counts0...)
	left := 0
	for _, c := range counts {
		left += c
	}
	var rest vec
	for i, c := range counts {
		rest = rest.add(cls[i].req.scale(c))
	}
	var built, done []repackNode
	var cost float64
	doneCost := math.Inf(1)
	for left > 0 && len(built) < limit {
		var best, last repackNode
		bestScore, bestValue := math.Inf(1), 0.0
		for _, sh := range shapes {
			// Shapes come cheapest first: the first to hold all that is
			// left is the cheapest last node.
			if last.shape == nil && rest.le(sh.eff) && int64(left) <= sh.pods {
				if admitsAll(sh, counts) {
					last = repackNode{sh, append([]int(nil), counts...)}
				}
			}
			if !sh.greedy {
				continue
			}
			fill, used, n := fillShape(sh, cls, counts)
			if n == 0 {
				continue
			}
			value := lc*float64(used.cpu) + lm*float64(used.mem)
			if value <= 0 {
				continue
			}
			score := (sh.si.shape.Price + charge) / value
			// Within a hair, the node that takes more: fewer nodes.
			if score < bestScore*(1-1e-3) || score <= bestScore*(1+1e-3) && value > bestValue {
				best, bestScore, bestValue = repackNode{sh, fill}, score, value
			}
		}
		if last.shape != nil && cost+last.shape.si.shape.Price < below && (done == nil || fewerOrCheaper(len(built)+1, cost+last.shape.si.shape.Price, len(done), doneCost)) {
			done = append(append([]repackNode(nil), built...), last)
			doneCost = cost + last.shape.si.shape.Price
		}
		if best.shape == nil {
			break
		}
		for i, c := range best.counts {
			counts[i] -= c
			left -= c
			rest = rest.sub(cls[i].req.scale(c))
		}
		built = append(built, best)
		cost += best.shape.si.shape.Price
	}
	if left == 0 && cost < below && (done == nil || fewerOrCheaper(len(built), cost, len(done), doneCost)) {
		return built, cost
	}
	return done, doneCost
}

// fewerOrCheaper orders solutions by node count, then cost: a node more
// than needed is never worth a saving.
func fewerOrCheaper(nodes int, cost float64, thanNodes int, thanCost float64) bool {
	if nodes != thanNodes {
		return nodes < thanNodes
	}
	return cost < thanCost
}

// allShapesBudget bounds shapes × nodes for filling every shape.
const allShapesBudget = 1024

// repackBudget bounds nodes × shapes filled × classes, which the time of
// re-packing a group grows with: about 4·10⁶ (400 nodes of 1,000 classes)
// take 0.4 s on 2 cores. Larger groups stay as packed.
const repackBudget = 5_000_000

// podRef is a run of one class's pods on a node.
type podRef struct {
	n      *simNode
	at, ln int
}

// repackShapes lists the pool's shapes in a zone that no other shape beats
// on price and every resource, cheapest first. Few nodes fill every shape;
// more fill only the shapes no larger one matches per unit.
func (r *round) repackShapes(p *poolState, zone string, cls []*podClass, nodes int) ([]*repackShape, error) {
	var out []*repackShape
	for _, si := range p.shapesIn(zone) {
		t, err := r.s.template(r.ctx, p, si, zone)
		if err != nil {
			return nil, err
		}
		sh := &repackShape{si: si, t: t, eff: si.alloc.sub(t.dsReq), pods: si.allocPods - t.dsCount}
		if sh.pods <= 0 || sh.eff.cpu <= 0 || sh.eff.mem <= 0 {
			continue
		}
		beaten := false
		for _, o := range out {
			// Shapes come cheapest first: o costs no more.
			if sh.eff.le(o.eff) && sh.pods <= o.pods {
				beaten = true
				break
			}
		}
		if !beaten {
			sh.admits = make([]bool, len(cls))
			for i, c := range cls {
				st, err := r.s.templateVerdict(r.ctx, c, t)
				if err != nil {
					return nil, err
				}
				sh.admits[i] = st.IsSuccess()
			}
			out = append(out, sh)
		}
	}
	for _, sh := range out {
		sh.greedy = true
		if len(out)*nodes <= allShapesBudget {
			continue
		}
		for _, o := range out {
			if o != sh && sh.eff.le(o.eff) && sh.pods <= o.pods &&
				o.si.shape.Price <= sh.si.shape.Price*min(float64(o.eff.cpu)/float64(sh.eff.cpu), float64(o.eff.mem)/float64(sh.eff.mem))*(1+1e-3) {
				sh.greedy = false
				break
			}
		}
	}
	return out, nil
}

// unitPrices are the prices per millicore and per byte at which the
// cheapest fractional set of shapes buys total: the dual of the linear
// relaxation, whose optimum one shape or a pair of shapes attains.
func unitPrices(shapes []*repackShape, total vec) (float64, float64) {
	c, m := float64(total.cpu), float64(total.mem)
	best := math.Inf(1)
	var lc, lm float64
	for i, a := range shapes {
		ac, am, pa := float64(a.eff.cpu), float64(a.eff.mem), a.si.shape.Price
		if v := pa * max(c/ac, m/am); v < best {
			best = v
			if c/ac >= m/am {
				lc, lm = pa/ac, 0
			} else {
				lc, lm = 0, pa/am
			}
		}
		for _, b := range shapes[i+1:] {
			bc, bm, pb := float64(b.eff.cpu), float64(b.eff.mem), b.si.shape.Price
			det := ac*bm - am*bc
			if det == 0 {
				continue
			}
			x, y := (c*bm-m*bc)/det, (ac*m-am*c)/det
			if x < 0 || y < 0 {
				continue
			}
			if v := pa*x + pb*y; v < best {
				best = v
				// λc·ac + λm·am = pa and λc·bc + λm·bm = pb.
				lc, lm = max(0, (pa*bm-pb*am)/det), max(0, (ac*pb-bc*pa)/det)
			}
		}
	}
	return lc, lm
}

// fillShape fills one node of a shape from the pods left, taking at each
// step the class that best matches the room left (normalised dot
// product), so that cpu-heavy and memory-heavy pods share the node.
func fillShape(sh *repackShape, cls []*podClass, counts []int) ([]int, vec, int) {
	fill := make([]int, len(cls))
	var used vec
	slots := sh.pods
	n := 0
	for slots > 0 {
		room := sh.eff.sub(used)
		rc, rm := float64(room.cpu)/float64(sh.eff.cpu), float64(room.mem)/float64(sh.eff.mem)
		pick, pickScore := -1, -1.0
		for i, c := range cls {
			if counts[i]-fill[i] == 0 || !c.req.le(room) {
				continue
			}
			score := float64(c.req.cpu)/float64(sh.eff.cpu)*rc + float64(c.req.mem)/float64(sh.eff.mem)*rm
			if score > pickScore && sh.admits[i] {
				pick, pickScore = i, score
			}
		}
		if pick < 0 {
			break
		}
		pickFit := min(fitCount(room, slots, cls[pick].req), counts[pick]-fill[pick])
		// Half of what fits at a time: the room left changes which
		// class matches best.
		k := max(1, pickFit/2)
		fill[pick] += k
		used = used.add(cls[pick].req.scale(k))
		slots -= int64(k)
		n += k
	}
	return fill, used, n
}

// admitsAll reports whether a shape admits every class with pods counted.
func admitsAll(sh *repackShape, counts []int) bool {
	for i, n := range counts {
		if n > 0 && !sh.admits[i] {
			return false
		}
	}
	return true
}

// applyRepack gives the group's nodes, in order, the built contents; nodes
// left over are dropped from the round.
func (r *round) applyRepack(nodes []*simNode, cls []*podClass, byClass [][]podRef, built []repackNode) error {
	// Each class's pods go out in the order they were packed.
	type cursor struct{ ref, off int }
	cur := make([]cursor, len(cls))
	take := func(i, k int) []*corev1.Pod {
		var out []*corev1.Pod
		for k > 0 {
			rf := byClass[i][cur[i].ref]
			m := min(k, rf.ln-cur[i].off)
			out = append(out, rf.n.pods[rf.at+cur[i].off:rf.at+cur[i].off+m]...)
			cur[i].off += m
			k -= m
			if cur[i].off == rf.ln {
				cur[i].ref++
				cur[i].off = 0
			}
		}
		return out
	}
	contents := make([][]*corev1.Pod, len(built))
	segs := make([][]podSeg, len(built))
	for b, bn := range built {
		for i, k := range bn.counts {
			if k == 0 {
				continue
			}
			contents[b] = append(contents[b], take(i, k)...)
			segs[b] = append(segs[b], podSeg{cls[i], k})
		}
	}
	drop := map[*simNode]bool{}
	for j, n := range nodes {
		if j >= len(built) {
			drop[n] = true
			continue
		}
		bn := built[j]
		n.pods, n.segs = contents[j], segs[j]
		n.podReq, n.nPods = vec{}, int64(len(n.pods))
		for _, sg := range n.segs {
			n.podReq = n.podReq.add(sg.cls.req.scale(sg.n))
		}
		n.cands = []*shapeInfo{bn.shape.si}
		n.tmpl = bn.shape.t
		n.shapesChanged()
	}
	if len(drop) > 0 {
		keep := r.opened[:0]
		for _, n := range r.opened {
			if drop[n] {
				n.pool.used.nodes--
				r.openedIn[zoneKey{n.pool, n.zone}]--
				continue
			}
			keep = append(keep, n)
		}
		r.opened = keep
	}
	return nil
}
