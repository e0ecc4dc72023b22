package scheduling

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// option is a pool and zone a class could open a node in, with the shapes
// that would hold one of its pods.
type option struct {
	pool  *poolState
	zone  string
	cands []*shapeInfo
	price float64
	// sleeping is the machine the option wakes; nil for a new one.
	sleeping *sleepingMachine
}

// options lists where the class could open a node, best first: by pool
// weight, then the pool's sleeping machines before new ones, then by the
// price of the cheapest shape holding one pod, then by the fewest nodes
// opened in the zone. Pools with no option get a reason.
func (r *round) options(cls *podClass) ([]option, map[*poolState]PoolRefusal, error) {
	// Without limits, what a class may open never changes in a round:
	// only the order does, by the nodes opened per zone.
	cacheable := true
	for _, p := range r.s.pools {
		cacheable = cacheable && p.limNodes < 0 && p.limCPU < 0 && p.limMem < 0 && p.free == nil
	}
	key := optionKey{statics: cls.statics, req: cls.req, ext: cls.ext}
	if c, ok := r.optCache[key]; ok && cacheable {
		// The sleeping machines are not cached: each is woken once.
		reasons := maps.Clone(c.reasons)
		opts, err := r.sleepingOptions(cls, append([]option(nil), c.opts...), reasons)
		return r.sortOptions(opts), reasons, err
	}
	reasons := map[*poolState]PoolRefusal{}
	var opts []option
	for _, p := range r.s.pools {
		if p.unavailable {
			reasons[p] = backoffRefusal(p)
			continue
		}
		if p.limNodes >= 0 && p.used.nodes+1 > p.limNodes {
			why, err := r.atNodeLimit(cls, p)
			if err != nil {
				return nil, nil, err
			}
			reasons[p] = why
			continue
		}
		bc, bm := p.budget(vec{})
		found := false
		for _, zone := range p.zones {
			o, why, err := r.option(cls, p, zone, bc, bm)
			if err != nil {
				return nil, nil, err
			}
			if why.refused() {
				if _, ok := reasons[p]; !ok {
					reasons[p] = why
				}
				continue
			}
			found = true
			opts = append(opts, o)
		}
		if found {
			delete(reasons, p)
		}
	}
	if cacheable {
		r.optCache[key] = cachedOptions{append([]option(nil), opts...), maps.Clone(reasons)}
	}
	opts, err := r.sleepingOptions(cls, opts, reasons)
	return r.sortOptions(opts), reasons, err
}

// optionKey names the classes with equal options: static twins of one
// request. A class asking for devices has a key of its own (its scalars'
// pointer): it may miss a twin's options, but never takes another
// request's.
type optionKey struct {
	statics *staticCache
	req     vec
	ext     *scalars
}

type cachedOptions struct {
	opts    []option
	reasons map[*poolState]PoolRefusal
}

func (r *round) sortOptions(opts []option) []option {
	sort.SliceStable(opts, func(i, j int) bool {
		if opts[i].pool.weight != opts[j].pool.weight {
			return opts[i].pool.weight > opts[j].pool.weight
		}
		// A machine that sleeps is there already: it wakes in seconds
		// where a new one takes minutes, whatever either costs.
		if sleepI, sleepJ := opts[i].sleeping != nil, opts[j].sleeping != nil; sleepI != sleepJ {
			return sleepI
		}
		if opts[i].price != opts[j].price {
			return opts[i].price < opts[j].price
		}
		// Equal offers: the zone with the fewest nodes opened so far, so
		// that nodes made for one class are spread over the zones and
		// later classes that spread over zones find room in each.
		return r.openedIn[zoneKey{opts[i].pool, opts[i].zone}] < r.openedIn[zoneKey{opts[j].pool, opts[j].zone}]
	})
	return opts
}

