package cloudscale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/claimscale/claimscale/pkg/provider"
)

// exchange is what the transport saw of one API response. The SDK's own
// error keeps neither the Retry-After header nor a body it cannot read as a
// map of strings (validation errors are lists; a proxy's 502 is HTML), so
// the transport keeps them here for classify.
type exchange struct {
	status     int
	retryAfter string
	body       []byte
}

type exchangeKey struct{}

func withExchange(ctx context.Context, ex *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, ex)
}

// recordingTransport records status, Retry-After and error bodies into the
// request context's exchange.
type recordingTransport struct{ base http.RoundTripper }

// maxErrorBody bounds what is kept of an error body.
const maxErrorBody = 64 << 10

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	ex, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if err != nil || ex == nil {
		return resp, err
	}
	ex.status = resp.StatusCode
	ex.retryAfter = resp.Header.Get("Retry-After")
	if resp.StatusCode >= 300 {
		body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
		if readErr != nil {
			return nil, fmt.Errorf("reading %d response: %w", resp.StatusCode, readErr)
		}
		ex.body = body
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	return resp, nil
}

// APIError is an error answer of the cloudscale API: its status code and
// the message of its body. It is wrapped in one of the provider package's
// typed errors, which say what to do about it.
type APIError struct {
	StatusCode int
	Detail     string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("cloudscale API answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// capacityWords mark an error answer as a quota or capacity problem. The
// API answers an exhausted project quota or a zone without room for a
// flavor with a 4xx (or 503) whose detail says so in words; there is no
// machine-readable code, so the words are what we have. Checked in lower
// case.
var capacityWords = []string{
	"quota", "exceeded", "insufficient", "not enough", "capacity",
	"no more", "currently not available",
}

func looksLikeCapacity(detail string) bool {
	d := strings.ToLower(detail)
	for _, w := range capacityWords {
		if strings.Contains(d, w) {
			return true
		}
	}
	return false
}

// classify turns the outcome of one API request into the provider's typed
// errors: what the caller should do (retry, back off, give up) decides the
// type, the API's own words go into the message with the token removed.
func (p *Provider) classify(ex *exchange, err error) error {
	if ex.status == 0 {
		// No answer at all: connection refused, timeout, TLS. Worth another
		// try.
		return provider.NewRetryable(fmt.Errorf("calling the cloudscale API: %s", p.token.redact(err.Error())), 0)
	}
	if ex.status < 300 {
		return provider.NewRetryable(fmt.Errorf("reading the cloudscale API's %d answer: %s", ex.status, p.token.redact(err.Error())), 0)
	}
	apiErr := &APIError{StatusCode: ex.status, Detail: p.token.redact(errorDetail(ex.body))}
	after := parseRetryAfter(ex.retryAfter, p.clock.Now())
	capacity := looksLikeCapacity(apiErr.Detail)
	switch {
	case ex.status == http.StatusUnauthorized:
		return provider.NewTerminal(fmt.Errorf("cloudscale API token was rejected (401): check the token in %s (key %q): %w",
			p.secretName, CredentialToken, apiErr))
	case ex.status == http.StatusNotFound:
		return provider.NewNotFound("%w", apiErr)
	case ex.status == http.StatusTooManyRequests:
		return provider.NewRetryable(apiErr, after)
	case capacity && (ex.status < 500 || ex.status == http.StatusServiceUnavailable):
		return provider.NewInsufficientCapacity(apiErr)
	case ex.status == http.StatusForbidden:
		return provider.NewTerminal(fmt.Errorf("cloudscale API token may not do this (403): the token in %s must be a read/write token: %w",
			p.secretName, apiErr))
	case ex.status >= 500, ex.status == http.StatusConflict, ex.status == http.StatusRequestTimeout:
		return provider.NewRetryable(apiErr, after)
	default:
		// Any other 4xx is a request the API will refuse again: a bad image,
		// network or flavor in the settings.
		return provider.NewTerminal(apiErr)
	}
}

// errorDetail reads the message of an error body: {"detail": "..."} for
// most errors, {"field": ["problem", ...]} for validation errors, or
// whatever text a proxy in between sent.
func errorDetail(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		return truncate(string(body), 300)
	}
	if d, ok := fields["detail"].(string); ok {
		return d
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		switch v := fields[k].(type) {
		case string:
			parts = append(parts, k+": "+v)
		case []any:
			var msgs []string
			for _, m := range v {
				msgs = append(msgs, fmt.Sprint(m))
			}
			parts = append(parts, k+": "+strings.Join(msgs, " "))
		default:
			b, _ := json.Marshal(v)
			parts = append(parts, k+": "+string(b))
		}
	}
	return truncate(strings.Join(parts, "; "), 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// ErrForeignServer is wrapped by Delete's refusal to touch a server that
// does not carry this cluster's tag.
var ErrForeignServer = errors.New("server does not carry this cluster's tag")
