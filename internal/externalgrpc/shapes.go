package externalgrpc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/poolusability"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/pkg/provider"
)

// ProviderResolver finds the provider that makes a pool's machines.
type ProviderResolver interface {
	ForProviderName(ctx context.Context, name string) (provider.Provider, error)
}

// shapesTTL bounds how stale a pool's resolved shapes may be: resolving
// reads the provider's credentials and may ask its API for a catalog, too
// much for every template or scale-up request, while prices and catalogs
// change rarely. A change to the pool, or to its NodeProvider, is seen at
// once.
const shapesTTL = time.Minute

// poolShapes is what a pool makes, as the shim needs it.
type poolShapes struct {
	// served are the shapes served as node groups, cheapest first.
	served []scheduling.Shape
	// resolved is the pool's shapes as the scheduling core sees them.
	resolved scheduling.Shapes
	// prices are the hourly prices of fixed shapes, by name, where the pool
	// or the provider's catalog names one (not a price derived from size).
	prices map[string]float64
	// flexible prices are the pool's own, when it names them.
	pricePerCPU, pricePerGiB float64
	flexiblePriced           bool
	// free are the machines of an inventory's shapes (bare-metal servers)
	// free to be claimed, by name; a shape not here has no such count.
	free map[string]int
}

// shape returns the served shape of that name.
func (p *poolShapes) shape(name string) (scheduling.Shape, bool) {
	for _, shape := range p.served {
		if shape.Name == name {
			return shape, true
		}
	}
	return scheduling.Shape{}, false
}

// price is a shape's hourly price, when one is known.
func (p *poolShapes) price(name string, cpu, memory resource.Quantity) (float64, bool) {
	if p.flexiblePriced {
		return shapecatalog.SizePrice(cpu, memory, p.pricePerCPU, p.pricePerGiB), true
	}
	price, ok := p.prices[name]
	return price, ok
}

// shapeCache reads pools' shapes from the Pools shared with provisioning
// and the NodePool status, taking an answer up to shapesTTL old, so that
// each pool is resolved once however many requests wait.
type shapeCache struct {
	pools *poolusability.Pools
	// clock is the shim's: the ages of instances are read on it too.
	clock clock.PassiveClock
}

func newShapeCache(pools *poolusability.Pools, clk clock.PassiveClock) *shapeCache {
	return &shapeCache{pools: pools, clock: clk}
}

func (s *shapeCache) get(ctx context.Context, pool *v1alpha1.NodePool) (*poolShapes, error) {
	offer, err := s.pools.Offer(ctx, pool, poolusability.Read{MaxAge: shapesTTL})
	var failed *poolusability.CallError
	switch {
	case errors.As(err, &failed) && failed.Step == poolusability.ListingZones:
		// The shim serves no zones of its own: the shapes are enough.
	case errors.As(err, &failed) && failed.Step == poolusability.ListingShapes:
		return nil, fmt.Errorf("resolving shapes of NodePool %s: %w", pool.Name, failed.Err)
	case err != nil:
		return nil, err
	}
	return served(pool, offer)
}

// served is what the shim serves of a pool's offer.
func served(pool *v1alpha1.NodePool, offer poolusability.Offer) (*poolShapes, error) {
	offered, shapes := offer.Offered, offer.Shapes
	if offer.ShapesErr != nil {
		return nil, offer.ShapesErr
	}
	resolved := &poolShapes{resolved: shapes, prices: map[string]float64{}}
	if f := shapes.Flexible; f != nil {
		resolved.served = flexibleLadder(f)
		if len(resolved.served) == 0 {
			return nil, fmt.Errorf("flexible shapes of NodePool %s hold no size", pool.Name)
		}
		spec := pool.Spec.Shapes.Flexible
		resolved.flexiblePriced = spec.PricePerCPU != "" || spec.PricePerGiB != ""
		resolved.pricePerCPU, resolved.pricePerGiB = f.PricePerCPU, f.PricePerGiB
		return resolved, nil
	}
	if len(shapes.Fixed) == 0 {
		return nil, fmt.Errorf("NodePool %s offers no shapes", pool.Name)
	}
	resolved.served = append([]scheduling.Shape(nil), shapes.Fixed...)
	sort.SliceStable(resolved.served, func(i, j int) bool { return scheduling.Cheaper(resolved.served[i], resolved.served[j]) })
	named := map[string]bool{}
	for _, shape := range pool.Spec.Shapes.Fixed {
		named[shape.Name] = shape.Price != ""
	}
	for _, shape := range offered {
		if shape.Price > 0 {
			named[shape.Name] = true
		}
		if shape.Inventory {
			if resolved.free == nil {
				resolved.free = map[string]int{}
			}
			resolved.free[shape.Name] = shape.Available
		}
	}
	for _, shape := range shapes.Fixed {
		if named[shape.Name] {
			resolved.prices[shape.Name] = shape.Price
		}
	}
	return resolved, nil
}

// flexibleLadder is the sizes of a flexible range served as node groups:
// the smallest, then cpu and memory doubled at each step, and the largest.
// A grid can hold thousands of sizes, too many groups for the autoscaler
// to weigh each loop; a doubling ladder gives it a small choice whose
// steps waste at most half a node.
func flexibleLadder(f *scheduling.Flexible) []scheduling.Shape {
	var ladder []scheduling.Shape
	seen := map[string]bool{}
	add := func(shape scheduling.Shape) {
		if !seen[shape.Name] {
			seen[shape.Name] = true
			ladder = append(ladder, shape)
		}
	}
	cpu, memory := f.MinCPU.DeepCopy(), f.MinMemory.DeepCopy()
	for {
		shape, ok := f.Smallest(cpu, memory)
		if !ok {
			break
		}
		add(shape)
		cpu = *resource.NewMilliQuantity(2*shape.CPU.MilliValue(), resource.DecimalSI)
		memory = *resource.NewQuantity(2*shape.Memory.Value(), resource.BinarySI)
	}
	add(f.Largest())
	sort.SliceStable(ladder, func(i, j int) bool { return scheduling.Cheaper(ladder[i], ladder[j]) })
	return ladder
}
