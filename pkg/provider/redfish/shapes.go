package redfish

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// fits reports whether the server's own inventory holds the pool's shape;
// a BMC that reports no count is taken at the operator's word.
func fits(seen *observation, shape provider.Shape) bool {
	cpu, memory := shape.Capacity[corev1.ResourceCPU], shape.Capacity[corev1.ResourceMemory]
	if seen.cpus > 0 && cpu.MilliValue() > seen.cpus*1000 {
		return false
	}
	if seen.memoryGiB > 0 && float64(memory.Value()) > seen.memoryGiB*(1<<30) {
		return false
	}
	return true
}

// Shapes returns the pool's fixed shapes as an inventory: each with the
// number of its servers that are off and free to power on, within the cap
// on servers on (none at the cap), so that a round makes no more claims
// of a shape than it has servers.
func (p *Provider) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	if pool.Spec.Shapes.Flexible != nil {
		return nil, provider.NewTerminal(fmt.Errorf("NodePool %s asks for flexible shapes; a redfish inventory has only the fixed shapes its servers name", pool.Name))
	}
	poolShapes, err := fixedShapes(pool)
	if err != nil {
		return nil, err
	}
	leases, err := p.ledger.leases(ctx)
	if err != nil {
		return nil, err
	}
	room := p.room(leases)
	offered := make([]provider.Shape, 0, len(poolShapes))
	for _, shape := range poolShapes {
		free, taken := p.sorted(ctx, shape, leases, false)
		shape.Inventory, shape.Available = true, min(len(free), room)
		if shape.Available == 0 {
			if room == 0 && len(free) > 0 {
				taken = []string{p.atCap().Error()}
			}
			shape.Taken = strings.Join(taken, ", ")
		}
		offered = append(offered, shape)
	}
	return offered, nil
}

// room is how many more servers may be powered on under the cap.
func (p *Provider) room(leases map[string]*lease) int {
	if p.settings.maxPoweredOn == 0 {
		return len(p.servers)
	}
	on := 0
	for _, l := range leases {
		if !l.Asleep {
			on++
		}
	}
	return max(p.settings.maxPoweredOn-on, 0)
}

// atCap says the provider is at its cap on servers on.
func (p *Provider) atCap() error {
	return fmt.Errorf("NodeProvider %s has %d servers on, its maxPoweredOn", p.nodeProvider, p.settings.maxPoweredOn)
}

// capped reports whether powering on one more server would pass the cap.
func (p *Provider) capped(leases map[string]*lease) bool { return p.room(leases) == 0 }

// candidates are the servers of a shape that are off, unleased and large
// enough, in inventory order.
func (p *Provider) candidates(ctx context.Context, shape provider.Shape, leases map[string]*lease, fresh bool) []*server {
	free, _ := p.sorted(ctx, shape, leases, fresh)
	return free
}

// sorted splits the servers of a shape into those free to power on, in
// inventory order, and what holds each of the others, for a pod that
// finds none free.
func (p *Provider) sorted(ctx context.Context, shape provider.Shape, leases map[string]*lease, fresh bool) (free []*server, taken []string) {
	for _, s := range p.servers {
		if s.spec.Shape != shape.Name {
			continue
		}
		if l := leases[s.spec.Name]; l != nil {
			state := "on"
			if l.Asleep {
				state = "asleep"
			}
			taken = append(taken, fmt.Sprintf("%s %s for claim %s", s.spec.Name, state, l.Claim))
			continue
		}
		seen, err := p.observe(ctx, s, fresh)
		if err != nil {
			taken = append(taken, s.spec.Name+" unreachable")
			continue
		}
		if !fits(seen, shape) {
			p.report(s.spec.Name, ProblemInventoryMismatch, fmt.Sprintf("server %s has %d cpus and %.0f GiB of memory, less than its shape %s: not offered", s.spec.Name, seen.cpus, seen.memoryGiB, shape.Name))
			taken = append(taken, s.spec.Name+" smaller than the shape")
			continue
		}
		p.clear(s.spec.Name, ProblemInventoryMismatch)
		switch seen.power {
		case schemas.OffPowerState:
			p.clear(s.spec.Name, ProblemPoweredOnWithoutClaim)
			free = append(free, s)
		case schemas.OnPowerState, schemas.PoweringOnPowerState:
			p.report(s.spec.Name, ProblemPoweredOnWithoutClaim, fmt.Sprintf("server %s is on without a claim of this cluster: left alone and not offered", s.spec.Name))
			taken = append(taken, s.spec.Name+" on without a claim")
		default:
			taken = append(taken, fmt.Sprintf("%s %s", s.spec.Name, seen.power))
		}
	}
	return free, taken
}

func fixedShapes(pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	out := make([]provider.Shape, 0, len(pool.Spec.Shapes.Fixed))
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.CPU == nil || s.Memory == nil {
			return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s needs cpu and memory: a server's size is what its pool says", s.Name, pool.Name))
		}
		capacity := corev1.ResourceList{corev1.ResourceCPU: *s.CPU, corev1.ResourceMemory: *s.Memory}
		// A server's devices (its GPUs) are what its shape says: the BMC's
		// inventory is not read for them, the node's device plugin
		// advertises them once it runs.
		for name, count := range s.ExtendedResources {
			capacity[name] = count.DeepCopy()
		}
		price := shapecatalog.DefaultSizePrice(*s.CPU, *s.Memory)
		if s.Price != "" {
			var err error
			if price, err = strconv.ParseFloat(s.Price, 64); err != nil {
				return nil, provider.NewTerminal(fmt.Errorf("shape %q of NodePool %s has price %q, which is not a number", s.Name, pool.Name, s.Price))
			}
		}
		out = append(out, provider.Shape{Name: s.Name, Capacity: capacity, Price: price})
	}
	return out, nil
}
