package cloudscaletest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cloudscale-ch/cloudscale-go-sdk/v6"
	. "github.com/onsi/gomega"

	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

func client(t *testing.T, s *cloudscaletest.Server, token string) *cloudscale.Client {
	t.Helper()
	t.Setenv("CLOUDSCALE_API_URL", s.URL+"/")
	c := cloudscale.NewClient(http.DefaultClient)
	c.AuthToken = token
	return c
}

func statusOf(err error) int {
	var e *cloudscale.ErrorResponse
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

func TestTheFakeAnswersLikeTheAPI(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := cloudscaletest.NewServer(cloudscaletest.WithToken("good"))
	defer s.Close()

	_, err := client(t, s, "bad").Servers.List(ctx)
	g.Expect(statusOf(err)).To(Equal(http.StatusUnauthorized), "a wrong token is refused")

	c := client(t, s, "good")
	tags := cloudscale.TagMap{"claimscale.io/cluster": "prod", "claimscale.io/nodeclaim": "c1"}
	created, err := c.Servers.Create(ctx, &cloudscale.ServerRequest{
		TaggedResourceRequest: cloudscale.TaggedResourceRequest{Tags: &tags},
		Name:                  "c1", Flavor: "flex-8-4", Image: "debian-12", Zone: "rma1",
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(created.Status).To(Equal("changing"))
	g.Expect(created.Flavor.VCPUCount).To(Equal(4))
	g.Expect(created.Zone.Slug).To(Equal("rma1"))
	g.Expect(created.Tags).To(Equal(tags))
	s.AddServer(cloudscaletest.ServerSpec{Name: "other", Tags: map[string]string{"claimscale.io/cluster": "staging"}})

	got, err := c.Servers.List(ctx, cloudscale.WithTagFilter(cloudscale.TagMap{"claimscale.io/cluster": "prod"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1), "tag filters apply on the server side")
	g.Expect(got[0].UUID).To(Equal(created.UUID))

	g.Expect(s.MarkRunning(created.UUID)).To(BeTrue())
	server, err := c.Servers.Get(ctx, created.UUID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(server.Status).To(Equal(cloudscale.ServerRunning))

	g.Expect(c.Servers.Delete(ctx, created.UUID)).To(Succeed())
	g.Expect(statusOf(c.Servers.Delete(ctx, created.UUID))).To(Equal(http.StatusNotFound))
	_, err = c.Servers.Get(ctx, created.UUID)
	g.Expect(statusOf(err)).To(Equal(http.StatusNotFound))

	_, err = c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "x", Flavor: "flex-4-2", Image: "debian-12", Zone: "nowhere1"})
	g.Expect(err).To(HaveOccurred(), "a flavor not offered in the zone is refused")
}

func TestHooksSeeCreatedAndDeletedServers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	created := make(chan cloudscale.Server, 1)
	deleted := make(chan cloudscale.Server, 1)
	s := cloudscaletest.NewServer(
		cloudscaletest.WithServersRunning(),
		cloudscaletest.WithOnCreate(func(srv cloudscale.Server) { created <- srv }),
		cloudscaletest.WithOnDelete(func(srv cloudscale.Server) { deleted <- srv }),
	)
	defer s.Close()
	c := client(t, s, "any")

	srv, err := c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "c1", Flavor: "flex-4-2", Image: "debian-12"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.Status).To(Equal(cloudscale.ServerRunning))
	g.Eventually(created).Should(Receive(HaveField("UUID", srv.UUID)))
	g.Expect(c.Servers.Delete(ctx, srv.UUID)).To(Succeed())
	g.Eventually(deleted).Should(Receive(HaveField("Name", "c1")))
}

func TestFaultsAnswerTheirCountThenStop(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := cloudscaletest.NewServer()
	defer s.Close()
	c := client(t, s, "any")

	s.InjectFault(cloudscaletest.Fault{Method: http.MethodGet, Path: "/v1/servers", Status: 429, RetryAfter: "3", Detail: "Request was throttled.", Times: 2})
	for range 2 {
		_, err := c.Servers.List(ctx)
		g.Expect(statusOf(err)).To(Equal(http.StatusTooManyRequests))
	}
	_, err := c.Servers.List(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	s.InjectFault(cloudscaletest.Fault{Path: "/v1/servers/*", Status: 500, Detail: cloudscaletest.DetailServerError})
	_, err = c.Servers.List(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "a fault for one server's path leaves the list alone")
	_, err = c.Servers.Get(ctx, "6a7e7b3e-61e5-4a6e-9b5d-8d6d0e0f2a11")
	g.Expect(statusOf(err)).To(Equal(http.StatusInternalServerError))
	g.Expect(s.CountRequests(http.MethodGet, "/v1/servers")).To(Equal(4))
	g.Expect(s.CountRequests(http.MethodGet, "/v1/servers/*")).To(Equal(1))
}

func TestHeldRequestsWaitForRelease(t *testing.T) {
	g := NewWithT(t)
	s := cloudscaletest.NewServer()
	defer s.Close()
	c := client(t, s, "any")

	hold := s.HoldRequests(http.MethodGet, "/v1/flavors")
	done := make(chan error, 1)
	go func() {
		req, _ := c.NewRequest(context.Background(), http.MethodGet, "v1/flavors", nil)
		done <- c.Do(context.Background(), req, &[]map[string]any{})
	}()
	g.Eventually(func() int { return s.InFlight(http.MethodGet) }).Should(Equal(1))
	g.Consistently(done, "50ms").ShouldNot(Receive())
	hold.Release()
	g.Eventually(done).Should(Receive(BeNil()))
}

// What the SDK makes of the fake's error bodies is what it makes of the
// API's: a {"detail"} answer is an ErrorResponse, a validation error (lists
// of messages per field) fails the SDK's decoding, so a client must read
// the body itself.
func TestErrorBodiesHaveTheAPIsShapes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := cloudscaletest.NewServer()
	defer s.Close()
	c := client(t, s, "")

	long := cloudscale.TagMap{"team": strings.Repeat("x", 256)}
	_, err := c.Servers.Create(ctx, &cloudscale.ServerRequest{
		TaggedResourceRequest: cloudscale.TaggedResourceRequest{Tags: &long},
		Name:                  "c1", Flavor: "flex-8-4", Image: "debian-12",
	})
	var typeErr *json.UnmarshalTypeError
	g.Expect(errors.As(err, &typeErr)).To(BeTrue(), "a field error is not a map of strings: %v", err)

	resp, err := http.Post(s.URL+"/v1/servers", "application/json", strings.NewReader(`{"name":"c1","flavor":"flex-8-4","image":"debian-12","tags":{"team":"`+strings.Repeat("x", 256)+`"}}`))
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(string(body)).To(MatchJSON(`{"tags":["Ensure this field has no more than 255 characters."]}`))

	_, err = c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "c1", Flavor: "flex-8-4", Image: "debian-12", Zone: "gva1"})
	g.Expect(errors.As(err, &typeErr)).To(BeTrue(), "an unknown zone is a field error: %v", err)

	s.InjectFault(cloudscaletest.Fault{Status: http.StatusServiceUnavailable, Detail: cloudscaletest.DetailMaintenance})
	_, err = c.Servers.List(ctx)
	var apiErr *cloudscale.ErrorResponse
	g.Expect(errors.As(err, &apiErr)).To(BeTrue())
	g.Expect(apiErr.StatusCode).To(Equal(http.StatusServiceUnavailable))
	g.Expect(apiErr.Message).To(HaveKeyWithValue("detail", cloudscaletest.DetailMaintenance))
}

