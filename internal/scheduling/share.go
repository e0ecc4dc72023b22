package scheduling

import "math"

// planShares plans complementary packing for simple classes. Filled one
// class at a time, a node fills up on the class's dominant resource and
// the other resource stays idle: cpu-heavy pods leave memory unused that
// memory-heavy pods, packed later onto other nodes, leave cpu unused on
// theirs. When the simple classes pull in different directions, each new
// node instead takes a slice of every class in proportion to the whole:
// the shape on which such slices cost least in total sets how many nodes
// the slices are cut for, and each class puts at most its count divided by
// that many on one new node, within what that shape holds. Nodes then end up filled on both
// resources in the ratio of the workload, and the shape chosen for each is
// the one that costs least for what it holds.
//
// Classes whose pods all lean the same way are not capped: packing them
// one after another is already exact (the plain-resource cases stay at
// their lower bound).
func (r *round) planShares(items []item) {
	r.shares = nil
	counts := map[*podClass]int{}
	var order []*podClass
	var total vec
	for _, it := range items {
		c := it.cls
		if !c.simple || c.scalar {
			continue
		}
		if counts[c] == 0 {
			order = append(order, c)
		}
		counts[c]++
		total = total.add(c.req)
	}
	if len(order) < 2 || total.cpu <= 0 || total.mem <= 0 {
		return
	}
	var pool *poolState
	for _, p := range r.s.pools {
		if p.flex == nil && !p.unavailable {
			pool = p
			break
		}
	}
	if pool == nil {
		return
	}
	// The plan for a shape: the fewest nodes k whose slices (each class's
	// count divided by k, rounded up) fit the shape; its cost is k times
	// the shape's price. The cheapest plan wins, the one with fewer nodes
	// on a tie.
	var best *shapeInfo
	bestCost, bestNodes := math.Inf(1), 0
	for _, si := range pool.shapes {
		if si.alloc.cpu <= 0 || si.alloc.mem <= 0 || si.allocPods <= 0 {
			continue
		}
		k := int(max(ceilDivInt(total.cpu, si.alloc.cpu), ceilDivInt(total.mem, si.alloc.mem), ceilDivInt(int64(len(items)), si.allocPods)))
		for ; k <= len(items); k++ {
			var slice vec
			var pods int64
			for _, c := range order {
				per := (counts[c] + k - 1) / k
				slice = slice.add(c.req.scale(per))
				pods += int64(per)
			}
			if slice.le(si.alloc) && pods <= si.allocPods {
				break
			}
		}
		if k > len(items) {
			continue
		}
		if cost := float64(k) * si.shape.Price; cost < bestCost || cost == bestCost && k < bestNodes {
			best, bestCost, bestNodes = si, cost, k
		}
	}
	if best == nil || bestNodes <= 1 {
		return
	}
	cpuHeavy, memHeavy := false, false
	for _, c := range order {
		cs, ms := float64(c.req.cpu)/float64(best.alloc.cpu), float64(c.req.mem)/float64(best.alloc.mem)
		cpuHeavy = cpuHeavy || cs > ms
		memHeavy = memHeavy || ms > cs
	}
	if !cpuHeavy || !memHeavy {
		return
	}
	r.shares = make(map[*podClass]int, len(order))
	for _, c := range order {
		r.shares[c] = (counts[c] + bestNodes - 1) / bestNodes
	}
	r.target, r.planned = best, bestNodes
}

// share is how many pods of the class may still go on a new node by the
// plan: its slice, and no more than the planned shape holds besides what
// the node has. Nodes opened beyond the planned number take the rest
// without a cap: they hold what rounding left over.
func (r *round) share(cls *podClass, n *simNode) int {
	s, ok := r.shares[cls]
	if n.kind != newNode || !ok || n.seq > r.planned {
		return math.MaxInt
	}
	return min(s, fitCount(r.target.alloc.sub(n.podReq), r.target.allocPods-n.nPods, cls.req))
}

func ceilDivInt(a, b int64) int64 { return (a + b - 1) / b }
