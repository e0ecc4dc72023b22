package cloudscale

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// UnknownFlavorError says a pool names flavors the zone does not offer. The
// pool controller shows it as ProviderReady=False; find it with errors.As.
type UnknownFlavorError struct {
	// Pool that names the flavors.
	Pool string
	// Zone, of the provider's zones, that lacks them.
	Zone string
	// Flavors the pool names that the zone does not offer.
	Flavors []string
	// Available flavors in the zone, for the message.
	Available []string
}

func (e *UnknownFlavorError) Error() string {
	noun := "flavor"
	if len(e.Flavors) > 1 {
		noun = "flavors"
	}
	return fmt.Sprintf("nodepool %s names cloudscale %s %s that zone %s does not offer (available: %s)",
		e.Pool, noun, strings.Join(e.Flavors, ", "), e.Zone, strings.Join(e.Available, ", "))
}

// flavor is one entry of GET /v1/flavors. The SDK at v6 has no flavor
// service, so the provider reads the list itself through the SDK's client.
type flavor struct {
	Slug      string `json:"slug"`
	Name      string `json:"name"`
	VCPUCount int    `json:"vcpu_count"`
	MemoryGB  int    `json:"memory_gb"`
	// GPU is null for a flavor without GPUs (cloudscale-go-sdk v8
	// flavors.go, FlavorGPU).
	GPU *struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	} `json:"gpu"`
	Zones []struct {
		Slug string `json:"slug"`
	} `json:"zones"`
}

// Extended resources of GPU flavors: what the vendor's device plugin on
// the server advertises (NVIDIA's k8s-device-plugin nvidia.com/gpu, AMD's
// amd.com/gpu).
const (
	ResourceNVIDIAGPU corev1.ResourceName = "nvidia.com/gpu"
	ResourceAMDGPU    corev1.ResourceName = "amd.com/gpu"
)

// devices are a flavor's GPUs as extended resources, by the vendor the
// model's name starts with; nil for a flavor without GPUs or of a vendor
// this provider cannot name.
func (f flavor) devices() corev1.ResourceList {
	if f.GPU == nil || f.GPU.Count < 1 {
		return nil
	}
	var name corev1.ResourceName
	switch model := strings.ToLower(f.GPU.Name); {
	case strings.HasPrefix(model, "nvidia"):
		name = ResourceNVIDIAGPU
	case strings.HasPrefix(model, "amd"):
		name = ResourceAMDGPU
	default:
		return nil
	}
	return corev1.ResourceList{name: *resource.NewQuantity(int64(f.GPU.Count), resource.DecimalSI)}
}

// checkDevices says whether a pool's shape declares only the extended
// resources its flavor has, as many as it has: a node bought for a device
// the server would not have would leave its pods pending.
func checkDevices(pool string, s v1alpha1.Shape, f flavor) error {
	have := f.devices()
	for _, name := range slices.Sorted(maps.Keys(s.ExtendedResources)) {
		want, got := s.ExtendedResources[name], have[name]
		if want.Cmp(got) == 0 {
			continue
		}
		gpus := "no GPU"
		if f.GPU != nil {
			gpus = fmt.Sprintf("%d %s", f.GPU.Count, f.GPU.Name)
		}
		return fmt.Errorf("nodepool %s shape %s declares %s %s, but the cloudscale flavor has %s (as extended resources: %s)", pool, s.Name, want.String(), name, gpus, describeResources(have))
	}
	return nil
}

func describeResources(l corev1.ResourceList) string {
	if len(l) == 0 {
		return "none"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(l)) {
		q := l[name]
		parts = append(parts, fmt.Sprintf("%s: %s", name, q.String()))
	}
	return strings.Join(parts, ", ")
}

func (f flavor) offeredIn(zone string) bool {
	// An entry without zones is taken to be offered everywhere (older
	// answers of the API list no zones).
	if len(f.Zones) == 0 {
		return true
	}
	for _, z := range f.Zones {
		if z.Slug == zone {
			return true
		}
	}
	return false
}

// flavorCache holds the flavors by slug, with the zones each is offered in.
type flavorCache struct {
	fetched time.Time
	bySlug  map[string]flavor
}

