package cloudscale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// exchange is what the transport saw of one API request and its answer.
// The SDK's own error (ErrorResponse, v6) keeps the status code and the
// body only when the body is a JSON object of strings: a validation error
// ({"tags": ["Ensure this field has no more than 255 characters."]}) fails
// its decoding and reaches us as a bare json.UnmarshalTypeError, and the
// Retry-After header is dropped. So the transport keeps them here for
// classify.
type exchange struct {
	method     string
	path       string
	status     int
	retryAfter string
	body       []byte
}

type exchangeKey struct{}

func withExchange(ctx context.Context, ex *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, ex)
}

// recordingTransport records method, path, status, Retry-After and error
// bodies into the request context's exchange.
type recordingTransport struct{ base http.RoundTripper }

// maxErrorBody bounds what is kept of an error body.
const maxErrorBody = 64 << 10

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if ex != nil {
		ex.method, ex.path = req.Method, req.URL.Path
	}
	resp, err := t.base.RoundTrip(req)
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
// its message, verbatim (with the token scrubbed). It is wrapped in one of
// the provider package's typed errors, which say what to do about it.
type APIError struct {
	StatusCode int
	// Detail is the answer's message: its "detail", or each field's
	// messages as "field: message" joined by "; ".
	Detail string
	// Fields the API found fault with, for a validation error (400 with a
	// body of field names): e.g. ["tags"], or ["interfaces[0].network"].
	Fields []string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("cloudscale API answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// errorBody is an error answer's body as the API (Django REST framework)
// writes it: {"detail": "..."} for most errors, {"field": ["problem", ...]}
// (nested for lists and objects, "non_field_errors" for the request as a
// whole) for validation errors, or text from something in between.
type errorBody struct {
	detail string
	// fields are field errors, sorted by field path.
	fields []fieldError
	// text is a body that is not JSON (a proxy's HTML), truncated.
	text string
}

type fieldError struct {
	field    string // "" for non_field_errors
	messages []string
}

func parseErrorBody(body []byte) errorBody {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return errorBody{}
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return errorBody{text: truncate(string(body), 300)}
	}
	if d, ok := obj["detail"].(string); ok && len(obj) == 1 {
		return errorBody{detail: d}
	}
	var eb errorBody
	collectFieldErrors("", obj, &eb.fields)
	sort.SliceStable(eb.fields, func(i, j int) bool { return eb.fields[i].field < eb.fields[j].field })
	return eb
}

// collectFieldErrors flattens a validation error body into field paths:
// {"interfaces": [{"network": ["..."]}]} is interfaces[0].network.
func collectFieldErrors(path string, v any, out *[]fieldError) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			p := k
			switch {
			case k == "non_field_errors" || k == "detail":
				p = path
			case path != "":
				p = path + "." + k
			}
			collectFieldErrors(p, child, out)
		}
	case []any:
		var messages []string
		for i, item := range v {
			if s, ok := item.(string); ok {
				messages = append(messages, s)
				continue
			}
			collectFieldErrors(fmt.Sprintf("%s[%d]", path, i), item, out)
		}
		if len(messages) > 0 {
			*out = append(*out, fieldError{field: path, messages: messages})
		}
	case string:
		*out = append(*out, fieldError{field: path, messages: []string{v}})
	case nil:
	default:
		b, _ := json.Marshal(v)
		*out = append(*out, fieldError{field: path, messages: []string{string(b)}})
	}
}

// lines are what error patterns are matched against: the detail, or one
// "field: message" per field message, or the text.
func (b errorBody) lines() []string {
	switch {
	case b.detail != "":
		return []string{b.detail}
	case b.text != "":
		return []string{b.text}
	}
	var lines []string
	for _, f := range b.fields {
		for _, m := range f.messages {
			if f.field == "" {
				lines = append(lines, m)
			} else {
				lines = append(lines, f.field+": "+m)
			}
		}
	}
	return lines
}

