package providerresolver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// redactedText replaces a secret wherever it turns up in an error.
const redactedText = "[redacted]"

// Secrets shorter than this are not redacted: replacing every "1" or "ok"
// in a message would destroy it and hide nothing.
const minSecretLength = 4

// A user-data line shorter than this is structure ("runcmd:"), not a secret.
const minUserDataLine = 16

// redactor replaces secrets in error messages, in the forms a remote API is
// likely to echo them back in: as given, URL query- and path-escaped (a
// request URL in a Go net/url error, a form body quoted back), JSON-escaped
// (a request body quoted back) and base64 (cloud-init user data is often
// sent so).
type redactor struct{ replacer *strings.Replacer }

func newRedactor(secrets [][]byte) redactor {
	seen := map[string]bool{}
	var forms []string
	add := func(s string) {
		if len(s) >= minSecretLength && !seen[s] {
			seen[s] = true
			forms = append(forms, s)
		}
	}
	for _, secret := range secrets {
		value := string(secret)
		add(value)
		add(strings.TrimSpace(value))
		add(url.QueryEscape(value))
		add(url.PathEscape(value))
		if quoted, err := json.Marshal(value); err == nil {
			add(strings.Trim(string(quoted), `"`))
		}
		add(base64.StdEncoding.EncodeToString(secret))
	}
	// Longest first, so a secret that contains another is replaced whole.
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	pairs := make([]string, 0, 2*len(forms))
	for _, form := range forms {
		pairs = append(pairs, form, redactedText)
	}
	return redactor{replacer: strings.NewReplacer(pairs...)}
}

func (r redactor) empty() bool { return r.replacer == nil }

