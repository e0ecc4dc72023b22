package cloudscale_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	cs "github.com/claimscale/claimscale/pkg/provider/cloudscale"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale/cloudscaletest"
)

// The error table of docs/cloudscale.md, one row per case, each against
// the fake API answering as the real one does. Every request is tried once
// (MaxTries 1) so the classification itself is what is seen.
func TestErrorTable(t *testing.T) {
	create := func(e *env) error {
		_, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
		return err
	}
	createdThenDeleted := func(e *env) error {
		inst, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
		if err != nil {
			return err
		}
		return e.p.Delete(e.ctx, inst.ProviderID)
	}
	isNotFound := provider.IsNotFound
	tests := []struct {
		name      string
		opts      []envOption
		fault     *cloudscaletest.Fault
		op        func(e *env) error
		want      func(error) bool
		wantText  []string
		wantAfter time.Duration
		wantField string
	}{
		{
			name: "no answer at all is retryable",
			op: func(e *env) error {
				e.api.Close()
				return create(e)
			},
			want: provider.IsRetryable, wantText: []string{"calling the cloudscale API"},
		},
		{
			name: "400 with field errors is a terminal configuration error naming the field",
			opts: []envOption{withSettings(func(s *v1alpha1.CloudscaleSettings) { s.Tags = map[string]string{"team": strings.Repeat("x", 300)} })},
			op:   create, want: provider.IsTerminal, wantField: "tags",
			wantText: []string{"refused the request's field tags", "tags: " + cloudscaletest.FieldTooLong},
		},
		{
			name:  "400 quota exceeded backs off (built-in quota row)",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 400, Detail: cloudscaletest.DetailQuotaExceeded},
			op:    create, want: provider.IsInsufficientCapacity, wantText: []string{cloudscaletest.DetailQuotaExceeded},
		},
		{
			name:  "400 out of capacity in the zone backs off (built-in capacity row)",
			fault: ptrTo(cloudscaletest.OutOfCapacity("lpg1", "flex-4-2")),
			op:    create, want: provider.IsInsufficientCapacity, wantText: []string{"Insufficient capacity for flavor flex-4-2 in zone lpg1"},
		},
		{
			name:  "400 nothing recognises is terminal and shown verbatim, not guessed",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 400, Detail: "No hosts left for flex-4-2, sorry."},
			op:    create, want: provider.IsTerminal, wantText: []string{"cloudscale API answered 400 Bad Request: No hosts left for flex-4-2, sorry."},
		},
		{
			name: "an operator's pattern makes an unrecognised answer a capacity one",
			opts: []envOption{withSettings(func(s *v1alpha1.CloudscaleSettings) {
				s.ErrorPatterns = []v1alpha1.CloudscaleErrorPattern{{Pattern: `no hosts? left`, Status: 400, Kind: v1alpha1.CloudscaleErrorInsufficientCapacity}}
			})},
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 400, Detail: "No hosts left for flex-4-2, sorry."},
			op:    create, want: provider.IsInsufficientCapacity, wantText: []string{"No hosts left"},
		},
		{
			name: "an operator's pattern wins over the built-in rows",
			opts: []envOption{withSettings(func(s *v1alpha1.CloudscaleSettings) {
				s.ErrorPatterns = []v1alpha1.CloudscaleErrorPattern{{Pattern: `quota`, Kind: v1alpha1.CloudscaleErrorTerminal}}
			})},
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 400, Detail: cloudscaletest.DetailQuotaExceeded},
			op:    create, want: provider.IsTerminal, wantText: []string{"classified terminal by spec.cloudscale.errorPatterns[0]"},
		},
		{
			name: "400 on deleting a server still being created is retryable",
			opts: []envOption{withAPIOptions(cloudscaletest.WithDeleteRefusedWhileCreating())},
			op:   createdThenDeleted, want: provider.IsRetryable,
			wantText: []string{cloudscaletest.DetailDeleteWhileCreating, "may still be being created"},
		},
		{
			name: "401 is terminal",
			opts: []envOption{withAPIOptions(cloudscaletest.WithToken("another-token"))},
			op:   create, want: provider.IsTerminal, wantText: []string{"token was rejected (401)", cloudscaletest.DetailInvalidToken},
		},
		{
			name:  "403 is terminal",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 403, Detail: cloudscaletest.DetailPermissionDenied},
			op:    create, want: provider.IsTerminal, wantText: []string{"read/write token", cloudscaletest.DetailPermissionDenied},
		},
		{
			name: "404 is not found",
			op: func(e *env) error {
				_, err := e.p.Get(e.ctx, cs.ProviderID("0b6f3a9e-1111-4000-8000-000000000000"))
				return err
			},
			want: isNotFound, wantText: []string{cloudscaletest.DetailNotFound},
		},
		{
			name:  "409 is retryable",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 409, Detail: "Conflict."},
			op:    create, want: provider.IsRetryable, wantText: []string{"409"},
		},
		{
			name:  "429 is retryable with Retry-After",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 429, Detail: cloudscaletest.DetailThrottled, RetryAfter: "7"},
			op:    create, want: provider.IsRetryable, wantAfter: 7 * time.Second, wantText: []string{cloudscaletest.DetailThrottled},
		},
		{
			name:  "500 is retryable",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 500, Detail: cloudscaletest.DetailServerError},
			op:    create, want: provider.IsRetryable, wantText: []string{cloudscaletest.DetailServerError},
		},
		{
			name:  "503 maintenance is retryable with Retry-After",
			fault: &cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 503, Detail: cloudscaletest.DetailMaintenance, RetryAfter: "120"},
			op:    create, want: provider.IsRetryable, wantAfter: 2 * time.Minute, wantText: []string{cloudscaletest.DetailMaintenance},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			opts := append([]envOption{withConfig(func(c *cs.Config) { c.MaxTries = 1 })}, tt.opts...)
			e := newEnv(t, opts...)
			if tt.fault != nil {
				e.api.InjectFault(*tt.fault)
			}
			err := tt.op(e)
			g.Expect(err).To(HaveOccurred())
			g.Expect(tt.want(err)).To(BeTrue(), "wrong kind: %v", err)
			for _, text := range tt.wantText {
				g.Expect(err.Error()).To(ContainSubstring(text))
			}
			g.Expect(provider.RetryAfter(err)).To(Equal(tt.wantAfter))
			if tt.wantField != "" {
				var config *cs.ConfigError
				g.Expect(errors.As(err, &config)).To(BeTrue(), "%v is not a ConfigError", err)
				g.Expect(config.API.Fields).To(Equal([]string{tt.wantField}))
			}
			g.Expect(err.Error()).NotTo(ContainSubstring(testToken))
		})
	}
}