// fieldNames are the fields a validation error names ("" for the request
// as a whole left out).
func (b errorBody) fieldNames() []string {
	var names []string
	for _, f := range b.fields {
		if f.field != "" && !slices.Contains(names, f.field) {
			names = append(names, f.field)
		}
	}
	return names
}

// errorPattern is one row of the table that classifies error answers by
// their message, for what the status code alone does not say.
type errorPattern struct {
	// status the row applies to; 0 for any.
	status int
	re     *regexp.Regexp
	kind   v1alpha1.CloudscaleErrorKind
	// source names the row in messages: "built-in" or the settings' index.
	source string
}

// builtinErrorPatterns say which answers mean "out of capacity or quota
// for this flavor in this zone", the only answers that back a pool's
// flavor off in a zone. The API's wording for these is not published (not
// in the API documentation, the SDKs, the Terraform provider, the CLI or
// the cluster-api provider), so the rows are an assumption: a 400 whose
// message speaks of a quota being exceeded or reached, or of capacity or
// resources running out. They are narrow on purpose: "no more than 255
// characters" (a field error) and "currently not available due to
// maintenance" (a 503) must not match, and do not. Operators who see a
// capacity answer worded otherwise add a row under
// spec.cloudscale.errorPatterns; answers no row matches are classified by
// status code and shown verbatim.
var builtinErrorPatterns = []errorPattern{
	{status: http.StatusBadRequest, kind: v1alpha1.CloudscaleErrorInsufficientCapacity, source: "built-in quota row",
		re: regexp.MustCompile(`(?i)\bquota\b.*\b(exceed|exceeded|exceeds|reached|exhausted)\b|\b(exceed|exceeded|exceeds|reached|exhausted)\b.*\bquota\b`)},
	{status: http.StatusBadRequest, kind: v1alpha1.CloudscaleErrorInsufficientCapacity, source: "built-in capacity row",
		re: regexp.MustCompile(`(?i)\b(out of|insufficient|not enough|no (more )?free)\s+(capacity|resources)\b`)},
}

func parseErrorPatterns(in []v1alpha1.CloudscaleErrorPattern) ([]errorPattern, error) {
	var out []errorPattern
	for i, p := range in {
		re, err := regexp.Compile("(?i)" + p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("spec.cloudscale.errorPatterns[%d].pattern: %w", i, err)
		}
		switch p.Kind {
		case v1alpha1.CloudscaleErrorInsufficientCapacity, v1alpha1.CloudscaleErrorRetryable, v1alpha1.CloudscaleErrorTerminal:
		default:
			return nil, fmt.Errorf("spec.cloudscale.errorPatterns[%d].kind %q: want InsufficientCapacity, Retryable or Terminal", i, p.Kind)
		}
		out = append(out, errorPattern{status: int(p.Status), re: re, kind: p.Kind, source: fmt.Sprintf("spec.cloudscale.errorPatterns[%d]", i)})
	}
	return out, nil
}

func (p *Provider) matchPattern(status int, lines []string) *errorPattern {
	for _, rows := range [][]errorPattern{p.settings.errorPatterns, builtinErrorPatterns} {
		for i := range rows {
			row := &rows[i]
			if row.status != 0 && row.status != status {
				continue
			}
			if slices.ContainsFunc(lines, row.re.MatchString) {
				return row
			}
		}
	}
	return nil
}

// serverPath matches the path of one server, /v1/servers/<uuid>.
var serverPath = regexp.MustCompile(`/v1/servers/[^/]+/?$`)