func (r *round) option(cls *podClass, p *poolState, zone string, bc, bm int64) (option, PoolRefusal, error) {
	if p.flex != nil {
		t, err := r.s.template(r.ctx, p, p.flexMax, zone)
		if err != nil {
			return option{}, PoolRefusal{}, err
		}
		st, err := r.s.templateVerdict(r.ctx, cls, t)
		if err != nil {
			return option{}, PoolRefusal{}, err
		}
		if !st.IsSuccess() {
			return option{}, filterRefusal(p, st, cls.rep, t.node, r.s.snap.dra), nil
		}
		need := cls.req.add(t.dsReq)
		// A flexible range has no devices.
		if t.dsCount+1 > p.maxPods || cls.ext != nil {
			return option{}, insufficient(p, need, combine(cls.ext, t.dsExt, 1), t.dsCount+1, p.flexMax), nil
		}
		if _, _, ok := p.flexFit(need, -1, -1); !ok {
			return option{}, insufficient(p, need, t.dsExt, t.dsCount+1, p.flexMax), nil
		}
		ci, mi, ok := p.flexFit(need, bc, bm)
		if !ok {
			return option{}, limitReason(p), nil
		}
		return option{pool: p, zone: zone, price: p.flex.at(ci, mi).Price}, PoolRefusal{}, nil
	}
	var cands []*shapeInfo
	var static *fwk.Status
	var staticNode *corev1.Node
	var largest *shapeInfo
	var largestNeed vec
	var largestExt *scalars
	var largestPods int64
	overBudget, taken := false, false
	for _, si := range p.shapesIn(zone) {
		t, err := r.s.template(r.ctx, p, si, zone)
		if err != nil {
			return option{}, PoolRefusal{}, err
		}
		st, err := r.s.templateVerdict(r.ctx, cls, t)
		if err != nil {
			return option{}, PoolRefusal{}, err
		}
		if !st.IsSuccess() {
			if static == nil {
				static, staticNode = st, t.node
			}
			continue
		}
		need := cls.req.add(t.dsReq)
		if largest == nil || si.alloc.cpu > largest.alloc.cpu || si.alloc.cpu == largest.alloc.cpu && si.alloc.mem > largest.alloc.mem {
			largest, largestNeed, largestPods = si, need, t.dsCount+1
			if cls.ext != nil || t.dsExt != nil {
				largestExt = combine(cls.ext, t.dsExt, 1)
			}
		}
		if !need.le(si.alloc) || t.dsCount+1 > si.allocPods || (cls.ext != nil || t.dsExt != nil) && !extFits(cls.ext, t.dsExt, si.ext) {
			continue
		}
		if !withinBudget(si.cap, bc, bm) {
			overBudget = true
			continue
		}
		if r.exhausted(p, si, nil) {
			taken = true
			continue
		}
		cands = append(cands, si)
	}
	switch {
	case len(cands) > 0:
		return option{pool: p, zone: zone, cands: cands, price: cands[0].shape.Price}, PoolRefusal{}, nil
	case taken:
		return option{}, takenRefusal(p), nil
	case overBudget:
		return option{}, limitReason(p), nil
	case largest != nil:
		return option{}, insufficient(p, largestNeed, largestExt, largestPods, largest), nil
	default:
		return option{}, filterRefusal(p, static, cls.rep, staticNode, r.s.snap.dra), nil
	}
}

// insufficient says which resources even the largest shape lacks: of
// need, needExt (devices) and pods.
func insufficient(p *poolState, need vec, needExt *scalars, pods int64, si *shapeInfo) PoolRefusal {
	var short []string
	if pods > si.allocPods {
		short = append(short, "pods")
	}
	if need.cpu > si.alloc.cpu {
		short = append(short, "cpu")
	}
	if need.mem > si.alloc.mem {
		short = append(short, "memory")
	}
	if need.eph > si.alloc.eph {
		short = append(short, "ephemeral-storage")
	}
	// A device no shape has at all is named as such: no size of the
	// pool would do.
	var missing []string
	for _, name := range needExt.short(si.ext) {
		if p.offers(corev1.ResourceName(name)) {
			short = append(short, name)
		} else {
			missing = append(missing, name)
		}
	}
	var why []string
	if len(short) > 0 {
		why = append(why, "no shape fits the pod and its DaemonSet pods: insufficient "+strings.Join(short, ", "))
	}
	if len(missing) > 0 {
		why = append(why, "no shape of the pool has "+strings.Join(missing, ", "))
	}
	requested, available := resourcesOf(need, pods), resourcesOf(si.alloc, si.allocPods)
	needExt.addTo(requested)
	si.ext.addTo(available)
	return PoolRefusal{
		Pool: p.name, Kind: RefusalTooSmall, Shape: si.shape.Name,
		Message:   strings.Join(why, "; "),
		Requested: requested, Available: available,
	}
}

