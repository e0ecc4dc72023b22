package scheduling

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// poolState is a pool as the packer uses it.
type poolState struct {
	pool    *v1alpha1.NodePool
	name    string
	weight  int32
	zones   []string
	maxPods int64

	// shapes are the fixed shapes that may be used, cheapest first.
	shapes []*shapeInfo
	// byName has every fixed shape, including unavailable ones, and the
	// shapes of in-flight claims.
	byName map[string]*shapeInfo
	// flex is set for a flexible pool; flexMax is its largest size, whose
	// template decides the static filters and DaemonSets for every size.
	flex     *Flexible
	flexMax  *shapeInfo
	flexMemo [2]map[int]int64
	// unavailable is set when capacity backoff, or an inventory with no
	// machine free, leaves no shape.
	unavailable bool
	// noneFree are the inventory shapes with no machine free, and what
	// holds their machines, sorted.
	noneFree, noneFreeWhy []string
	// unavailableIn are shapes backed off in one zone only, by zone.
	unavailableIn map[string]map[string]bool
	// free counts the machines free of the pool's inventory shapes
	// (Pool.Free); nil when the pool has none.
	free map[*shapeInfo]int

	limNodes, limCPU, limMem int64 // -1: no limit
	inUse                    usage
	// used is inUse plus the nodes opened in the current round.
	used usage

	// templates by zone, then by shapeInfo.idx.
	templates map[string][]*template
	// nShapes counts the shapeInfos made, to number them.
	nShapes int
	// effOrder sorts shapes per zone for the room frontier.
	effOrder map[string][]effShape
	// sleeping are the pool's sleeping machines, cheapest first, then by
	// name: the order they are woken in.
	sleeping []*sleepingMachine
}

type usage struct{ nodes, cpu, mem int64 }

// shapeInfo is a shape with its capacity and allocatable worked out.
type shapeInfo struct {
	shape     Shape
	cap       vec
	alloc     vec
	allocPods int64
	// ext are the shape's devices, nil for none; nothing is reserved of
	// them, so capacity and allocatable are one.
	ext *scalars
	// idx numbers the pool's shapeInfos, for the template index.
	idx int
}

func newPoolState(p *Pool) (*poolState, error) {
	np := p.NodePool
	if np == nil {
		return nil, fmt.Errorf("pool without a NodePool")
	}
	ps := &poolState{
		pool:      np,
		name:      np.Name,
		weight:    np.Spec.Weight,
		zones:     p.Zones,
		maxPods:   maxPods(np),
		byName:    map[string]*shapeInfo{},
		limNodes:  -1,
		limCPU:    -1,
		limMem:    -1,
		templates: map[string][]*template{},
		effOrder:  map[string][]effShape{},
		flexMemo:  [2]map[int]int64{{}, {}},
	}
	if len(ps.zones) == 0 {
		ps.zones = []string{""}
	}
	if l := np.Spec.Limits; l != nil {
		if l.Nodes != nil {
			ps.limNodes = int64(*l.Nodes)
		}
		if l.CPU != nil {
			ps.limCPU = l.CPU.MilliValue()
		}
		if l.Memory != nil {
			ps.limMem = l.Memory.Value()
		}
	}
	ps.inUse = usage{p.InUse.Nodes, p.InUse.CPU.MilliValue(), p.InUse.Memory.Value()}
	unavailable := map[string]bool{}
	for _, n := range p.Unavailable {
		unavailable[n] = true
	}
	for n, taken := range p.NoneFree {
		unavailable[n] = true
		ps.noneFree = append(ps.noneFree, n)
		if taken != "" {
			ps.noneFreeWhy = append(ps.noneFreeWhy, n+": "+taken)
		}
	}
	sort.Strings(ps.noneFree)
	sort.Strings(ps.noneFreeWhy)
	for zone, names := range p.UnavailableIn {
		if ps.unavailableIn == nil {
			ps.unavailableIn = map[string]map[string]bool{}
		}
		ps.unavailableIn[zone] = map[string]bool{}
		for _, n := range names {
			ps.unavailableIn[zone][n] = true
		}
	}
	switch {
	case p.Shapes.Flexible != nil:
		f := p.Shapes.Flexible
		if err := f.validate(); err != nil {
			return nil, fmt.Errorf("flexible shapes of pool %s: %w", np.Name, err)
		}
		ps.flex = f
		var err error
		if ps.flexMax, err = ps.newShapeInfo(f.Largest()); err != nil {
			return nil, err
		}
		// A host that cannot make one size rarely makes another: any
		// backoff entry takes the whole range out.
		ps.unavailable = len(unavailable) > 0
	case len(p.Shapes.Fixed) > 0:
		if err := validateFixed(p.Shapes.Fixed); err != nil {
			return nil, fmt.Errorf("shapes of pool %s: %w", np.Name, err)
		}
		fixed := append([]Shape(nil), p.Shapes.Fixed...)
		sortShapes(fixed)
		for _, sh := range fixed {
			si, err := ps.newShapeInfo(sh)
			if err != nil {
				return nil, err
			}
			ps.byName[sh.Name] = si
			if !unavailable[sh.Name] {
				ps.shapes = append(ps.shapes, si)
			}
			if n, counted := p.Free[sh.Name]; counted {
				if ps.free == nil {
					ps.free = map[*shapeInfo]int{}
				}
				ps.free[si] = n
			}
		}
		ps.unavailable = len(ps.shapes) == 0
	default:
		return nil, fmt.Errorf("pool %s has no shapes", np.Name)
	}
	return ps, nil
}