// OutOfCapacity answers creates in its zone only, for good.
func TestOutOfCapacityIsPerZone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := cloudscaletest.NewServer()
	defer s.Close()
	c := client(t, s, "")
	s.InjectFault(cloudscaletest.OutOfCapacity("lpg1", ""))

	for range 2 {
		_, err := c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "a", Flavor: "flex-8-4", Image: "debian-12", Zone: "lpg1"})
		g.Expect(statusOf(err)).To(Equal(http.StatusBadRequest))
	}
	_, err := c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "b", Flavor: "flex-8-4", Image: "debian-12", Zone: "rma1"})
	g.Expect(err).NotTo(HaveOccurred(), "the other zone has room")
	_, err = c.Servers.List(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "only creates are refused")
	s.ClearFaults()
	_, err = c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "a", Flavor: "flex-8-4", Image: "debian-12", Zone: "lpg1"})
	g.Expect(err).NotTo(HaveOccurred())
}

// Server groups are zonal, list their servers, and lose them on delete.
func TestServerGroups(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := cloudscaletest.NewServer(cloudscaletest.WithServerGroupLimit(1), cloudscaletest.WithDeleteRefusedWhileCreating())
	defer s.Close()
	c := client(t, s, "")

	group, err := c.ServerGroups.Create(ctx, &cloudscale.ServerGroupRequest{
		ZonalResourceRequest: cloudscale.ZonalResourceRequest{Zone: "rma1"}, Name: "g", Type: "anti-affinity",
	})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "a", Flavor: "flex-8-4", Image: "debian-12", Zone: "lpg1", ServerGroups: []string{group.UUID}})
	g.Expect(err).To(HaveOccurred(), "a group of another zone is refused")
	srv, err := c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "a", Flavor: "flex-8-4", Image: "debian-12", Zone: "rma1", ServerGroups: []string{group.UUID}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(srv.ServerGroups).To(ConsistOf(HaveField("UUID", group.UUID)))
	_, err = c.Servers.Create(ctx, &cloudscale.ServerRequest{Name: "b", Flavor: "flex-8-4", Image: "debian-12", Zone: "rma1", ServerGroups: []string{group.UUID}})
	g.Expect(err).To(HaveOccurred(), "the group is full")

	got, err := c.ServerGroups.Get(ctx, group.UUID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Servers).To(ConsistOf(HaveField("UUID", srv.UUID)))

	g.Expect(statusOf(c.Servers.Delete(ctx, srv.UUID))).To(Equal(http.StatusBadRequest), "still being created")
	s.MarkRunning(srv.UUID)
	g.Expect(c.Servers.Delete(ctx, srv.UUID)).To(Succeed())
	got, err = c.ServerGroups.Get(ctx, group.UUID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Servers).To(BeEmpty())
	g.Expect(c.ServerGroups.Delete(ctx, group.UUID)).To(Succeed())
}
