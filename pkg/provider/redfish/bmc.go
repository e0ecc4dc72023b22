package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/claimscale/claimscale/pkg/provider"
)

// bmc is one server's BMC as the provider talks to it: one connection,
// one call at a time (BMCs are slow and many refuse concurrent sessions;
// gofish's client sends one request at a time by default and every call
// here holds mu for its whole read-then-act), and a backoff after
// failures so that an unreachable BMC costs a request per backoff step,
// not one per reconcile.
type bmc struct {
	endpoint string
	system   string
	username string
	password string
	tls      *tls.Config
	timeout  time.Duration
	now      func() time.Time

	mu        sync.Mutex
	client    *gofish.APIClient
	retry     *backoff.ExponentialBackOff
	failUntil time.Time
	lastErr   error
	// retryAfter is the Retry-After of the last answer that had one.
	retryAfter *retryAfterTransport
}

func newBMC(endpoint, system, username, password string, tlsConfig *tls.Config, timeout time.Duration, now func() time.Time) *bmc {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval, retry.MaxElapsedTime = 2*time.Second, 5*time.Minute, 0
	retry.Clock = clockFunc(now)
	retry.Reset()
	return &bmc{
		endpoint: strings.TrimSuffix(endpoint, "/"), system: system, username: username, password: password,
		tls: tlsConfig, timeout: timeout, now: now, retry: retry,
	}
}

type clockFunc func() time.Time

func (c clockFunc) Now() time.Time { return c() }

// do runs fn with the BMC's ComputerSystem, connecting first when needed,
// one call at a time. A BMC in backoff answers its last error without a
// request.
func (b *bmc) do(ctx context.Context, fn func(ctx context.Context, system *schemas.ComputerSystem) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.now().Before(b.failUntil) {
		return b.lastErr
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	err := b.call(ctx, fn)
	// A 409 is a healthy BMC busy with a transition: no backoff.
	if err == nil || errors.Is(err, errTransition) {
		b.retry.Reset()
		b.failUntil, b.lastErr = time.Time{}, nil
		return err
	}
	if ctx.Err() != nil && !errors.Is(err, context.Canceled) {
		err = provider.NewRetryable(fmt.Errorf("the BMC %s did not answer within %s", b.endpoint, b.timeout), 0)
	}
	wait := b.retry.NextBackOff()
	if after := provider.RetryAfter(err); after > wait {
		wait = after
	}
	b.failUntil, b.lastErr = b.now().Add(wait), err
	if provider.IsTerminal(err) {
		// Wrong credentials stay wrong until someone changes them: a BMC
		// locks an account out after a few failed logins.
		b.client = nil
	}
	return err
}

func (b *bmc) call(ctx context.Context, fn func(ctx context.Context, system *schemas.ComputerSystem) error) error {
	if b.client == nil {
		if err := b.connect(ctx); err != nil {
			return err
		}
	}
	client := b.client.WithContext(ctx)
	system, err := b.computerSystem(client)
	if err != nil {
		return b.classify(err, "reading the system")
	}
	return fn(ctx, system)
}

func (b *bmc) connect(ctx context.Context) error {
	b.retryAfter = &retryAfterTransport{next: &http.Transport{TLSClientConfig: b.tls, TLSHandshakeTimeout: b.timeout}}
	client, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint: b.endpoint, Username: b.username, Password: b.password,
		// Basic authentication on every request: a session would expire
		// between a pool's rare power calls, and BMCs hold only a few.
		BasicAuth: true, HTTPClient: &http.Client{Transport: b.retryAfter}, NoModifyTransport: true,
		MaxConcurrentRequests: 1,
	})
	if err != nil {
		return b.classify(err, "connecting")
	}
	b.client = client
	return nil
}

// computerSystem finds the configured system, or the only one.
func (b *bmc) computerSystem(client *gofish.APIClient) (*schemas.ComputerSystem, error) {
	if b.system != "" {
		return schemas.GetComputerSystem(client, "/redfish/v1/Systems/"+b.system)
	}
	systems, err := client.Service.Systems()
	if err != nil {
		return nil, err
	}
	if len(systems) != 1 {
		return nil, provider.NewTerminal(fmt.Errorf("the BMC %s has %d systems; name one in the server's system", b.endpoint, len(systems)))
	}
	return systems[0], nil
}