func limitReason(p *poolState) PoolRefusal {
	var hit []string
	if p.limCPU >= 0 {
		hit = append(hit, "cpu="+resource.NewMilliQuantity(p.limCPU, resource.DecimalSI).String())
	}
	if p.limMem >= 0 {
		hit = append(hit, "memory="+resource.NewQuantity(p.limMem, resource.BinarySI).String())
	}
	limits, inUse := corev1.ResourceList{}, corev1.ResourceList{}
	if p.limCPU >= 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(p.limCPU, resource.DecimalSI)
		inUse[corev1.ResourceCPU] = *resource.NewMilliQuantity(p.used.cpu, resource.DecimalSI)
	}
	if p.limMem >= 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(p.limMem, resource.BinarySI)
		inUse[corev1.ResourceMemory] = *resource.NewQuantity(p.used.mem, resource.BinarySI)
	}
	return PoolRefusal{Pool: p.name, Kind: RefusalLimit, Message: fmt.Sprintf("limit %s reached", strings.Join(hit, ", ")), Limits: limits, InUse: inUse}
}

// createNode adds a new node for an option to the snapshot, not yet
// counted against the pool.
func (r *round) createNode(o option) (*simNode, error) {
	p := o.pool
	name := r.nextName(p)
	n := &simNode{name: name, kind: newNode, pool: p, zone: o.zone, cands: append([]*shapeInfo(nil), o.cands...), wake: o.sleeping}
	r.version++
	n.addedAt = r.version
	if n.flexible() {
		t, err := r.s.template(r.ctx, p, p.flexMax, o.zone)
		if err != nil {
			return nil, err
		}
		n.tmpl, n.staticID = t, t.staticID
		if err := r.s.addTemplateNode(n, t); err != nil {
			return nil, err
		}
		return n, nil
	}
	largest := o.cands[0]
	for _, si := range o.cands {
		if si.alloc.cpu > largest.alloc.cpu || si.alloc.cpu == largest.alloc.cpu && si.alloc.mem > largest.alloc.mem {
			largest = si
		}
	}
	t, err := r.s.template(r.ctx, p, largest, o.zone)
	if err != nil {
		return nil, err
	}
	n.tmpl, n.staticID = t, t.staticID
	if err := r.s.addTemplateNode(n, t); err != nil {
		return nil, err
	}
	n.maxAlloc = largest.alloc
	return n, r.refreshNode(n)
}

// activate makes a created node one the round opened: it is a candidate
// for later pods and counts against its pool.
func (r *round) activate(n *simNode) {
	p := n.pool
	if n.wake != nil {
		r.woken[n.wake] = true
	}
	if n.flexible() {
		ci, mi, _ := p.flexFit(n.tmpl.dsReq, -1, -1)
		n.flex = [2]int{ci, mi}
		n.contrib = p.flexCapAt(ci, mi)
	} else {
		n.contrib = n.cands[0].cap
	}
	p.used.nodes++
	r.openedIn[zoneKey{p, n.zone}]++
	p.used.cpu += n.contrib.cpu
	p.used.mem += n.contrib.mem
	r.nodes = append(r.nodes, n)
	r.opened = append(r.opened, n)
}

func (r *round) nextName(p *poolState) string {
	for {
		r.seq++
		name := fmt.Sprintf("%s-new-%d", p.name, r.seq)
		if r.s.snap.lookup(name) == nil {
			return name
		}
	}
}
