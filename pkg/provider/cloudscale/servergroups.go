package cloudscale

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// defaultMaxServersPerGroup is how many servers go into one managed group
// when the NodeProvider does not say. cloudscale does not publish its limit
// on anti-affinity groups; this is an assumption (docs/cloudscale.md).
const defaultMaxServersPerGroup = 4

const antiAffinity = "anti-affinity"

// managedGroups are the server groups claimscale keeps for anti-affinity,
// one set per pool and zone. Choosing a group and creating the server into
// it are two API calls, so each choice is kept as a reservation of the
// group: while its create is under way, and after it until a listing of
// the group shows the server. Two concurrent creates thus never fill a
// group past its limit, and a server is never counted twice.
type managedGroups struct {
	mu       sync.Mutex
	reserved map[string][]*reservation // by group UUID
}

type reservation struct {
	// server is the UUID of the server made, once its create has returned.
	server string
}

// settle counts the group's reservations that members does not show yet,
// and drops those it does.
func (m *managedGroups) settle(group string, members []cloudscale.ServerStub) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.reserved[group][:0]
	for _, r := range m.reserved[group] {
		if r.server != "" && slices.ContainsFunc(members, func(s cloudscale.ServerStub) bool { return s.UUID == r.server }) {
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		delete(m.reserved, group)
		return 0
	}
	m.reserved[group] = kept
	return len(kept)
}

// reserve records a choice of the group. The returned done takes the UUID
// of the server made, or "" when the create made none (which ends the
// reservation at once).
func (m *managedGroups) reserve(group string) func(server string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &reservation{}
	m.reserved[group] = append(m.reserved[group], r)
	return func(server string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if server != "" {
			r.server = server
			return
		}
		m.reserved[group] = slices.DeleteFunc(m.reserved[group], func(x *reservation) bool { return x == r })
	}
}

// forget drops the reservation of a server that was deleted before any
// listing of its group showed it.
func (m *managedGroups) forget(server string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for group, rs := range m.reserved {
		m.reserved[group] = slices.DeleteFunc(rs, func(r *reservation) bool { return r.server == server })
	}
}

// serverGroupFor returns the managed group the next server of pool in zone
// joins, opening a new one when every group is full, and a done to call
// with the server's UUID ("" if none was made) once its create returned.
func (p *Provider) serverGroupFor(ctx context.Context, pool, zone string) (string, func(server string), error) {
	limit := p.settings.maxServersPerGroup
	p.groupMu.Lock()
	defer p.groupMu.Unlock()
	groups, err := p.poolServerGroups(ctx, pool)
	if err != nil {
		return "", nil, err
	}
	index := 0
	for _, g := range groups {
		if g.Zone.Slug != zone {
			continue
		}
		index++
		if len(g.Servers)+p.groups.settle(g.UUID, g.Servers) < limit {
			return g.UUID, p.groups.reserve(g.UUID), nil
		}
	}
	req := &cloudscale.ServerGroupRequest{
		ZonalResourceRequest:  cloudscale.ZonalResourceRequest{Zone: zone},
		TaggedResourceRequest: cloudscale.TaggedResourceRequest{Tags: &cloudscale.TagMap{v1alpha1.TagCluster: p.clusterName, v1alpha1.TagNodePool: pool}},
		Name:                  fmt.Sprintf("%s-%s-%s-%d", p.clusterName, pool, zone, index+1),
		Type:                  antiAffinity,
	}
	var group *cloudscale.ServerGroup
	err = p.retry(ctx, func(ctx context.Context) error {
		return p.do(ctx, func(ctx context.Context) error {
			var err error
			group, err = p.api.ServerGroups.Create(ctx, req)
			return err
		})
	})
	if err != nil {
		return "", nil, fmt.Errorf("creating server group %s for pool %s in zone %s: %w", req.Name, pool, zone, err)
	}
	logf.FromContext(ctx).Info("created cloudscale server group", "serverGroup", group.UUID, "name", group.Name, "zone", zone)
	return group.UUID, p.groups.reserve(group.UUID), nil
}

// poolServerGroups lists the pool's managed groups (tagged with this
// cluster and the pool, checked again here), by name.
func (p *Provider) poolServerGroups(ctx context.Context, pool string) ([]cloudscale.ServerGroup, error) {
	var all []cloudscale.ServerGroup
	err := p.retry(ctx, func(ctx context.Context) error {
		return p.do(ctx, func(ctx context.Context) error {
			var err error
			all, err = p.api.ServerGroups.List(ctx, cloudscale.WithTagFilter(cloudscale.TagMap{
				v1alpha1.TagCluster: p.clusterName, v1alpha1.TagNodePool: pool,
			}))
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing server groups of pool %s: %w", pool, err)
	}
	var groups []cloudscale.ServerGroup
	for _, g := range all {
		if g.Tags[v1alpha1.TagCluster] == p.clusterName && g.Tags[v1alpha1.TagNodePool] == pool && g.Type == antiAffinity {
			groups = append(groups, g)
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	return groups, nil
}

// pruneServerGroups deletes the pool's managed groups that hold no server
// and no create under way. It runs after a server is deleted; a failure is
// logged, not returned: the server is gone, and the next delete tries again.
func (p *Provider) pruneServerGroups(ctx context.Context, pool string) {
	p.groupMu.Lock()
	defer p.groupMu.Unlock()
	log := logf.FromContext(ctx)
	groups, err := p.poolServerGroups(ctx, pool)
	if err != nil {
		log.Info("could not list server groups to remove empty ones", "nodepool", pool, "error", err.Error())
		return
	}
	for _, g := range groups {
		if len(g.Servers) > 0 || p.groups.settle(g.UUID, g.Servers) > 0 {
			continue
		}
		err := p.retry(ctx, func(ctx context.Context) error {
			return p.do(ctx, func(ctx context.Context) error { return p.api.ServerGroups.Delete(ctx, g.UUID) })
		})
		if err != nil {
			log.Info("could not delete empty server group", "serverGroup", g.UUID, "name", g.Name, "error", err.Error())
			continue
		}
		log.Info("deleted empty cloudscale server group", "serverGroup", g.UUID, "name", g.Name)
	}
}