func (r redactor) string(s string) string {
	if r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// error returns err with every secret replaced in its message. It keeps
// what callers classify errors by (not found, capacity, terminal, not
// supported, retryable and its delay, unreachable), but not the original chain, whose
// messages still carry the secret.
func (r redactor) error(err error) error {
	if err == nil {
		return nil
	}
	message := err.Error()
	clean := r.string(message)
	if clean == message {
		return err
	}
	return newRedactedError(clean, err)
}

func newRedactedError(message string, original error) error {
	redacted := &redactedError{message: message, unreachable: isUnreachable(original)}
	base := errors.New(message)
	switch {
	case provider.IsNotFound(original):
		redacted.kind = &provider.NotFoundError{Err: base}
	case provider.IsInsufficientCapacity(original):
		redacted.kind = &provider.InsufficientCapacityError{Err: base}
	case provider.IsTerminal(original):
		redacted.kind = &provider.TerminalError{Err: base}
	case provider.IsNotSupported(original):
		redacted.kind = &provider.NotSupportedError{Err: base}
	case provider.IsRetryable(original):
		redacted.kind = &provider.RetryableError{Err: base, After: provider.RetryAfter(original)}
	}
	for _, ctxErr := range []error{context.DeadlineExceeded, context.Canceled} {
		if errors.Is(original, ctxErr) {
			redacted.context = ctxErr
		}
	}
	return redacted
}

type redactedError struct {
	message     string
	kind        error
	context     error
	unreachable bool
}

func (e *redactedError) Error() string { return e.message }

func (e *redactedError) Unwrap() []error {
	var chain []error
	for _, err := range []error{e.kind, e.context} {
		if err != nil {
			chain = append(chain, err)
		}
	}
	return chain
}

// IsUnreachable says whether err means the provider's API could not be
// reached or did not answer in time, rather than answered with a failure.
func IsUnreachable(err error) bool { return isUnreachable(err) }

func isUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var redacted *redactedError
	if errors.As(err, &redacted) {
		return redacted.unreachable
	}
	if errors.Is(err, context.Canceled) {
		return false // the caller gave up, not the provider
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// safeProvider is what the resolver hands out: every error it returns has
// the NodeProvider's credentials, and a Create's user data, redacted, so no
// provider can leak them into a condition, an event or a log line however
// its remote API words a failure.
//
// It also breaks the circuit to a provider whose API stopped answering
// (see breaker), so one hung API does not cost every caller a timeout.
type safeProvider struct {
	next     provider.Provider
	redactor redactor
	breaker  *breaker

	// createRefused is the last terminal answer to a Create, until a
	// Create succeeds: the NodeProvider shows it (Problems), since a
	// refusal of the settings fails every claim alike.
	mu            sync.Mutex
	createRefused string
}

func newSafeProvider(name string, next provider.Provider, credentials map[string][]byte) *safeProvider {
	p := &safeProvider{next: next, redactor: newRedactor(secretValues(credentials))}
	p.breaker = &breaker{name: name, probe: func(ctx context.Context) error {
		_, err := p.next.List(ctx)
		return err
	}}
	return p
}

// done looks at a call's outcome and returns its error, redacted.
func (p *safeProvider) done(err error) error {
	err = p.redactor.error(err)
	p.breaker.observe(err)
	return err
}

func secretValues(credentials map[string][]byte) [][]byte {
	values := make([][]byte, 0, len(credentials))
	for _, value := range credentials {
		values = append(values, value)
		values = append(values, kubeconfigSecrets(value)...)
	}
	return values
}

// kubeconfigSecrets are the secrets inside a kubeconfig (a Cluster API
// management cluster's, in the credentials Secret): each user's token,
// password, client key and auth-provider settings, which an error may
// quote alone. A value that is no kubeconfig has none.
func kubeconfigSecrets(value []byte) [][]byte {
	if !bytes.Contains(value, []byte("users")) {
		return nil
	}
	config, err := clientcmd.Load(value)
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, user := range config.AuthInfos {
		for _, secret := range []string{user.Token, user.Password, string(user.ClientKeyData)} {
			if secret != "" {
				out = append(out, []byte(secret))
			}
		}
		if user.AuthProvider != nil {
			for _, v := range user.AuthProvider.Config {
				out = append(out, []byte(v))
			}
		}
	}
	return out
}

// userDataSecrets lists the user data whole and each of its lines long
// enough to carry a token, since an API may quote back only the line it
// choked on.
func userDataSecrets(userData []byte) [][]byte {
	if len(userData) == 0 {
		return nil
	}
	secrets := [][]byte{userData}
	for _, line := range strings.Split(string(userData), "\n") {
		if line = strings.TrimSpace(line); len(line) >= minUserDataLine {
			secrets = append(secrets, []byte(line))
		}
	}
	return secrets
}

func (p *safeProvider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	if err := p.breaker.open(); err != nil {
		return nil, err
	}
	instance, err := p.next.Create(ctx, claim, opts)
	if err == nil {
		p.mu.Lock()
		p.createRefused = ""
		p.mu.Unlock()
		return instance, nil
	}
	if len(opts.UserData) > 0 {
		err = newRedactor(userDataSecrets(opts.UserData)).error(err)
	}
	err = p.done(err)
	if provider.IsTerminal(err) {
		p.mu.Lock()
		p.createRefused = err.Error()
		p.mu.Unlock()
	}
	return instance, err
}

// ProblemCreateRefused is the reason of the problem a terminal Create
// error makes.
const ProblemCreateRefused = "CreateRefused"

// Problems returns the provider's own problems (provider.ProblemReporter)
// and the last terminal answer to a Create, redacted.
func (p *safeProvider) Problems() []provider.Problem {
	var out []provider.Problem
	if reporter, ok := p.next.(provider.ProblemReporter); ok {
		for _, problem := range reporter.Problems() {
			problem.Message = p.redactor.string(problem.Message)
			out = append(out, problem)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.createRefused != "" {
		out = append(out, provider.Problem{Reason: ProblemCreateRefused, Message: "the last Create was refused: " + p.createRefused})
	}
	return out
}

func (p *safeProvider) Delete(ctx context.Context, providerID string) error {
	if err := p.breaker.open(); err != nil {
		return err
	}
	return p.done(p.next.Delete(ctx, providerID))
}

func (p *safeProvider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	if err := p.breaker.open(); err != nil {
		return nil, err
	}
	instance, err := p.next.Get(ctx, providerID)
	return instance, p.done(err)
}

func (p *safeProvider) List(ctx context.Context) ([]*provider.Instance, error) {
	if err := p.breaker.open(); err != nil {
		return nil, err
	}
	instances, err := p.next.List(ctx)
	return instances, p.done(err)
}

func (p *safeProvider) Shapes(ctx context.Context, pool *v1alpha1.NodePool) ([]provider.Shape, error) {
	if err := p.breaker.open(); err != nil {
		return nil, err
	}
	shapes, err := p.next.Shapes(ctx, pool)
	return shapes, p.done(err)
}

// retire stops the breaker's probes and releases what the provider holds
// (a plugin's connection) once the resolver has replaced or forgotten it.
// A call still running on it ends with an error and is retried on the new
// one.
func (p *safeProvider) retire() {
	p.breaker.stop()
	if closer, ok := p.next.(io.Closer); ok {
		_ = closer.Close()
	}
}

// Unwrap returns the provider inside, for tests and callers that need the
// implementation's own type.
func (p *safeProvider) Unwrap() provider.Provider { return p.next }

// OwnJoin says what makes the machines of the provider inside join, when
// it is not claimscale's user data (provider.OwnJoiner).
func (p *safeProvider) OwnJoin() string {
	if joiner, ok := p.next.(provider.OwnJoiner); ok {
		return joiner.OwnJoin()
	}
	return ""
}

// Drifted asks the provider inside whether the claim's machine drifted,
// when it can tell (provider.DriftChecker); else it has not.
func (p *safeProvider) Drifted(ctx context.Context, claim *v1alpha1.NodeClaim) (reason, message string, err error) {
	checker, ok := p.next.(provider.DriftChecker)
	if !ok {
		return "", "", nil
	}
	if err := p.breaker.open(); err != nil {
		return "", "", err
	}
	reason, message, err = checker.Drifted(ctx, claim)
	return reason, message, p.done(err)
}

// Zones asks the provider inside for its zones (provider.Zoner); nil when
// it names none at run time.
func (p *safeProvider) Zones(ctx context.Context) ([]string, error) {
	zoner, ok := p.next.(provider.Zoner)
	if !ok {
		return nil, nil
	}
	if err := p.breaker.open(); err != nil {
		return nil, err
	}
	zones, err := zoner.Zones(ctx)
	return zones, p.done(err)
}
