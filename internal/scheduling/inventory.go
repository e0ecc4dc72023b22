package scheduling

// A fixed inventory (bare-metal servers powered on for claims) has a count
// of machines free per shape: the round opens no more nodes of a shape
// than that. What a round has taken is read off its opened nodes (each
// holds the cheapest of its shapes, cands[0]) rather than kept apart, so
// every way a node leaves the round (drained, consolidated, undone)
// gives its machine back without bookkeeping of its own. Pools without
// an inventory skip all of it.

// exhausted reports whether every free machine of pool p's shape si is
// held by a node of the round other than except.
func (r *round) exhausted(p *poolState, si *shapeInfo, except *simNode) bool {
	free, counted := p.free[si]
	if !counted {
		return false
	}
	taken := 0
	for _, n := range r.opened {
		if n != except && n.pool == p && len(n.cands) > 0 && n.cands[0] == si {
			taken++
		}
	}
	return taken >= free
}

// withoutExhausted drops from a new node's shapes, cheapest first, those
// whose machines the round's other nodes hold all of. When every shape
// that fits is held, they all stay: the node keeps its pods, and
// provisioning, which counts what it claims, leaves the node for the next
// round.
func (r *round) withoutExhausted(n *simNode, cands []*shapeInfo) []*shapeInfo {
	if n.pool.free == nil {
		return cands
	}
	var keep []*shapeInfo
	for _, si := range cands {
		if !r.exhausted(n.pool, si, n) {
			keep = append(keep, si)
		}
	}
	if len(keep) == 0 || len(keep) == len(cands) {
		return cands
	}
	return keep
}