// classify turns what gofish returned into the provider's error kinds,
// with the BMC's own message and without credentials, nor the secrets
// given (a seed image's URL token, which a BMC that cannot fetch the
// image echoes).
func (b *bmc) classify(err error, doing string, secrets ...string) error {
	if err == nil {
		return nil
	}
	var retryable *provider.RetryableError
	if errors.As(err, &retryable) || !provider.IsRetryable(err) {
		return err // already one of the provider's kinds
	}
	// gofish reports a collection it could not read whole as one error
	// per member, without Unwrap: the first says what the BMC answered.
	var collection *schemas.CollectionError
	if errors.As(err, &collection) && len(collection.Failures) > 0 {
		links := make([]string, 0, len(collection.Failures))
		for link := range collection.Failures {
			links = append(links, link)
		}
		sort.Strings(links)
		return b.classify(collection.Failures[links[0]], doing, secrets...)
	}
	message := b.redact(err.Error(), secrets...)
	wrapped := fmt.Errorf("%s on the BMC %s: %s", doing, b.endpoint, message)
	var redfishErr *schemas.Error
	if !errors.As(err, &redfishErr) {
		return provider.NewRetryable(wrapped, 0)
	}
	if redfishErr.Message != "" {
		wrapped = fmt.Errorf("%s on the BMC %s: %d %s", doing, b.endpoint, redfishErr.HTTPReturnedStatusCode, b.redact(redfishErr.Message, secrets...))
	}
	switch status := redfishErr.HTTPReturnedStatusCode; {
	case status == http.StatusUnauthorized:
		return provider.NewTerminal(fmt.Errorf("%w (the BMC refused the credentials)", wrapped))
	case status == http.StatusForbidden:
		return provider.NewTerminal(fmt.Errorf("%w (the BMC account lacks a privilege: it needs ConfigureComponents, the Operator role)", wrapped))
	case status == http.StatusNotFound:
		// The BMC answers, and does not know the system (a wrong system
		// Id, a BMC replaced): a person must look; the server it powers
		// is not gone because its BMC lost track of it.
		return provider.NewTerminal(fmt.Errorf("%w (the BMC does not know the system)", wrapped))
	case status == http.StatusConflict:
		return provider.NewRetryable(fmt.Errorf("%w (%w)", wrapped, errTransition), 5*time.Second)
	case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
		return provider.NewRetryable(wrapped, b.retryAfter.last())
	case status >= 400 && status < 500:
		return provider.NewTerminal(wrapped)
	default:
		return provider.NewRetryable(wrapped, 0)
	}
}

// errTransition marks a BMC's 409: a power transition is running.
var errTransition = errors.New("a power transition is running")

// redact removes the credentials from text gofish or the BMC wrote: a URL
// with user info, a password echoed in an error body; and the other
// secrets given.
func (b *bmc) redact(text string, secrets ...string) string {
	for _, secret := range append([]string{b.password, b.username + ":" + b.password}, secrets...) {
		if len(secret) > 1 {
			text = strings.ReplaceAll(text, secret, "[redacted]")
		}
	}
	return text
}

// retryAfterTransport remembers the Retry-After of the last answer, which
// gofish's error does not carry.
type retryAfterTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	wait time.Duration
}

func (t *retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	wait := time.Duration(0)
	if value := resp.Header.Get("Retry-After"); value != "" {
		if seconds, err := strconv.Atoi(value); err == nil && seconds > 0 {
			wait = time.Duration(seconds) * time.Second
		} else if at, err := http.ParseTime(value); err == nil {
			wait = time.Until(at)
		}
	}
	t.mu.Lock()
	t.wait = wait
	t.mu.Unlock()
	return resp, nil
}

func (t *retryAfterTransport) last() time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wait
}

// tlsConfig verifies the BMCs against caPEM, or not at all when insecure.
func tlsConfig(caPEM []byte, insecure bool) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // the operator's explicit choice for self-signed BMCs
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, provider.NewTerminal(errors.New("ca.crt of the credentials Secret holds no PEM certificate"))
		}
		config.RootCAs = pool
	}
	return config, nil
}