// classify turns the outcome of one API request into the provider's typed
// errors, by status code and body shape first and by the pattern table only
// where those do not decide (see docs/cloudscale.md, "Errors"). The API's
// own words go into the message verbatim, with the token removed.
func (p *Provider) classify(ex *exchange, err error) error {
	if ex.status == 0 {
		// No answer at all: connection refused, timeout, TLS. Worth another
		// try.
		message := "calling the cloudscale API: " + p.token.redact(err.Error())
		var netErr net.Error
		if errors.As(err, &netErr) {
			// Kept a net.Error, so claimscale reports the NodeProvider
			// Unreachable and stops calling it until it answers again.
			return provider.NewRetryable(&noAnswerError{message: message, timeout: netErr.Timeout()}, 0)
		}
		return provider.NewRetryable(errors.New(message), 0)
	}
	if ex.status < 300 {
		return provider.NewRetryable(fmt.Errorf("reading the cloudscale API's %d answer: %s", ex.status, p.token.redact(err.Error())), 0)
	}
	body := parseErrorBody(ex.body)
	lines := body.lines()
	apiErr := &APIError{StatusCode: ex.status, Detail: p.token.redact(strings.Join(lines, "; ")), Fields: body.fieldNames()}
	after := parseRetryAfter(ex.retryAfter, p.clock.Now())

	if row := p.matchPattern(ex.status, lines); row != nil {
		switch row.kind {
		case v1alpha1.CloudscaleErrorInsufficientCapacity:
			return provider.NewInsufficientCapacity(apiErr)
		case v1alpha1.CloudscaleErrorRetryable:
			return provider.NewRetryable(apiErr, after)
		default:
			return provider.NewTerminal(fmt.Errorf("%w (classified terminal by %s)", apiErr, row.source))
		}
	}
	switch {
	case ex.status == http.StatusUnauthorized:
		return provider.NewTerminal(fmt.Errorf("cloudscale API token was rejected (401): check the token in %s (key %q): %w",
			p.secretName, CredentialToken, apiErr))
	case ex.status == http.StatusForbidden:
		return provider.NewTerminal(fmt.Errorf("cloudscale API token may not do this (403): the token in %s must be a read/write token: %w",
			p.secretName, apiErr))
	case ex.status == http.StatusNotFound:
		return provider.NewNotFound("%w", apiErr)
	case ex.status == http.StatusTooManyRequests, ex.status >= 500:
		// Rate limits, and the API being down or in maintenance (503),
		// pass: never a reason to back a pool off.
		return provider.NewRetryable(apiErr, after)
	case ex.status == http.StatusConflict, ex.status == http.StatusRequestTimeout:
		return provider.NewRetryable(apiErr, after)
	case ex.status == http.StatusBadRequest && ex.method == http.MethodDelete && serverPath.MatchString(ex.path):
		// A server still being created cannot be deleted yet; it can be
		// once it has booted.
		return provider.NewRetryable(fmt.Errorf("%w (the server may still be being created)", apiErr), after)
	case ex.status == http.StatusBadRequest && len(apiErr.Fields) > 0:
		return provider.NewTerminal(&ConfigError{API: apiErr})
	default:
		// Any other 4xx is a request the API will refuse again; nothing in
		// it says why in a way we know, so it is shown as it came.
		return provider.NewTerminal(apiErr)
	}
}

// ConfigError is a validation error of the API: a request field it refused,
// which comes from the NodeProvider's or the pool's settings (an image,
// network, flavor, tag or SSH key). Find it with errors.As.
type ConfigError struct{ API *APIError }

func (e *ConfigError) Error() string {
	return fmt.Sprintf("cloudscale API refused the request's %s (check the NodeProvider's and the pool's settings): %s",
		plural(len(e.API.Fields), "field", "fields")+" "+strings.Join(e.API.Fields, ", "), e.API.Error())
}

func (e *ConfigError) Unwrap() error { return e.API }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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

// noAnswerError is a request the API never answered (a connection refused
// or dropped, a timeout): a net.Error whose message has the token removed.
type noAnswerError struct {
	message string
	timeout bool
}

func (e *noAnswerError) Error() string   { return e.message }
func (e *noAnswerError) Timeout() bool   { return e.timeout }
func (e *noAnswerError) Temporary() bool { return true }
