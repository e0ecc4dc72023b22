package scheduling

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Shape is one machine size a pool can make.
type Shape struct {
	// Name becomes the node's node.kubernetes.io/instance-type label.
	Name   string
	CPU    resource.Quantity
	Memory resource.Quantity
	// EphemeralStorage is the root disk. Zero means DefaultDiskSize.
	EphemeralStorage resource.Quantity
	// Price per hour, in whatever currency the pool uses; only compared.
	Price float64
}

// ShapeFromProvider converts a provider's shape. An ephemeral-storage entry
// in its capacity becomes the disk size.
func ShapeFromProvider(s shapecatalog.Shape) Shape {
	return Shape{
		Name:             s.Name,
		CPU:              s.Capacity[corev1.ResourceCPU],
		Memory:           s.Capacity[corev1.ResourceMemory],
		EphemeralStorage: s.Capacity[corev1.ResourceEphemeralStorage],
		Price:            s.Price,
	}
}

// Shapes are what a pool may make: a fixed list, or a flexible range. Exactly
// one is set.
type Shapes struct {
	Fixed    []Shape
	Flexible *Flexible
}

// Flexible is a CPU/memory range on a step grid. Sizes are multiples of the
// step (never below the minimum), so the packer asks for the smallest grid
// point that holds a node's pods.
type Flexible struct {
	MinCPU, MaxCPU, CPUStep          resource.Quantity
	MinMemory, MaxMemory, MemoryStep resource.Quantity
	PricePerCPU, PricePerGiB         float64
	// EphemeralStorage is the root disk of every size. Zero means
	// DefaultDiskSize.
	EphemeralStorage resource.Quantity
}

// PoolShapes resolves what a pool may make. Fixed shapes take CPU, memory
// and price from the pool where it names them, else from the provider's
// catalog (resolved, as returned by shapecatalog.Shapes) by name, else a price
// derived from size. A flexible pool ignores resolved.
func PoolShapes(pool *v1alpha1.NodePool, resolved []shapecatalog.Shape) (Shapes, error) {
	spec := pool.Spec.Shapes
	if f := spec.Flexible; f != nil {
		flex := &Flexible{
			MinCPU: f.MinCPU, MaxCPU: f.MaxCPU, CPUStep: resource.MustParse("1"),
			MinMemory: f.MinMemory, MaxMemory: f.MaxMemory, MemoryStep: resource.MustParse("1Gi"),
			PricePerCPU: shapecatalog.DefaultPricePerCPU, PricePerGiB: shapecatalog.DefaultPricePerGiB,
		}
		if f.CPUStep != nil {
			flex.CPUStep = *f.CPUStep
		}
		if f.MemoryStep != nil {
			flex.MemoryStep = *f.MemoryStep
		}
		var err error
		if f.PricePerCPU != "" {
			if flex.PricePerCPU, err = strconv.ParseFloat(f.PricePerCPU, 64); err != nil {
				return Shapes{}, fmt.Errorf("parsing pricePerCPU of pool %s: %w", pool.Name, err)
			}
		}
		if f.PricePerGiB != "" {
			if flex.PricePerGiB, err = strconv.ParseFloat(f.PricePerGiB, 64); err != nil {
				return Shapes{}, fmt.Errorf("parsing pricePerGiB of pool %s: %w", pool.Name, err)
			}
		}
		if err := flex.validate(); err != nil {
			return Shapes{}, fmt.Errorf("flexible shapes of pool %s: %w", pool.Name, err)
		}
		return Shapes{Flexible: flex}, nil
	}
	byName := make(map[string]shapecatalog.Shape, len(resolved))
	for _, s := range resolved {
		if prev, dup := byName[s.Name]; dup && !sameSize(prev, s) {
			return Shapes{}, fmt.Errorf("the provider's catalog for pool %s lists shape %s twice with different sizes", pool.Name, s.Name)
		}
		byName[s.Name] = s
	}
	var out Shapes
	for _, ps := range spec.Fixed {
		s := Shape{Name: ps.Name}
		known, ok := byName[ps.Name]
		if ok {
			s = ShapeFromProvider(known)
		}
		if ps.CPU != nil {
			s.CPU = *ps.CPU
		}
		if ps.Memory != nil {
			s.Memory = *ps.Memory
		}
		if s.CPU.Sign() <= 0 || s.Memory.Sign() <= 0 {
			return Shapes{}, fmt.Errorf("shape %s of pool %s has no cpu or memory, neither in the pool nor in the provider's catalog", ps.Name, pool.Name)
		}
		if ps.Price != "" {
			p, err := strconv.ParseFloat(ps.Price, 64)
			if err != nil {
				return Shapes{}, fmt.Errorf("parsing price of shape %s of pool %s: %w", ps.Name, pool.Name, err)
			}
			s.Price = p
		}
		if s.Price == 0 {
			s.Price = shapecatalog.SizePrice(s.CPU, s.Memory, shapecatalog.DefaultPricePerCPU, shapecatalog.DefaultPricePerGiB)
		}
		out.Fixed = append(out.Fixed, s)
	}
	if len(out.Fixed) == 0 {
		return Shapes{}, fmt.Errorf("pool %s has no shapes", pool.Name)
	}
	if err := validateFixed(out.Fixed); err != nil {
		return Shapes{}, fmt.Errorf("shapes of pool %s: %w", pool.Name, err)
	}
	return out, nil
}

