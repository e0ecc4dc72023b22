package providerresolver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// echoingProvider fails every call with a message that quotes the secrets
// back, as a remote API may: in the request URL (query-escaped), in the
// path, and in the body it could not parse.
type echoingProvider struct {
	token string
	fail  func(error) error
}

func (p echoingProvider) err(userData []byte) error {
	return p.fail(fmt.Errorf("POST https://api.example/v1/servers?token=%s (path /auth/%s): 401: token %q invalid; body: %s",
		url.QueryEscape(p.token), url.PathEscape(p.token), p.token, userData))
}

func (p echoingProvider) Create(_ context.Context, _ *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	return nil, p.err(opts.UserData)
}
func (p echoingProvider) Delete(context.Context, string) error { return p.err(nil) }
func (p echoingProvider) Get(context.Context, string) (*provider.Instance, error) {
	return nil, p.err(nil)
}
func (p echoingProvider) List(context.Context) ([]*provider.Instance, error) { return nil, p.err(nil) }
func (p echoingProvider) Shapes(context.Context, *v1alpha1.NodePool) ([]provider.Shape, error) {
	return nil, p.err(nil)
}

func TestSafeProviderRedactsCredentialsAndUserDataInEveryFormAndKeepsTheErrorKind(t *testing.T) {
	token := "s3cr3t/t0ken+with=chars"
	userData := []byte("#cloud-config\nruncmd:\n  - kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef\n")
	for _, kind := range []struct {
		name  string
		wrap  func(error) error
		check func(error) bool
	}{
		{"terminal", provider.NewTerminal, provider.IsTerminal},
		{"retryable", func(err error) error { return provider.NewRetryable(err, 7*time.Second) }, func(err error) bool {
			return provider.IsRetryable(err) && provider.RetryAfter(err) == 7*time.Second
		}},
		{"not found", func(err error) error { return &provider.NotFoundError{Err: err} }, provider.IsNotFound},
		{"capacity", provider.NewInsufficientCapacity, provider.IsInsufficientCapacity},
		{"timeout", func(err error) error { return fmt.Errorf("%w: %w", err, context.DeadlineExceeded) }, IsUnreachable},
	} {
		t.Run(kind.name, func(t *testing.T) {
			safe := newSafeProvider("test", echoingProvider{token: token, fail: kind.wrap}, map[string][]byte{"token": []byte(token), "short": []byte("ab")})
			_, createErr := safe.Create(context.Background(), &v1alpha1.NodeClaim{}, provider.CreateOptions{UserData: userData})
			_, listErr := safe.List(context.Background())
			for _, err := range []error{createErr, listErr, safe.Delete(context.Background(), "x")} {
				message := err.Error()
				for _, secret := range []string{token, url.QueryEscape(token), url.PathEscape(token), "abcdef.0123456789abcdef"} {
					if strings.Contains(message, secret) {
						t.Errorf("error carries the secret %q: %s", secret, message)
					}
				}
				if !strings.Contains(message, redactedText) || !strings.Contains(message, "401") {
					t.Errorf("error lost what it said: %s", message)
				}
				if !kind.check(err) {
					t.Errorf("error lost its kind: %T %v", err, err)
				}
				// The original, which still carries them, is not reachable.
				for unwrapped := errors.Unwrap(err); unwrapped != nil; unwrapped = errors.Unwrap(unwrapped) {
					if strings.Contains(unwrapped.Error(), token) {
						t.Errorf("the chain still carries the token: %v", unwrapped)
					}
				}
			}
		})
	}
}

func TestSafeProviderLeavesErrorsWithoutSecretsAsTheyAre(t *testing.T) {
	original := provider.NewTerminal(errors.New("flavor flex-4-1 does not exist"))
	safe := newSafeProvider("test", echoingProvider{fail: func(error) error { return original }}, map[string][]byte{"token": []byte("s3cr3t-token")})
	if err := safe.Delete(context.Background(), "x"); err != original {
		t.Fatalf("an error without secrets was rewrapped: %v", err)
	}
}

// joiningProvider's machines join by means of their own.
type joiningProvider struct{ echoingProvider }