func (p *poolState) newShapeInfo(sh Shape) (*shapeInfo, error) {
	capacity := shapeCapacity(p.pool, sh)
	alloc, err := allocatableOf(p.pool, capacity)
	if err != nil {
		return nil, err
	}
	p.nShapes++
	return &shapeInfo{
		idx:       p.nShapes - 1,
		shape:     sh,
		cap:       vecOfList(capacity),
		alloc:     vecOfList(alloc),
		allocPods: alloc.Pods().Value(),
		ext:       scalarsOfList(alloc),
	}, nil
}

// shapeNamed finds the shapeInfo of an in-flight claim's shape, making one
// for shapes the pool no longer lists or flexible sizes.
func (p *poolState) shapeNamed(sh Shape) *shapeInfo {
	if si, ok := p.byName[sh.Name]; ok && si.shape.CPU.Cmp(sh.CPU) == 0 && si.shape.Memory.Cmp(sh.Memory) == 0 &&
		sameDevices(si.shape.ExtendedResources, sh.ExtendedResources) {
		return si
	}
	if si, ok := p.byName[sh.Name]; ok && sh.ResourceSlices == nil {
		// A claim records no template slices: a booting node of a shape
		// the pool still lists has the slices the pool gives it.
		sh.ResourceSlices = si.shape.ResourceSlices
	}
	si, err := p.newShapeInfo(sh)
	if err != nil {
		// The pool's kubelet settings were already accepted for its own
		// shapes, so this cannot fail for a valid shape.
		p.nShapes++
		si = &shapeInfo{shape: sh, idx: p.nShapes - 1}
	}
	p.byName[sh.Name] = si
	return si
}

// flexAlloc is the allocatable cpu (axis 0) or memory (axis 1) of flexible
// grid point i.
func (p *poolState) flexAlloc(axis, i int) int64 {
	if v, ok := p.flexMemo[axis][i]; ok {
		return v
	}
	var capacity corev1.ResourceList
	if axis == 0 {
		capacity = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(p.flex.cpuGrid().Size(i), resource.DecimalSI)}
	} else {
		capacity = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(p.flex.memGrid().Size(i), resource.BinarySI)}
	}
	alloc, err := allocatableOf(p.pool, capacity)
	var v int64
	if err == nil {
		if axis == 0 {
			v = alloc.Cpu().MilliValue()
		} else {
			v = alloc.Memory().Value()
		}
	}
	p.flexMemo[axis][i] = v
	return v
}

// flexFit finds the smallest grid point whose allocatable holds need and
// whose capacity stays within budget (cpu and memory, -1 for none).
func (p *poolState) flexFit(need vec, budgetCPU, budgetMem int64) (ci, mi int, ok bool) {
	cg, mg := p.flex.cpuGrid(), p.flex.memGrid()
	ci = sort.Search(cg.Len(), func(i int) bool { return p.flexAlloc(0, i) >= need.cpu })
	mi = sort.Search(mg.Len(), func(i int) bool { return p.flexAlloc(1, i) >= need.mem })
	if ci == cg.Len() || mi == mg.Len() || need.eph > p.flexMax.alloc.eph {
		return 0, 0, false
	}
	if budgetCPU >= 0 && cg.Size(ci) > budgetCPU || budgetMem >= 0 && mg.Size(mi) > budgetMem {
		return 0, 0, false
	}
	return ci, mi, true
}

// flexLargest is the largest grid point within budget.
func (p *poolState) flexLargest(budgetCPU, budgetMem int64) (ci, mi int, ok bool) {
	cg, mg := p.flex.cpuGrid(), p.flex.memGrid()
	ci, mi = cg.Len()-1, mg.Len()-1
	if budgetCPU >= 0 {
		if ci, ok = cg.Floor(budgetCPU); !ok {
			return 0, 0, false
		}
	}
	if budgetMem >= 0 {
		if mi, ok = mg.Floor(budgetMem); !ok {
			return 0, 0, false
		}
	}
	return ci, mi, true
}

func (p *poolState) flexAllocAt(ci, mi int) vec {
	return vec{cpu: p.flexAlloc(0, ci), mem: p.flexAlloc(1, mi), eph: p.flexMax.alloc.eph}
}

func (p *poolState) flexCapAt(ci, mi int) vec {
	return vec{cpu: p.flex.cpuGrid().Size(ci), mem: p.flex.memGrid().Size(mi), eph: p.flexMax.cap.eph}
}

// budget is what a node of the pool may still take of the cpu and memory
// limits, not counting what it holds already (contrib); -1 for no limit.
func (p *poolState) budget(contrib vec) (cpu, mem int64) {
	cpu, mem = -1, -1
	if p.limCPU >= 0 {
		cpu = p.limCPU - (p.used.cpu - contrib.cpu)
	}
	if p.limMem >= 0 {
		mem = p.limMem - (p.used.mem - contrib.mem)
	}
	return cpu, mem
}

func withinBudget(c vec, cpu, mem int64) bool {
	return (cpu < 0 || c.cpu <= cpu) && (mem < 0 || c.mem <= mem)
}

// shapesIn are the pool's available fixed shapes in a zone: those not
// backed off in that zone alone.
func (p *poolState) shapesIn(zone string) []*shapeInfo {
	out := p.unavailableIn[zone]
	if len(out) == 0 {
		return p.shapes
	}
	shapes := make([]*shapeInfo, 0, len(p.shapes))
	for _, si := range p.shapes {
		if !out[si.shape.Name] {
			shapes = append(shapes, si)
		}
	}
	return shapes
}
