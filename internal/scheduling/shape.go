package scheduling

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"

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
	// ExtendedResources are the devices the machine has (nvidia.com/gpu:
	// 1), in whole units: its node advertises them in capacity and
	// allocatable. Nil for none.
	ExtendedResources corev1.ResourceList
	// ResourceSlices are the devices a DRA driver publishes for a node of
	// the shape (see v1alpha1.Shape); nil for none.
	ResourceSlices []v1alpha1.TemplateResourceSlice
}

// ShapeFromProvider converts a provider's shape. An ephemeral-storage entry
// in its capacity becomes the disk size, and extended resources
// (nvidia.com/gpu) the shape's devices.
func ShapeFromProvider(s shapecatalog.Shape) Shape {
	shape := Shape{
		Name:             s.Name,
		CPU:              s.Capacity[corev1.ResourceCPU],
		Memory:           s.Capacity[corev1.ResourceMemory],
		EphemeralStorage: s.Capacity[corev1.ResourceEphemeralStorage],
		Price:            s.Price,
	}
	for name, q := range s.Capacity {
		if v1helper.IsExtendedResourceName(name) {
			if shape.ExtendedResources == nil {
				shape.ExtendedResources = corev1.ResourceList{}
			}
			shape.ExtendedResources[name] = q.DeepCopy()
		}
	}
	return shape
}

// sameDevices says whether two lists of extended resources hold the same
// counts.
func sameDevices(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		other, ok := b[name]
		if !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
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
		grid, err := shapecatalog.GridOf(f)
		if err != nil {
			return Shapes{}, fmt.Errorf("flexible shapes of pool %s: %w", pool.Name, err)
		}
		if err := grid.Validate(); err != nil {
			return Shapes{}, fmt.Errorf("flexible shapes of pool %s: %w", pool.Name, err)
		}
		return Shapes{Flexible: flexibleOf(grid)}, nil
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
		if len(ps.ExtendedResources) > 0 {
			s.ExtendedResources = ps.ExtendedResources.DeepCopy()
		}
		s.ResourceSlices = ps.ResourceSlices
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
			s.Price = shapecatalog.DefaultSizePrice(s.CPU, s.Memory)
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
	return a.Capacity.Cpu().Cmp(*b.Capacity.Cpu()) == 0 && a.Capacity.Memory().Cmp(*b.Capacity.Memory()) == 0 &&
		sameDevices(ShapeFromProvider(a).ExtendedResources, ShapeFromProvider(b).ExtendedResources)
}

// qualifiedDeviceName is a DRA attribute or capacity name: a C identifier
// of at most 32 characters, optionally after a DNS subdomain and a slash.
var qualifiedDeviceName = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z_][A-Za-z0-9_]{0,31}$`)

// validateSlices checks what the API cannot afford to of a shape's
// template slices: the names of device attributes and capacities.
func validateSlices(s Shape) error {
	for _, t := range s.ResourceSlices {
		for _, d := range t.Devices {
			for name := range d.Attributes {
				if !qualifiedDeviceName.MatchString(name) {
					return fmt.Errorf("shape %s: driver %s, device %s: attribute name %q must be a C identifier of at most 32 characters, optionally after a DNS subdomain and a slash (gpu.example.com/model)", s.Name, t.Driver, d.Name, name)
				}
			}
			for name := range d.Capacity {
				if !qualifiedDeviceName.MatchString(name) {
					return fmt.Errorf("shape %s: driver %s, device %s: capacity name %q must be a C identifier of at most 32 characters, optionally after a DNS subdomain and a slash (gpu.example.com/memory)", s.Name, t.Driver, d.Name, name)
				}
			}
		}
	}
	return nil
}

// maxDeviceCount is the most of one device a shape may carry, as the API
// allows it.
const maxDeviceCount = 9999

// validateDevices checks a shape's extended resources: extended resource
// names, in whole units from 1 to maxDeviceCount.
func validateDevices(s Shape) error {
	for name, q := range s.ExtendedResources {
		if !v1helper.IsExtendedResourceName(name) {
			return fmt.Errorf("shape %s: %s is not an extended resource (a domain-prefixed name outside kubernetes.io, e.g. nvidia.com/gpu)", s.Name, name)
		}
		if v, ok := q.AsInt64(); !ok || v < 1 || v > maxDeviceCount {
			return fmt.Errorf("shape %s: %s must be a whole number from 1 to %d, not %s", s.Name, name, maxDeviceCount, q.String())
		}
	}
	return nil
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
		if err := validateDevices(s); err != nil {
			return err
		}
		if err := validateSlices(s); err != nil {
			return err
		}
		seen[s.Name] = true
	}
	return nil
}

// MaxExpandedShapes is the most sizes Expand lists for a flexible range.
const MaxExpandedShapes = shapecatalog.MaxExpandedShapes

func representable(q resource.Quantity, milli bool) bool { return shapecatalog.Representable(q, milli) }

func maxOf(milli bool) string { return shapecatalog.MaxOf(milli) }

// flexibleOf is the scheduling core's view of a grid.
func flexibleOf(g shapecatalog.Grid) *Flexible {
	return &Flexible{
		MinCPU: g.MinCPU, MaxCPU: g.MaxCPU, CPUStep: g.CPUStep,
		MinMemory: g.MinMemory, MaxMemory: g.MaxMemory, MemoryStep: g.MemoryStep,
		PricePerCPU: g.PricePerCPU, PricePerGiB: g.PricePerGiB,
	}
}

// grid is the range as the shape catalog computes on it.
func (f *Flexible) grid() shapecatalog.Grid {
	return shapecatalog.Grid{
		MinCPU: f.MinCPU, MaxCPU: f.MaxCPU, CPUStep: f.CPUStep,
		MinMemory: f.MinMemory, MaxMemory: f.MaxMemory, MemoryStep: f.MemoryStep,
		PricePerCPU: f.PricePerCPU, PricePerGiB: f.PricePerGiB,
	}
}

func (f *Flexible) validate() error { return f.grid().Validate() }

func (f *Flexible) cpuGrid() shapecatalog.Axis { return f.grid().CPUAxis() }

func (f *Flexible) memGrid() shapecatalog.Axis { return f.grid().MemoryAxis() }

// sized is a size of the grid with the range's disk.
func (f *Flexible) sized(s shapecatalog.Shape) Shape {
	shape := ShapeFromProvider(s)
	shape.EphemeralStorage = f.EphemeralStorage
	return shape
}

// at returns the shape of CPU grid point ci and memory grid point mi.
func (f *Flexible) at(ci, mi int) Shape {
	return f.sized(f.grid().At(ci, mi))
}

// Smallest returns the smallest size on the grid with at least cpu and
// memory of capacity, or false when the range has none.
func (f *Flexible) Smallest(cpu, memory resource.Quantity) (Shape, bool) {
	s, ok := f.grid().Smallest(cpu, memory)
	if !ok {
		return Shape{}, false
	}
	return f.sized(s), true
}

// Largest is the biggest size on the grid.
func (f *Flexible) Largest() Shape {
	return f.sized(f.grid().Largest())
}

// Expand lists at most MaxExpandedShapes sizes of the grid, cheapest
// first, for callers that need a catalog (warm capacity, the externalgrpc
// shim); see shapecatalog.Grid.Expand. Solve itself never expands: it
// searches the grid.
func (f *Flexible) Expand() []Shape {
	sizes := f.grid().Expand()
	out := make([]Shape, len(sizes))
	for i, s := range sizes {
		out[i] = f.sized(s)
	}
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
