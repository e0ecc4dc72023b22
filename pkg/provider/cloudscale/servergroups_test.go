package cloudscale_test

import (
	"fmt"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

func managedGroups(max int32) envOption {
	return withSettings(func(s *v1alpha1.CloudscaleSettings) {
		twoZones(s)
		s.ServerGroups = nil
		s.Zones[1].ServerGroups = nil
		s.ManagedServerGroups = &v1alpha1.CloudscaleManagedServerGroups{MaxServersPerGroup: max}
	})
}

// Servers made at once fill each pool's group in a zone up to the limit and
// open another, never past the limit the API enforces; groups are per pool
// and zone; empty groups go with their last server.
func TestManagedServerGroupsPerPoolAndZone(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, managedGroups(2), withAPIOptions(cloudscaletest.WithServerGroupLimit(2)))

	var wg sync.WaitGroup
	errs := make(chan error, 7)
	create := func(c *v1alpha1.NodeClaim) {
		defer wg.Done()
		_, err := e.p.Create(e.ctx, c, provider.CreateOptions{})
		errs <- err
	}
	for i := range 5 {
		wg.Add(1)
		go create(claim(fmt.Sprintf("workers-lpg1-%d", i), "workers", "flex-4-2"))
	}
	wg.Add(2)
	go create(inZones(claim("workers-rma1-0", "workers", "flex-4-2"), corev1.NodeSelectorOpIn, "rma1"))
	go create(claim("batch-lpg1-0", "batch", "flex-4-2"))
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}

	// Concurrent creates: no group past the limit, every server in a group
	// of its own pool and zone. (A create whose answer is still on its way
	// counts as a member it may already be, so a group can close early.)
	perPoolZone := map[string]int{}
	for _, group := range e.api.ServerGroups() {
		g.Expect(group.Type).To(Equal("anti-affinity"))
		g.Expect(group.Tags).To(HaveKeyWithValue(v1alpha1.TagCluster, testCluster))
		g.Expect(len(group.Servers)).To(BeNumerically("<=", 2), "group %s", group.Name)
		perPoolZone[group.Tags[v1alpha1.TagNodePool]+"/"+group.Zone.Slug] += len(group.Servers)
	}
	g.Expect(perPoolZone).To(Equal(map[string]int{"workers/lpg1": 5, "workers/rma1": 1, "batch/lpg1": 1}))

	// One at a time, groups fill in order.
	for i := range 3 {
		_, err := e.p.Create(e.ctx, inZones(claim(fmt.Sprintf("workers-rma1-seq-%d", i), "workers", "flex-4-2"), corev1.NodeSelectorOpIn, "rma1"), provider.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	members := map[string]int{}
	for _, group := range e.api.ServerGroups() {
		if group.Zone.Slug == "rma1" {
			members[group.Name] = len(group.Servers)
		}
	}
	g.Expect(members).To(Equal(map[string]int{testCluster + "-workers-rma1-1": 2, testCluster + "-workers-rma1-2": 2}))
	for _, srv := range e.api.Servers() {
		g.Expect(srv.ServerGroups).To(HaveLen(1), "server %s joins exactly one managed group", srv.Name)
	}

	for _, srv := range e.api.Servers() {
		g.Expect(e.p.Delete(e.ctx, "cloudscale://"+srv.UUID)).To(Succeed())
	}
	g.Expect(e.api.ServerGroups()).To(BeEmpty(), "empty managed groups are deleted")
}

// Groups claimscale did not make are never touched, even when empty: not
// another cluster's, not an untagged one, not this pool's of another type.
func TestForeignServerGroupsAreLeftAlone(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, managedGroups(2))
	e.api.AddServerGroup(cloudscaletest.ServerGroupSpec{Name: "someone-elses", Zone: "lpg1"})
	e.api.AddServerGroup(cloudscaletest.ServerGroupSpec{Name: "other-cluster", Zone: "lpg1", Tags: map[string]string{v1alpha1.TagCluster: "another", v1alpha1.TagNodePool: "workers"}})
	inst, err := e.p.Create(e.ctx, claim("workers-1", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.api.ServerGroups()).To(HaveLen(3), "a group of its own, not someone else's")
	g.Expect(e.p.Delete(e.ctx, inst.ProviderID)).To(Succeed())
	var names []string
	for _, group := range e.api.ServerGroups() {
		names = append(names, group.Name)
	}
	g.Expect(names).To(ConsistOf("someone-elses", "other-cluster"))
}
