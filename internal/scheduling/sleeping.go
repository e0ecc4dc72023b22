package scheduling

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// sleepingMachine is a sleeping claim as the packer offers it: a node of
// its pool with one shape and one zone that it wakes instead of making.
type sleepingMachine struct {
	claim string
	si    *shapeInfo
	zone  string
}

// addSleeping gives each pool its sleeping machines, cheapest first, then
// by claim name, so a decision wakes the same machines whatever order the
// claims were listed in.
func (s *Simulator) addSleeping(claims []Sleeping) error {
	for _, c := range claims {
		p, ok := s.poolByName[c.Pool]
		if !ok {
			return fmt.Errorf("sleeping claim %s names unknown pool %s", c.Name, c.Pool)
		}
		p.sleeping = append(p.sleeping, &sleepingMachine{claim: c.Name, si: p.shapeNamed(c.Shape), zone: c.Zone})
		s.sleeping++
	}
	for _, p := range s.pools {
		slices.SortFunc(p.sleeping, func(a, b *sleepingMachine) int {
			if c := cmp.Compare(a.si.shape.Price, b.si.shape.Price); c != 0 {
				return c
			}
			return strings.Compare(a.claim, b.claim)
		})
	}
	return nil
}

// sleepingOptions adds to opts the sleeping machines a pod of the class
// could wake, and drops the refusal of each pool that has one: per pool,
// the first machine not woken yet of each shape and zone whose template
// node the static filters admit the class on and which holds one of its
// pods with its DaemonSet pods, within the pool's limits. A pool whose
// shapes are all out (closed this round, or every shape in capacity
// backoff) wakes none: its provider just failed.
func (r *round) sleepingOptions(cls *podClass, opts []option, reasons map[*poolState]PoolRefusal) ([]option, error) {
	if r.s.sleeping == 0 {
		return opts, nil
	}
	type kind struct {
		si   *shapeInfo
		zone string
	}
	for _, p := range r.s.pools {
		if len(p.sleeping) == 0 || p.unavailable || p.limNodes >= 0 && p.used.nodes+1 > p.limNodes {
			continue
		}
		bc, bm := p.budget(vec{})
		tried := map[kind]bool{}
		for _, m := range p.sleeping {
			k := kind{m.si, m.zone}
			if r.woken[m] || tried[k] {
				continue
			}
			tried[k] = true
			t, err := r.s.template(r.ctx, p, m.si, m.zone)
			if err != nil {
				return nil, err
			}
			st, err := r.s.templateVerdict(r.ctx, cls, t)
			if err != nil {
				return nil, err
			}
			if !st.IsSuccess() || !cls.req.add(t.dsReq).le(m.si.alloc) || t.dsCount+1 > m.si.allocPods || !withinBudget(m.si.cap, bc, bm) ||
				(cls.ext != nil || t.dsExt != nil) && !extFits(cls.ext, t.dsExt, m.si.ext) {
				continue
			}
			opts = append(opts, option{pool: p, zone: m.zone, cands: []*shapeInfo{m.si}, price: m.si.shape.Price, sleeping: m})
			delete(reasons, p)
		}
	}
	return opts, nil
}