// Regression: a field error whose words once read as "no more" capacity
// deleted the claim and backed the pool off instead of naming the field.
func TestFieldErrorIsNotCapacity(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withConfig(func(c *cs.Config) { c.MaxTries = 1 }))
	e.api.InjectFault(cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 400,
		Body: `{"tags":["Ensure this field has no more than 255 characters."]}`})
	_, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(provider.IsInsufficientCapacity(err)).To(BeFalse(), "a field error is not a capacity error: %v", err)
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("field tags"))
	g.Expect(err.Error()).To(ContainSubstring("Ensure this field has no more than 255 characters."))
}

// Regression: a maintenance window's 503 once read as "currently not
// available" capacity and silenced scale-up for up to half an hour.
func TestMaintenanceIsNotCapacity(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t, withConfig(func(c *cs.Config) { c.MaxTries = 1 }))
	e.api.InjectFault(cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 503,
		Detail: "The API is currently not available due to maintenance."})
	_, err := e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{})
	g.Expect(provider.IsInsufficientCapacity(err)).To(BeFalse(), "maintenance is not a capacity error: %v", err)
	g.Expect(provider.IsRetryable(err)).To(BeTrue(), "got %v", err)
}

// A maintenance window passes: the same create succeeds once the API is
// back, within one Create call's retries.
func TestMaintenanceIsWaitedOut(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)
	e.api.InjectFault(cloudscaletest.Fault{Method: http.MethodPost, Path: "/v1/servers", Status: 503,
		Detail: cloudscaletest.DetailMaintenance, RetryAfter: "5", Times: 2})
	var err error
	e.stepping(t, time.Second, func() { _, err = e.p.Create(e.ctx, claim("c1", "workers", "flex-4-2"), provider.CreateOptions{}) })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.api.Servers()).To(HaveLen(1))
}

func TestBadErrorPatternIsRefused(t *testing.T) {
	g := NewWithT(t)
	s := baseSettings()
	s.ErrorPatterns = []v1alpha1.CloudscaleErrorPattern{{Pattern: `(unclosed`, Kind: v1alpha1.CloudscaleErrorInsufficientCapacity}}
	_, err := cs.New(t.Context(), nodeProvider(s), provider.Options{ClusterName: testCluster,
		Credentials: map[string][]byte{cs.CredentialToken: []byte(testToken)}, Secrets: secretStore{}})
	g.Expect(provider.IsTerminal(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.cloudscale.errorPatterns[0].pattern"))
}

func ptrTo[T any](v T) *T { return &v }