func (joiningProvider) OwnJoin() string { return "its bootstrap provider" }

// The wrapper every provider is handed out in still tells what makes its
// machines join, so a pool's unused bootstrap is reported.
func TestSafeProviderPassesOnWhatMakesItsMachinesJoin(t *testing.T) {
	joins := func(p provider.Provider) string {
		joiner, ok := p.(provider.OwnJoiner)
		if !ok {
			return ""
		}
		return joiner.OwnJoin()
	}
	if got := joins(newSafeProvider("capi", joiningProvider{}, nil)); got != "its bootstrap provider" {
		t.Fatalf("OwnJoin through the wrapper = %q, want the provider's", got)
	}
	if got := joins(newSafeProvider("plain", echoingProvider{}, nil)); got != "" {
		t.Fatalf("OwnJoin of a provider that delivers user data = %q, want none", got)
	}
}

// A Create the provider's API refuses for good fails every claim alike, so
// the NodeProvider shows it (as a problem, redacted) until one succeeds.
func TestATerminalCreateErrorIsAProblemOfTheProviderUntilACreateSucceeds(t *testing.T) {
	token := "s3cr3t/t0ken+with=chars"
	userData := []byte("#cloud-config\nruncmd:\n  - kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef\n")
	fail := provider.NewTerminal
	echo := echoingProvider{token: token, fail: func(err error) error { return fail(err) }}
	safe := newSafeProvider("test", echo, map[string][]byte{"token": []byte(token)})
	if got := safe.Problems(); len(got) != 0 {
		t.Fatalf("problems before any Create = %+v", got)
	}
	_, _ = safe.Create(context.Background(), &v1alpha1.NodeClaim{}, provider.CreateOptions{UserData: userData})
	got := safe.Problems()
	if len(got) != 1 || got[0].Reason != ProblemCreateRefused || !strings.Contains(got[0].Message, "401") {
		t.Fatalf("problems after a terminal Create error = %+v, want the refusal", got)
	}
	if strings.Contains(got[0].Message, token) || strings.Contains(got[0].Message, "abcdef.0123456789abcdef") {
		t.Fatalf("the problem leaks a secret: %s", got[0].Message)
	}

	// A retryable failure does not clear it; only a success does.
	fail = func(err error) error { return provider.NewRetryable(err, 0) }
	_, _ = safe.Create(context.Background(), &v1alpha1.NodeClaim{}, provider.CreateOptions{})
	if got := safe.Problems(); len(got) != 1 {
		t.Fatalf("problems after a retryable failure = %+v, want the refusal kept", got)
	}
	safe.next = succeedingProvider{echo}
	if _, err := safe.Create(context.Background(), &v1alpha1.NodeClaim{}, provider.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := safe.Problems(); len(got) != 0 {
		t.Fatalf("problems after a successful Create = %+v", got)
	}
}

type succeedingProvider struct{ echoingProvider }

func (succeedingProvider) Create(context.Context, *v1alpha1.NodeClaim, provider.CreateOptions) (*provider.Instance, error) {
	return &provider.Instance{ProviderID: "test://1"}, nil
}

// A Cluster API NodeProvider's credentials are a kubeconfig: the token
// inside it is redacted where an error quotes it alone, not only the whole
// file.
func TestTheTokenInsideAKubeconfigIsRedacted(t *testing.T) {
	token := "eyJhbGciOiJSUzI1NiJ9.management-cluster-token"
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: mgmt, cluster: {server: \"https://mgmt.example:6443\"}}]\n" +
		"users: [{name: capi, user: {token: " + token + "}}]\ncontexts: [{name: mgmt, context: {cluster: mgmt, user: capi}}]\ncurrent-context: mgmt\n"
	echo := echoingProvider{token: token, fail: provider.NewTerminal}
	safe := newSafeProvider("capi", echo, map[string][]byte{"kubeconfig": []byte(kubeconfig)})
	_, err := safe.List(context.Background())
	if err == nil || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "management-cluster-token") {
		t.Fatalf("List error = %v, want the kubeconfig's token redacted", err)
	}
	if !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("List error = %v, want [redacted] where the token was", err)
	}
}