func sameSize(a, b shapecatalog.Shape) bool {
	return a.Capacity.Cpu().Cmp(*b.Capacity.Cpu()) == 0 && a.Capacity.Memory().Cmp(*b.Capacity.Memory()) == 0
}

// validateFixed checks what packing relies on in a list of shapes: each
// states cpu and memory within what the arithmetic represents, and no name
// is used twice (a node's instance-type label names its shape).
func validateFixed(shapes []Shape) error {
	seen := make(map[string]bool, len(shapes))
	for _, s := range shapes {
		switch {
		case s.Name == "":
			return fmt.Errorf("a shape has no name")
		case seen[s.Name]:
			return fmt.Errorf("shape %s is listed twice", s.Name)
		case !representable(s.CPU, true):
			return fmt.Errorf("shape %s: cpu %s must be a whole number of millicores, greater than zero and at most %s", s.Name, s.CPU.String(), maxOf(true))
		case !representable(s.Memory, false):
			return fmt.Errorf("shape %s: memory %s must be a whole number of bytes, greater than zero and at most %s", s.Name, s.Memory.String(), maxOf(false))
		case s.EphemeralStorage.Sign() < 0 || !s.EphemeralStorage.IsZero() && !representable(s.EphemeralStorage, false):
			return fmt.Errorf("shape %s: ephemeral storage %s must be at most %s", s.Name, s.EphemeralStorage.String(), maxOf(false))
		case math.IsNaN(s.Price) || math.IsInf(s.Price, 0) || s.Price < 0:
			return fmt.Errorf("shape %s: price %v must be a non-negative number", s.Name, s.Price)
		}
		seen[s.Name] = true
	}
	return nil
}

// maxQuantity bounds every cpu (in millicores) and memory (in bytes) value
// of a shape: far beyond any machine, and small enough that the grid
// arithmetic (a size plus a step) never overflows an int64.
const maxQuantity = math.MaxInt64 / 4

// MaxExpandedShapes is the most sizes Expand lists for a flexible range.
const MaxExpandedShapes = 256

// representable reports whether q is positive, at most maxQuantity and a
// whole number in the unit given (millicores for cpu, else bytes), so that
// MilliValue and Value read it exactly instead of wrapping, saturating or
// rounding.
func representable(q resource.Quantity, milli bool) bool {
	limit, exact := resource.NewQuantity(maxQuantity, resource.DecimalSI), func() *resource.Quantity {
		return resource.NewQuantity(q.Value(), resource.DecimalSI)
	}
	if milli {
		limit, exact = resource.NewMilliQuantity(maxQuantity, resource.DecimalSI), func() *resource.Quantity {
			return resource.NewMilliQuantity(q.MilliValue(), resource.DecimalSI)
		}
	}
	return q.Sign() > 0 && q.Cmp(*limit) <= 0 && q.Cmp(*exact()) == 0
}

