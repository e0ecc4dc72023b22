package providerresolver

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/fake"
)

// withoutPower hides the fake's power calls.
type withoutPower struct{ provider.Provider }

func TestSafeProviderForwardsPowerAndSaysWhenItCannot(t *testing.T) {
	ctx := context.Background()
	infra := fake.NewInfrastructure()
	machine := "fake://c/a"
	safe := newSafeProvider("fake", infra.Provider("c"), nil)
	if !provider.CanManagePower(ctx, safe) {
		t.Fatal("the wrapper of a provider that manages power says it cannot")
	}
	if err := safe.Suspend(ctx, machine); !provider.IsNotFound(err) {
		t.Fatalf("Suspend through the wrapper answered %v, want the fake's not-found", err)
	}
	if err := safe.Resume(ctx, machine); !provider.IsNotFound(err) {
		t.Fatalf("Resume through the wrapper answered %v, want the fake's not-found", err)
	}
	if calls := infra.Calls(fake.Suspend, fake.Resume); len(calls) != 2 {
		t.Fatalf("the provider inside received %+v, want a Suspend and a Resume", calls)
	}

	infra.DisablePower()
	if provider.CanManagePower(ctx, safe) {
		t.Fatal("the wrapper of a provider that says it cannot manage power says it can")
	}

	plain := newSafeProvider("plain", withoutPower{fake.New("c")}, nil)
	if provider.CanManagePower(ctx, plain) {
		t.Fatal("the wrapper of a provider without power calls says it can manage power")
	}
	if err := plain.Suspend(ctx, machine); !provider.IsNotSupported(err) {
		t.Fatalf("Suspend through the wrapper of a provider without power answered %v, want not supported", err)
	}
}

func TestSafeProviderRedactsPowerErrorsAndKeepsTheirKind(t *testing.T) {
	token := "s3cr3t/t0ken+with=chars"
	for _, tc := range []struct {
		name   string
		method fake.Method
		wrap   func(error) error
		is     func(error) bool
	}{
		{"a Resume without memory on the host", fake.Resume, provider.NewInsufficientCapacity, provider.IsInsufficientCapacity},
		{"a refused Suspend", fake.Suspend, provider.NewTerminal, provider.IsTerminal},
		{"a Suspend the infrastructure cannot do", fake.Suspend, func(err error) error { return &provider.NotSupportedError{Err: err} }, provider.IsNotSupported},
		{"a Resume that may work later", fake.Resume, func(err error) error { return err }, provider.IsRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			infra := fake.NewInfrastructure()
			safe := newSafeProvider("fake", infra.Provider("c"), map[string][]byte{"token": []byte(token)})
			infra.FailNext(tc.method, tc.wrap(fmt.Errorf("POST /vms/100/status/start?token=%s: 401", token)))
			call := map[fake.Method]func(context.Context, string) error{fake.Suspend: safe.Suspend, fake.Resume: safe.Resume}[tc.method]
			err := call(context.Background(), "fake://c/a")
			if strings.Contains(err.Error(), token) {
				t.Fatalf("the error carries the token: %v", err)
			}
			if !strings.Contains(err.Error(), redactedText) {
				t.Fatalf("the error was not redacted: %v", err)
			}
			if !tc.is(err) {
				t.Fatalf("the error lost its kind: %T %v", err, err)
			}
		})
	}
}

// A power call that finds the API unreachable opens the breaker, and the
// next call, power or not, fails at once without reaching the provider.
func TestAnUnreachablePowerCallOpensTheBreaker(t *testing.T) {
	infra := fake.NewInfrastructure()
	safe := newSafeProvider("fake", infra.Provider("c"), nil)
	defer safe.breaker.stop()
	infra.FailNext(fake.Suspend, fmt.Errorf("stopping VM 100: %w", context.DeadlineExceeded))
	if err := safe.Suspend(context.Background(), "fake://c/a"); !IsUnreachable(err) {
		t.Fatalf("Suspend answered %v, want unreachable", err)
	}
	infra.ResetCalls()
	err := safe.Resume(context.Background(), "fake://c/a")
	if !IsUnreachable(err) || !strings.Contains(err.Error(), "NodeProvider fake is unreachable") {
		t.Fatalf("Resume with the breaker open answered %v, want the breaker's error", err)
	}
	if calls := infra.Calls(fake.Suspend, fake.Resume); len(calls) > 0 {
		t.Fatalf("power calls reached the provider while its breaker was open: %+v", calls)
	}
}
