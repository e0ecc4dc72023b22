package proxmox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pmx "github.com/luthermonson/go-proxmox"
	"k8s.io/utils/clock"

	"github.com/claimscale/claimscale/pkg/provider"
)

// requestTimeout bounds one HTTP exchange; long operations are tasks, which
// are polled instead.
const requestTimeout = 30 * time.Second

// ticketLifetime is how long a login ticket is used before a fresh one is
// fetched; Proxmox tickets expire after two hours.
const ticketLifetime = 90 * time.Minute

// apiError is a failed HTTP exchange with the Proxmox API, with Proxmox's
// message (which it sends in the status line).
type apiError struct {
	Code    int
	Message string
	Method  string
	Path    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %s (%d)", e.Method, e.Path, e.Message, e.Code)
}

// newHTTPClient builds the client the go-proxmox client talks through: TLS
// verified against the Secret's CA bundle (else the system roots, unless
// verification is switched off), ticket login for user and password, and
// the recording of failed responses.
func newHTTPClient(s *settings, creds *credentials, clk clock.PassiveClock, redact *strings.Replacer) *http.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case creds.roots != nil:
		tlsConfig.RootCAs = creds.roots
	case s.insecureTLS:
		tlsConfig.InsecureSkipVerify = true //nolint:gosec // the operator asked for it in spec.proxmox.insecureSkipTLSVerify
	}
	base := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	var rt http.RoundTripper = base
	if creds.tokenID == "" {
		rt = &ticketTransport{next: base, endpoint: s.endpoint, username: creds.username, password: creds.password, clock: clk, redact: redact}
	}
	return &http.Client{
		Transport: &recordingTransport{next: rt, redact: redact},
		Timeout:   requestTimeout,
	}
}

// failureRecord holds the first failed response of one call.
type failureRecord struct {
	mu  sync.Mutex
	err *apiError
}

type failureRecordKey struct{}

func (r *failureRecord) set(e *apiError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = e
	}
}

func (r *failureRecord) get() *apiError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// recordingTransport notes every failed response in the call's
// failureRecord. go-proxmox keeps only the status line of a 500 and turns
// 401 and 403 into one error without the message, and it decodes a 404 or
// 503 whose body is {"data":null} as success; the record is what tells the
// provider what really happened.
type recordingTransport struct {
	next   http.RoundTripper
	redact *strings.Replacer
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < http.StatusBadRequest {
		return resp, err
	}
	rec, _ := req.Context().Value(failureRecordKey{}).(*failureRecord)
	if rec == nil {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rec.set(&apiError{
		Code:    resp.StatusCode,
		Message: t.redact.Replace(failureMessage(resp, body)),
		Method:  req.Method,
		Path:    t.redact.Replace(apiPath(req.URL)),
	})
	return resp, nil
}

// failureMessage is Proxmox's reason for a failure: the status line's text
// when it is not the standard one, else the body's message and parameter
// errors.
func failureMessage(resp *http.Response, body []byte) string {
	reason := strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)))
	var envelope struct {
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	_ = json.Unmarshal(body, &envelope)
	msg := reason
	if msg == "" || msg == http.StatusText(resp.StatusCode) {
		if m := strings.TrimSpace(envelope.Message); m != "" {
			msg = m
		}
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if len(envelope.Errors) > 0 {
		keys := make([]string, 0, len(envelope.Errors))
		for k := range envelope.Errors {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+": "+strings.TrimSpace(envelope.Errors[k]))
		}
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	return strings.ReplaceAll(msg, "\n", " ")
}

// apiPath is the request's path below /api2/json, for messages.
func apiPath(u *url.URL) string {
	p := u.Path
	if i := strings.Index(p, "/api2/json"); i >= 0 {
		p = p[i+len("/api2/json"):]
	}
	return p
}

// ticketTransport logs in with user and password and sends the ticket and
// CSRF token with every request, logging in again when the ticket is old or
// refused. go-proxmox can log in once but never renews the ticket, which
// expires after two hours, too soon for a controller.
type ticketTransport struct {
	next     http.RoundTripper
	endpoint string
	username string
	password string
	clock    clock.PassiveClock
	redact   *strings.Replacer

	mu       sync.Mutex
	ticket   string
	csrf     string
	loggedIn time.Time
}

// loginError is a refused or failed login; it names no credential.
type loginError struct {
	Code    int
	Message string
}

func (e *loginError) Error() string {
	return fmt.Sprintf("login with the username and password from the credentials Secret failed: %s (%d)", e.Message, e.Code)
}

func (t *ticketTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ticket, csrf, err := t.session(req.Context(), false)
	if err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(t.authorize(req, ticket, csrf))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	// A refused ticket (expired, or the cluster restarted its auth key) is
	// renewed once, if the body can be sent again.
	if req.Body != nil && req.GetBody == nil {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if ticket, csrf, err = t.session(req.Context(), true); err != nil {
		return nil, err
	}
	retry := req
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		retry = req.Clone(req.Context())
		retry.Body = body
	}
	return t.next.RoundTrip(t.authorize(retry, ticket, csrf))
}

func (t *ticketTransport) authorize(req *http.Request, ticket, csrf string) *http.Request {
	r := req.Clone(req.Context())
	r.Header.Set("Cookie", "PVEAuthCookie="+ticket)
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		r.Header.Set("CSRFPreventionToken", csrf)
	}
	return r
}