func (f *Flexible) validate() error {
	for _, c := range []struct {
		what  string
		q     resource.Quantity
		milli bool
	}{
		{"minimum cpu", f.MinCPU, true}, {"maximum cpu", f.MaxCPU, true}, {"cpu step", f.CPUStep, true},
		{"minimum memory", f.MinMemory, false}, {"maximum memory", f.MaxMemory, false}, {"memory step", f.MemoryStep, false},
	} {
		if !representable(c.q, c.milli) {
			return fmt.Errorf("%s %s must be a whole number of %s, greater than zero and at most %s", c.what, c.q.String(), unitOf(c.milli), maxOf(c.milli))
		}
	}
	for _, p := range []float64{f.PricePerCPU, f.PricePerGiB} {
		if math.IsNaN(p) || math.IsInf(p, 0) || p < 0 {
			return fmt.Errorf("price %v must be a non-negative number", p)
		}
	}
	switch {
	case f.MinCPU.Cmp(f.MaxCPU) > 0 || f.MinMemory.Cmp(f.MaxMemory) > 0:
		return fmt.Errorf("minimum exceeds maximum")
	}
	return nil
}

func unitOf(milli bool) string {
	if milli {
		return "millicores"
	}
	return "bytes"
}

func maxOf(milli bool) string {
	if milli {
		return resource.NewMilliQuantity(maxQuantity, resource.DecimalSI).String()
	}
	return resource.NewQuantity(maxQuantity, resource.BinarySI).String()
}

// grid is one axis of a flexible range in integer units (millicores or
// bytes): index 0 is the minimum, index i>0 the i-th multiple of the step
// above it. Every value is in (0, maxQuantity], so no sum or product below
// overflows.
type grid struct{ min, max, step int64 }

func (g grid) first() int64 {
	// The first multiple of step strictly above min: at most min+step.
	return (g.min/g.step + 1) * g.step
}

// size of grid point i.
func (g grid) size(i int) int64 {
	if i == 0 {
		return g.min
	}
	return g.first() + int64(i-1)*g.step
}

// len is the number of grid points.
func (g grid) len() int {
	if g.first() > g.max {
		return 1
	}
	return 2 + int((g.max-g.first())/g.step)
}

// ceil is the smallest grid index whose size is at least v, or false.
func (g grid) ceil(v int64) (int, bool) {
	if v <= g.min {
		return 0, true
	}
	if v > g.max {
		return 0, false
	}
	up := (v + g.step - 1) / g.step * g.step
	if up > g.max {
		return 0, false
	}
	return 1 + int((up-g.first())/g.step), true
}

// floor is the largest grid index whose size is at most v, or false.
func (g grid) floor(v int64) (int, bool) {
	if v < g.min {
		return 0, false
	}
	v = min(v, g.max)
	if v < g.first() {
		return 0, true
	}
	return 1 + int((v-g.first())/g.step), true
}

// sample picks n grid indices spread evenly from the first to the last
// (all of them when the axis has no more than n).
func (g grid) sample(n int) []int {
	l := g.len()
	if l <= n {
		out := make([]int, l)
		for i := range out {
			out[i] = i
		}
		return out
	}
	if n <= 1 {
		return []int{l - 1}
	}
	// i*(l-1)/(n-1) without the product overflowing: l-1 can be near 2^62.
	span, parts := l-1, n-1
	whole, rest := span/parts, span%parts
	out := make([]int, n)
	for i := range out {
		out[i] = i*whole + i*rest/parts
	}
	return out
}

