package shapecatalog

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Grid is a pool's flexible range: the cpu and memory sizes it may make,
// on a step grid, and their unit prices. The scheduling core sizes claims
// on it and every provider lists its sizes from it, so that a size a claim
// asks for is a size the provider names, by FlexibleName.
//
// Each axis holds the minimum, then every multiple of the step above it up
// to the maximum (see Axis).
type Grid struct {
	MinCPU, MaxCPU, CPUStep          resource.Quantity
	MinMemory, MaxMemory, MemoryStep resource.Quantity
	PricePerCPU, PricePerGiB         float64
}

// Default steps of a flexible range that names none.
var (
	DefaultCPUStep    = resource.MustParse("1")
	DefaultMemoryStep = resource.MustParse("1Gi")
)

// GridOf reads a pool's shapes.flexible: steps and unit prices default
// where it names none. The grid is not validated; see Validate.
func GridOf(f *v1alpha1.FlexibleShape) (Grid, error) {
	g := Grid{
		MinCPU: f.MinCPU, MaxCPU: f.MaxCPU, CPUStep: DefaultCPUStep,
		MinMemory: f.MinMemory, MaxMemory: f.MaxMemory, MemoryStep: DefaultMemoryStep,
		PricePerCPU: DefaultPricePerCPU, PricePerGiB: DefaultPricePerGiB,
	}
	if f.CPUStep != nil {
		g.CPUStep = *f.CPUStep
	}
	if f.MemoryStep != nil {
		g.MemoryStep = *f.MemoryStep
	}
	var err error
	if f.PricePerCPU != "" {
		if g.PricePerCPU, err = strconv.ParseFloat(f.PricePerCPU, 64); err != nil {
			return Grid{}, fmt.Errorf("parsing pricePerCPU: %w", err)
		}
	}
	if f.PricePerGiB != "" {
		if g.PricePerGiB, err = strconv.ParseFloat(f.PricePerGiB, 64); err != nil {
			return Grid{}, fmt.Errorf("parsing pricePerGiB: %w", err)
		}
	}
	return g, nil
}

// MaxQuantity bounds every cpu (in millicores) and memory (in bytes) value
// of a shape: far beyond any machine, and small enough that the grid
// arithmetic (a size plus a step) never overflows an int64.
const MaxQuantity = math.MaxInt64 / 4

// MaxExpandedShapes is the most sizes Expand lists for a flexible range.
const MaxExpandedShapes = 256

// Representable reports whether q is positive, at most MaxQuantity and a
// whole number in the unit given (millicores for cpu, else bytes), so that
// MilliValue and Value read it exactly instead of wrapping, saturating or
// rounding.
func Representable(q resource.Quantity, milli bool) bool {
	limit, exact := resource.NewQuantity(MaxQuantity, resource.DecimalSI), func() *resource.Quantity {
		return resource.NewQuantity(q.Value(), resource.DecimalSI)
	}
	if milli {
		limit, exact = resource.NewMilliQuantity(MaxQuantity, resource.DecimalSI), func() *resource.Quantity {
			return resource.NewMilliQuantity(q.MilliValue(), resource.DecimalSI)
		}
	}
	return q.Sign() > 0 && q.Cmp(*limit) <= 0 && q.Cmp(*exact()) == 0
}

// UnitOf names the unit Representable counts in.
func UnitOf(milli bool) string {
	if milli {
		return "millicores"
	}
	return "bytes"
}

// MaxOf is MaxQuantity as a cpu (milli) or memory quantity.
func MaxOf(milli bool) string {
	if milli {
		return resource.NewMilliQuantity(MaxQuantity, resource.DecimalSI).String()
	}
	return resource.NewQuantity(MaxQuantity, resource.BinarySI).String()
}

// Validate checks what the grid arithmetic relies on: every bound and step
// a whole, positive number of millicores or bytes within MaxQuantity,
// prices that are numbers not below zero, and minimums not above maximums.
func (g Grid) Validate() error {
	for _, c := range []struct {
		what  string
		q     resource.Quantity
		milli bool
	}{
		{"minimum cpu", g.MinCPU, true}, {"maximum cpu", g.MaxCPU, true}, {"cpu step", g.CPUStep, true},
		{"minimum memory", g.MinMemory, false}, {"maximum memory", g.MaxMemory, false}, {"memory step", g.MemoryStep, false},
	} {
		if !Representable(c.q, c.milli) {
			return fmt.Errorf("%s %s must be a whole number of %s, greater than zero and at most %s", c.what, c.q.String(), UnitOf(c.milli), MaxOf(c.milli))
		}
	}
	for _, p := range []float64{g.PricePerCPU, g.PricePerGiB} {
		if math.IsNaN(p) || math.IsInf(p, 0) || p < 0 {
			return fmt.Errorf("price %v must be a non-negative number", p)
		}
	}
	if g.MinCPU.Cmp(g.MaxCPU) > 0 || g.MinMemory.Cmp(g.MaxMemory) > 0 {
		return fmt.Errorf("the minimum exceeds the maximum")
	}
	return nil
}

// CPUAxis is the grid's cpu axis in millicores.
func (g Grid) CPUAxis() Axis {
	return Axis{g.MinCPU.MilliValue(), g.MaxCPU.MilliValue(), g.CPUStep.MilliValue()}
}

// MemoryAxis is the grid's memory axis in bytes.
func (g Grid) MemoryAxis() Axis {
	return Axis{g.MinMemory.Value(), g.MaxMemory.Value(), g.MemoryStep.Value()}
}

// At is the size at cpu grid point ci and memory grid point mi, named by
// FlexibleName and priced at the grid's unit prices.
func (g Grid) At(ci, mi int) Shape {
	return g.sized(g.CPUAxis().Size(ci), g.MemoryAxis().Size(mi))
}