// Shapes resolves the pool's fixed shapes against the flavors offered in
// every one of the provider's zones (a pool's shapes apply in all of them):
// CPU and memory come from the flavor, the price from the pool. The API
// knows no prices; a pool that prices none of its flavors gets price zero,
// unknown, which provisioning ranks by size (so the cheapest-first choice
// still prefers the smaller flavor and never takes one as free) without
// showing the rank as money. A GPU flavor's GPUs are in its capacity as
// an extended resource (nvidia.com/gpu for NVIDIA's); a shape that
// declares extended resources its flavor lacks is refused.
func (p *Provider) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	if pool.Spec.Shapes.Flexible != nil {
		return nil, provider.NewTerminal(fmt.Errorf("nodepool %s sets shapes.flexible, but cloudscale servers come in fixed flavors: list them under shapes.fixed", pool.Name))
	}
	flavors, err := p.allFlavors(ctx)
	if err != nil {
		return nil, err
	}
	for _, zone := range p.settings.zoneNames() {
		var unknown []string
		for _, s := range pool.Spec.Shapes.Fixed {
			if f, ok := flavors[s.Name]; !ok || !f.offeredIn(zone) {
				unknown = append(unknown, s.Name)
			}
		}
		if len(unknown) > 0 {
			var available []string
			for slug, f := range flavors {
				if f.offeredIn(zone) {
					available = append(available, slug)
				}
			}
			slices.Sort(available)
			return nil, provider.NewTerminal(&UnknownFlavorError{Pool: pool.Name, Zone: zone, Flavors: unknown, Available: available})
		}
	}
	var priced, unpriced []string
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.Price != "" {
			priced = append(priced, s.Name)
		} else {
			unpriced = append(unpriced, s.Name)
		}
	}
	if len(priced) > 0 && len(unpriced) > 0 {
		return nil, provider.NewTerminal(fmt.Errorf("nodepool %s prices flavors %s but not %s: the cloudscale API has no prices, so price every flavor or none (then they are ranked by size)",
			pool.Name, strings.Join(priced, ", "), strings.Join(unpriced, ", ")))
	}
	shapes := make([]provider.Shape, 0, len(pool.Spec.Shapes.Fixed))
	for _, s := range pool.Spec.Shapes.Fixed {
		f := flavors[s.Name]
		if err := checkDevices(pool.Name, s, f); err != nil {
			return nil, provider.NewTerminal(err)
		}
		// Unpriced: zero, the provider contract's "unknown". Provisioning
		// ranks such flavors by size, and shows and counts no price.
		price := 0.0
		if s.Price != "" {
			price, err = strconv.ParseFloat(s.Price, 64)
			if err != nil {
				return nil, provider.NewTerminal(fmt.Errorf("nodepool %s shape %s: price %q: %w", pool.Name, s.Name, s.Price, err))
			}
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(f.VCPUCount), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(f.MemoryGB)<<30, resource.BinarySI),
		}
		maps.Copy(capacity, f.devices())
		shapes = append(shapes, provider.Shape{Name: f.Slug, Capacity: capacity, Price: price})
	}
	return shapes, nil
}

// allFlavors returns every flavor with the zones it is offered in, listing
// them at most once per cfg.FlavorTTL however many pools and claims ask.
func (p *Provider) allFlavors(ctx context.Context) (map[string]flavor, error) {
	if cached, ok := p.cachedFlavors(); ok {
		return cached, nil
	}
	shared := context.WithoutCancel(ctx)
	ch := p.calls.DoChan("flavors", func() (any, error) {
		// A call that finished between our look at the cache and this one
		// starting has filled it.
		if cached, ok := p.cachedFlavors(); ok {
			return cached, nil
		}
		var all []flavor
		err := p.retry(shared, func(ctx context.Context) error {
			return p.do(ctx, func(ctx context.Context) error {
				req, err := p.api.NewRequest(ctx, http.MethodGet, "v1/flavors", nil)
				if err != nil {
					return err
				}
				all = nil
				return p.api.Do(ctx, req, &all)
			})
		})
		if err != nil {
			return nil, fmt.Errorf("listing cloudscale flavors: %w", err)
		}
		bySlug := map[string]flavor{}
		for _, f := range all {
			bySlug[f.Slug] = f
		}
		p.mu.Lock()
		p.flavors = flavorCache{fetched: p.clock.Now(), bySlug: bySlug}
		p.mu.Unlock()
		return bySlug, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(map[string]flavor), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Provider) cachedFlavors() (map[string]flavor, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flavors.bySlug == nil || p.clock.Since(p.flavors.fetched) >= p.cfg.FlavorTTL {
		return nil, false
	}
	return p.flavors.bySlug, true
}