func (t *ticketTransport) session(ctx context.Context, renew bool) (string, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !renew && t.ticket != "" && t.clock.Since(t.loggedIn) < ticketLifetime {
		return t.ticket, t.csrf, nil
	}
	form := url.Values{"username": {t.username}, "password": {t.password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint+"/access/ticket", strings.NewReader(form.Encode()))
	if err != nil {
		return "", "", &loginError{Message: "cannot build the login request"}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		// The transport's error names the URL and the cause, never the body.
		return "", "", fmt.Errorf("logging in: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= http.StatusBadRequest {
		return "", "", &loginError{Code: resp.StatusCode, Message: t.redact.Replace(failureMessage(resp, body))}
	}
	var answer struct {
		Data struct {
			Ticket string `json:"ticket"`
			CSRF   string `json:"CSRFPreventionToken"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || answer.Data.Ticket == "" {
		return "", "", &loginError{Code: resp.StatusCode, Message: "the answer holds no ticket"}
	}
	t.ticket, t.csrf, t.loggedIn = answer.Data.Ticket, answer.Data.CSRF, t.clock.Now()
	return t.ticket, t.csrf, nil
}

// api is the go-proxmox client with the provider's way of calling it.
type api struct {
	pve *pmx.Client
	// principal is "token" or "user", for messages about privileges.
	principal string
	// redact replaces the credentials' values, which may turn up in a
	// message (a task's UPID names the token, for one).
	redact *strings.Replacer
	// http, endpoint and token make the requests go-proxmox cannot (a
	// multipart upload with a context).
	http     *http.Client
	endpoint string
	token    string
}

// do runs one call against the API and returns the failed response it
// produced, if any, in preference to go-proxmox's own error.
func (a *api) do(ctx context.Context, call func(context.Context) error) error {
	rec := &failureRecord{}
	err := call(context.WithValue(ctx, failureRecordKey{}, rec))
	if failed := rec.get(); failed != nil {
		return failed
	}
	return err
}

// get reads one API path into v.
func (a *api) get(ctx context.Context, path string, v any) error {
	return a.do(ctx, func(ctx context.Context) error { return a.pve.Get(ctx, path, v) })
}

var permissionCheck = regexp.MustCompile(`^Permission check failed \((/[^,)]*), ?([^)]+)\)`)

// classify turns the error of an API call into one of the provider's kinds,
// saying what was being done: 5xx and timeouts are retryable, 401 and 403
// and TLS failures terminal with a message a person can act on.
func (a *api) classify(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	cause := a.scrub(err)
	var (
		failed   *apiError
		login    *loginError
		task     *taskError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &failed):
		switch {
		case failed.Code == http.StatusUnauthorized:
			return provider.NewTerminal(fmt.Errorf("%s: the proxmox API rejected the %s from the credentials Secret (%s, %d)", what, a.principal, failed.Message, failed.Code))
		case failed.Code == http.StatusForbidden:
			if m := permissionCheck.FindStringSubmatch(failed.Message); m != nil {
				return provider.NewTerminal(fmt.Errorf("%s: proxmox API %s lacks %s on %s (%d)", what, a.principal, m[2], m[1], failed.Code))
			}
			return provider.NewTerminal(fmt.Errorf("%s: proxmox API %s may not %s %s: %s (%d)", what, a.principal, failed.Method, failed.Path, failed.Message, failed.Code))
		case failed.Code >= http.StatusInternalServerError, failed.Code == http.StatusTooManyRequests, failed.Code == http.StatusRequestTimeout:
			return provider.NewRetryable(fmt.Errorf("%s: %w", what, cause), 0)
		default:
			return provider.NewTerminal(fmt.Errorf("%s: %w", what, cause))
		}
	case errors.As(err, &login):
		if login.Code == http.StatusUnauthorized || login.Code == http.StatusForbidden || login.Code == 0 {
			return provider.NewTerminal(fmt.Errorf("%s: %w", what, cause))
		}
		return provider.NewRetryable(fmt.Errorf("%s: %w", what, cause), 0)
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &hostname), errors.As(err, &verify):
		return provider.NewTerminal(fmt.Errorf("%s: the proxmox API's TLS certificate did not verify; put its CA in the credentials Secret as %s or set spec.proxmox.insecureSkipTLSVerify: %w", what, SecretKeyCA, cause))
	case errors.As(err, &task):
		return fmt.Errorf("%s: %w", what, cause)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", what, cause)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, pmx.ErrTimeout), errors.As(err, &netErr):
		return provider.NewRetryable(fmt.Errorf("%s: %w", what, cause), 0)
	default:
		return provider.NewRetryable(fmt.Errorf("%s: %w", what, cause), 0)
	}
}

// scrub returns err, or only its text with the credentials' values
// replaced when it names one: the chain below is dropped then, since its
// errors would still print them.
func (a *api) scrub(err error) error {
	msg := err.Error()
	if clean := a.redact.Replace(msg); clean != msg {
		return errors.New(clean)
	}
	return err
}

// discardLogger silences go-proxmox, whose debug output includes request
// bodies.
type discardLogger struct{}

func (discardLogger) Debugf(string, ...any) {}
func (discardLogger) Errorf(string, ...any) {}
func (discardLogger) Infof(string, ...any)  {}
func (discardLogger) Warnf(string, ...any)  {}