func (f *Flexible) cpuGrid() grid {
	return grid{f.MinCPU.MilliValue(), f.MaxCPU.MilliValue(), f.CPUStep.MilliValue()}
}

func (f *Flexible) memGrid() grid {
	return grid{f.MinMemory.Value(), f.MaxMemory.Value(), f.MemoryStep.Value()}
}

// At returns the shape of CPU grid point ci and memory grid point mi.
func (f *Flexible) at(ci, mi int) Shape {
	cpu := resource.NewMilliQuantity(f.cpuGrid().size(ci), resource.DecimalSI)
	mem := resource.NewQuantity(f.memGrid().size(mi), resource.BinarySI)
	return Shape{
		Name:             shapecatalog.FlexibleName(*cpu, *mem),
		CPU:              *cpu,
		Memory:           *mem,
		EphemeralStorage: f.EphemeralStorage,
		Price:            shapecatalog.SizePrice(*cpu, *mem, f.PricePerCPU, f.PricePerGiB),
	}
}

// Smallest returns the smallest size on the grid with at least cpu and
// memory of capacity, or false when the range has none.
func (f *Flexible) Smallest(cpu, memory resource.Quantity) (Shape, bool) {
	if cpu.Cmp(f.MaxCPU) > 0 || memory.Cmp(f.MaxMemory) > 0 {
		return Shape{}, false
	}
	ci, ok := f.cpuGrid().ceil(cpu.MilliValue())
	if !ok {
		return Shape{}, false
	}
	mi, ok := f.memGrid().ceil(memory.Value())
	if !ok {
		return Shape{}, false
	}
	return f.at(ci, mi), true
}

// Largest is the biggest size on the grid.
func (f *Flexible) Largest() Shape {
	return f.at(f.cpuGrid().len()-1, f.memGrid().len()-1)
}

// Expand lists sizes of the grid, cheapest first, for callers that need a
// catalog (warm capacity, the externalgrpc shim). A grid can be huge (1–64
// cores by 1 and 1–256 GiB by 1 GiB is 16,384 sizes; a range up to 1Ei of
// memory has billions), so at most MaxExpandedShapes are listed: every point
// of a small grid, else points spread evenly over each axis, always with the
// smallest and the largest size. Solve itself never expands: it searches the
// grid.
func (f *Flexible) Expand() []Shape {
	cg, mg := f.cpuGrid(), f.memGrid()
	nc, nm := cg.len(), mg.len()
	switch {
	case nc <= MaxExpandedShapes/nm:
	case nc <= 16:
		nm = MaxExpandedShapes / nc
	case nm <= 16:
		nc = MaxExpandedShapes / nm
	default:
		nc, nm = 16, 16
	}
	cpus, mems := cg.sample(nc), mg.sample(nm)
	out := make([]Shape, 0, len(cpus)*len(mems))
	for _, ci := range cpus {
		for _, mi := range mems {
			out = append(out, f.at(ci, mi))
		}
	}
	sortShapes(out)
	return out
}

// sortShapes orders shapes by Cheaper, so that every choice among them is
// deterministic.
func sortShapes(s []Shape) {
	sort.SliceStable(s, func(i, j int) bool { return Cheaper(s[i], s[j]) })
}

// Cheapest returns the first of shapes by Cheaper, or false if there are
// none.
func Cheapest(shapes []Shape) (Shape, bool) {
	if len(shapes) == 0 {
		return Shape{}, false
	}
	best := shapes[0]
	for _, shape := range shapes[1:] {
		if Cheaper(shape, best) {
			best = shape
		}
	}
	return best, true
}

// Cheaper orders shapes the way every choice among them is made, by
// provisioning, warm capacity and the externalgrpc shim alike: cheapest
// first, then the smaller, then by name.
func Cheaper(a, b Shape) bool {
	if a.Price != b.Price {
		return a.Price < b.Price
	}
	if c := a.CPU.Cmp(b.CPU); c != 0 {
		return c < 0
	}
	if c := a.Memory.Cmp(b.Memory); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}