// sized is the shape of milli millicores and bytes of memory.
func (g Grid) sized(milli, bytes int64) Shape {
	cpu := *resource.NewMilliQuantity(milli, resource.DecimalSI)
	memory := *resource.NewQuantity(bytes, resource.BinarySI)
	return Shape{
		Name:     FlexibleName(cpu, memory),
		Capacity: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory},
		Price:    SizePrice(cpu, memory, g.PricePerCPU, g.PricePerGiB),
	}
}

// Smallest returns the smallest size on the grid with at least cpu and
// memory of capacity, or false when the range has none.
func (g Grid) Smallest(cpu, memory resource.Quantity) (Shape, bool) {
	if cpu.Cmp(g.MaxCPU) > 0 || memory.Cmp(g.MaxMemory) > 0 {
		return Shape{}, false
	}
	ci, ok := g.CPUAxis().Ceil(cpu.MilliValue())
	if !ok {
		return Shape{}, false
	}
	mi, ok := g.MemoryAxis().Ceil(memory.Value())
	if !ok {
		return Shape{}, false
	}
	return g.At(ci, mi), true
}

// Largest is the biggest size on the grid.
func (g Grid) Largest() Shape {
	return g.At(g.CPUAxis().Len()-1, g.MemoryAxis().Len()-1)
}

// Rounding is the whole units a provider makes machines in: a size of the
// grid is rounded up to a multiple of CPU millicores and Memory bytes.
// Zero leaves an axis as it is.
type Rounding struct {
	CPU, Memory int64
}

// Expand lists sizes of the grid, cheapest first, for callers that need a
// catalog (a provider's Shapes, warm capacity, the externalgrpc shim). A
// grid can be huge (1–64 cores by 1 and 1–256 GiB by 1 GiB is 16,384
// sizes; a range up to 1Ei of memory has billions), so at most
// MaxExpandedShapes are listed: every point of a small grid, else points
// spread evenly over each axis, always with the smallest and the largest
// size. The scheduling core never expands: it searches the grid.
func (g Grid) Expand() []Shape {
	return g.ExpandRounded(Rounding{})
}

// ExpandRounded is Expand for a provider whose machines come in whole
// units (Proxmox: cores and MiB): each size is rounded up to them, named
// and priced as rounded, since that is what the machine gets, and sizes
// that round alike are listed once.
func (g Grid) ExpandRounded(r Rounding) []Shape {
	cg, mg := g.CPUAxis(), g.MemoryAxis()
	nc, nm := cg.Len(), mg.Len()
	switch {
	case nc <= MaxExpandedShapes/nm:
	case nc <= 16:
		nm = MaxExpandedShapes / nc
	case nm <= 16:
		nc = MaxExpandedShapes / nm
	default:
		nc, nm = 16, 16
	}
	cpus, memories := cg.values(cg.Sample(nc), r.CPU), mg.values(mg.Sample(nm), r.Memory)
	out := make([]Shape, 0, len(cpus)*len(memories))
	for _, milli := range cpus {
		for _, bytes := range memories {
			out = append(out, g.sized(milli, bytes))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return Cheaper(out[i], out[j]) })
	return out
}

// Cheaper orders sizes the way every choice among them is made: cheapest
// first, then the smaller, then by name.
func Cheaper(a, b Shape) bool {
	if a.Price != b.Price {
		return a.Price < b.Price
	}
	if c := a.Capacity.Cpu().Cmp(*b.Capacity.Cpu()); c != 0 {
		return c < 0
	}
	if c := a.Capacity.Memory().Cmp(*b.Capacity.Memory()); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// Axis is one axis of a flexible range in integer units (millicores or
// bytes): index 0 is the minimum, index i>0 the i-th multiple of the step
// above it. Every value is in (0, MaxQuantity], so no sum or product below
// overflows.
type Axis struct{ Min, Max, Step int64 }

func (a Axis) first() int64 {
	// The first multiple of step strictly above min: at most min+step.
	return (a.Min/a.Step + 1) * a.Step
}

// Size of grid point i.
func (a Axis) Size(i int) int64 {
	if i == 0 {
		return a.Min
	}
	return a.first() + int64(i-1)*a.Step
}

// Len is the number of grid points.
func (a Axis) Len() int {
	if a.first() > a.Max {
		return 1
	}
	return 2 + int((a.Max-a.first())/a.Step)
}

// Ceil is the smallest grid index whose size is at least v, or false.
func (a Axis) Ceil(v int64) (int, bool) {
	if v <= a.Min {
		return 0, true
	}
	if v > a.Max {
		return 0, false
	}
	up := (v + a.Step - 1) / a.Step * a.Step
	if up > a.Max {
		return 0, false
	}
	return 1 + int((up-a.first())/a.Step), true
}

// Floor is the largest grid index whose size is at most v, or false.
func (a Axis) Floor(v int64) (int, bool) {
	if v < a.Min {
		return 0, false
	}
	v = min(v, a.Max)
	if v < a.first() {
		return 0, true
	}
	return 1 + int((v-a.first())/a.Step), true
}

// Sample picks n grid indices spread evenly from the first to the last
// (all of them when the axis has no more than n).
func (a Axis) Sample(n int) []int {
	l := a.Len()
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

// values are the sizes of the grid indices, rounded up to a multiple of
// unit (when not zero) and listed once each, in order.
func (a Axis) values(indices []int, unit int64) []int64 {
	out := make([]int64, 0, len(indices))
	for _, i := range indices {
		v := a.Size(i)
		if unit > 0 {
			// Without v+unit-1, which could pass the int64 bound.
			v = (v/unit + min(v%unit, 1)) * unit
		}
		out = append(out, v)
	}
	return slices.Compact(out)
}
