package cloudscale

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/claimscale/claimscale/pkg/provider"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const token = "tok-abcdef0123456789"
	p := &Provider{clock: testingclock.NewFakeClock(now), token: &secret{value: token}, secretName: "Secret ns/creds"}

	kinds := map[string]func(error) bool{
		"retryable": provider.IsRetryable,
		"terminal":  provider.IsTerminal,
		"capacity":  provider.IsInsufficientCapacity,
		"notfound":  provider.IsNotFound,
	}
	tests := []struct {
		name       string
		ex         exchange
		err        error
		wantKind   string
		wantAfter  time.Duration
		wantText   string
		wantStatus int
	}{
		{
			name:     "no answer at all is retryable",
			err:      errors.New(`Get "https://api.cloudscale.ch/v1/servers": dial tcp: connection refused`),
			wantKind: "retryable",
			wantText: "connection refused",
		},
		{
			name:       "401 names the token's Secret",
			ex:         exchange{status: 401, body: []byte(`{"detail": "Invalid token."}`)},
			wantKind:   "terminal",
			wantText:   "cloudscale API token was rejected (401): check the token in Secret ns/creds",
			wantStatus: 401,
		},
		{
			name:       "403 asks for a read/write token",
			ex:         exchange{status: 403, body: []byte(`{"detail": "You do not have permission to perform this action."}`)},
			wantKind:   "terminal",
			wantText:   "must be a read/write token",
			wantStatus: 403,
		},
		{
			name:       "403 is a permission problem even when it speaks of a quota",
			ex:         exchange{status: 403, body: []byte(`{"detail": "Server quota exceeded."}`)},
			wantKind:   "terminal",
			wantText:   "must be a read/write token",
			wantStatus: 403,
		},
		{
			name:       "nested field errors name the field by its path",
			ex:         exchange{status: 400, body: []byte(`{"interfaces": [{"network": ["Object with uuid=x does not exist."]}]}`)},
			wantKind:   "terminal",
			wantText:   "field interfaces[0].network",
			wantStatus: 400,
		},
		{
			name:       "non_field_errors are a validation error of the whole request",
			ex:         exchange{status: 400, body: []byte(`{"non_field_errors": ["Only one of use_public_network and interfaces may be set."]}`)},
			wantKind:   "terminal",
			wantText:   "Only one of use_public_network and interfaces may be set.",
			wantStatus: 400,
		},
		{
			name:       "a 400 on deleting a server is retryable",
			ex:         exchange{method: "DELETE", path: "/v1/servers/0b6f3a9e-0000-4000-8000-000000000000", status: 400, body: []byte(`{"detail": "busy"}`)},
			wantKind:   "retryable",
			wantText:   "busy",
			wantStatus: 400,
		},
		{
			name:       "404 is not found",
			ex:         exchange{status: 404, body: []byte(`{"detail": "Not found."}`)},
			wantKind:   "notfound",
			wantStatus: 404,
		},
		{
			name:       "429 carries Retry-After in seconds",
			ex:         exchange{status: 429, retryAfter: "17", body: []byte(`{"detail": "Request was throttled."}`)},
			wantKind:   "retryable",
			wantAfter:  17 * time.Second,
			wantStatus: 429,
		},
		{
			name:       "503 carries Retry-After as a date",
			ex:         exchange{status: 503, retryAfter: now.Add(90 * time.Second).Format(http.TimeFormat)},
			wantKind:   "retryable",
			wantAfter:  90 * time.Second,
			wantStatus: 503,
		},
		{
			name:       "502 with an HTML body from a proxy is retryable",
			ex:         exchange{status: 502, body: []byte("<html><body>Bad Gateway</body></html>")},
			wantKind:   "retryable",
			wantText:   "Bad Gateway",
			wantStatus: 502,
		},
		{
			name:       "400 quota is capacity",
			ex:         exchange{status: 400, body: []byte(`{"detail": "Quota exceeded: 64 vCPUs allowed."}`)},
			wantKind:   "capacity",
			wantStatus: 400,
		},
		{
			name:       "a validation error names the field",
			ex:         exchange{status: 400, body: []byte(`{"image": ["Image \"nope\" does not exist."], "zone": ["Invalid zone."]}`)},
			wantKind:   "terminal",
			wantText:   `refused the request's fields image, zone (check the NodeProvider's and the pool's settings): cloudscale API answered 400 Bad Request: image: Image "nope" does not exist.; zone: Invalid zone.`,
			wantStatus: 400,
		},
		{
			name:       "409 is retryable",
			ex:         exchange{status: 409, body: []byte(`{"detail": "Server is changing."}`)},
			wantKind:   "retryable",
			wantStatus: 409,
		},
		{
			name:       "an echoed token is scrubbed",
			ex:         exchange{status: 500, body: []byte(`{"detail": "boom for Bearer ` + token + `"}`)},
			wantKind:   "retryable",
			wantText:   "boom for Bearer [redacted]",
			wantStatus: 500,
		},
		{
			name:     "an undecodable 200 is retryable",
			ex:       exchange{status: 200},
			err:      errors.New("unexpected EOF"),
			wantKind: "retryable",
			wantText: "unexpected EOF",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cause := tt.err
			if cause == nil {
				cause = errors.New("sdk error")
			}
			got := p.classify(&tt.ex, cause)
			for kind, is := range kinds {
				if is(got) != (kind == tt.wantKind) {
					t.Errorf("%s = %v for %v, want kind %s", kind, is(got), got, tt.wantKind)
				}
			}
			if after := provider.RetryAfter(got); after != tt.wantAfter {
				t.Errorf("RetryAfter = %v, want %v", after, tt.wantAfter)
			}
			if !strings.Contains(got.Error(), tt.wantText) {
				t.Errorf("error %q does not contain %q", got, tt.wantText)
			}
			if strings.Contains(got.Error(), token) {
				t.Errorf("error %q contains the token", got)
			}
			var apiErr *APIError
			if tt.wantStatus != 0 && (!errors.As(got, &apiErr) || apiErr.StatusCode != tt.wantStatus) {
				t.Errorf("error %v does not wrap an APIError with status %d", got, tt.wantStatus)
			}
		})
	}
}

func TestRegionOf(t *testing.T) {
	for zone, want := range map[string]string{"lpg1": "lpg", "rma1": "rma", "rma12": "rma", "custom": "", "": ""} {
		if got := regionOf(zone); got != want {
			t.Errorf("regionOf(%q) = %q, want %q", zone, got, want)
		}
	}
}
