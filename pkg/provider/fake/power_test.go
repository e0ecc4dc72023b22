package fake

import (
	"context"
	"errors"
	"testing"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
)

func TestSuspendAndResumeChangeTheStateAndAreRecorded(t *testing.T) {
	p := New("ours", small)
	machine, err := p.Create(t.Context(), claim("sleepy"), provider.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !provider.CanManagePower(t.Context(), p) {
		t.Fatal("the fake says it cannot manage power")
	}
	for _, step := range []struct {
		call func(context.Context, string) error
		want provider.InstanceState
	}{
		{p.Suspend, provider.InstanceSuspended},
		{p.Suspend, provider.InstanceSuspended},
		{p.Resume, provider.InstanceRunning},
		{p.Resume, provider.InstanceRunning},
	} {
		if err := step.call(t.Context(), machine.ProviderID); err != nil {
			t.Fatalf("power call answered %v, want success", err)
		}
		if got, _ := p.Get(t.Context(), machine.ProviderID); got.State != step.want {
			t.Fatalf("machine is %s, want %s", got.State, step.want)
		}
	}
	calls := p.Calls(Suspend, Resume)
	if len(calls) != 4 || calls[0].Method != Suspend || calls[3].Method != Resume || calls[3].ProviderID != machine.ProviderID || calls[3].Cluster != "ours" {
		t.Fatalf("recorded power calls %+v, want Suspend, Suspend, Resume, Resume of %s", calls, machine.ProviderID)
	}
}

func TestInjectedPowerErrorsAnswerWithTheirKind(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method Method
		err    error
		is     func(error) bool
	}{
		{"a Resume whose host has no memory free is insufficient capacity", Resume, provider.NewInsufficientCapacity(errors.New("no memory on pve1")), provider.IsInsufficientCapacity},
		{"a Suspend the provider cannot do is not supported", Suspend, provider.NewNotSupported("no power calls"), provider.IsNotSupported},
		{"a Resume the provider cannot do is not supported", Resume, provider.NewNotSupported("no power calls"), provider.IsNotSupported},
		{"a Suspend that times out is retryable", Suspend, errors.New("shutdown timed out"), provider.IsRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New("ours", small)
			machine, err := p.Create(t.Context(), claim("a"), provider.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Suspend(t.Context(), machine.ProviderID); err != nil && tc.method == Resume {
				t.Fatal(err)
			}
			before, _ := p.Get(t.Context(), machine.ProviderID)
			p.FailNext(tc.method, tc.err)
			call := map[Method]func(context.Context, string) error{Suspend: p.Suspend, Resume: p.Resume}[tc.method]
			if err := call(t.Context(), machine.ProviderID); !tc.is(err) {
				t.Fatalf("%s answered %v, want the injected error's kind", tc.method, err)
			}
			if after, _ := p.Get(t.Context(), machine.ProviderID); after.State != before.State {
				t.Fatalf("a failed %s changed the machine from %s to %s", tc.method, before.State, after.State)
			}
			if calls := p.Calls(tc.method); calls[len(calls)-1].Err != tc.err {
				t.Fatalf("the failed %s was recorded with %v, want the injected error", tc.method, calls[len(calls)-1].Err)
			}
			if err := call(t.Context(), machine.ProviderID); err != nil {
				t.Fatalf("the %s after the injected error answered %v, want success", tc.method, err)
			}
		})
	}
}

func TestDisablePowerMakesAProviderThatCannotManagePower(t *testing.T) {
	infra := NewInfrastructure(small)
	p := infra.Provider("ours")
	machine, err := p.Create(t.Context(), claim("a"), provider.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	infra.DisablePower()
	if provider.CanManagePower(t.Context(), p) {
		t.Fatal("CanManagePower is true after DisablePower")
	}
	if err := p.Suspend(t.Context(), machine.ProviderID); !provider.IsNotSupported(err) {
		t.Fatalf("Suspend answered %v, want not supported", err)
	}
	if got, _ := p.Get(t.Context(), machine.ProviderID); got.State != provider.InstanceRunning {
		t.Fatalf("a refused Suspend left the machine %s", got.State)
	}
	if calls := p.Calls(Suspend); len(calls) != 1 || !provider.IsNotSupported(calls[0].Err) {
		t.Fatalf("recorded Suspends %+v, want the one refused", calls)
	}
	infra.EnablePower()
	if err := p.Suspend(t.Context(), machine.ProviderID); err != nil {
		t.Fatalf("Suspend after EnablePower answered %v", err)
	}
}

// TestTheSleepChecksSkipTheFakeWithoutPower: the conformance kit's sleep
// checks skip a fake that cannot manage power, and the others still pass.
func TestTheSleepChecksSkipTheFakeWithoutPower(t *testing.T) {
	skipped := 0
	for _, check := range conformance.Checks() {
		infra := NewInfrastructure(small)
		infra.DisablePower()
		h := conformance.Harness{
			Provider: infra.Provider("ours"), ClusterName: "ours", Foreign: infra.Provider("theirs"),
			Pool: pool(), UnknownProviderID: ProviderIDPrefix + "ours/none",
			ErrorCases: []conformance.ErrorCase{{Name: "an injected plain error", Want: conformance.Retryable, Call: func(ctx context.Context) error {
				infra.FailNext(List, errors.New("connection reset"))
				_, err := infra.Provider("ours").List(ctx)
				return err
			}}},
		}
		err := conformance.RunCheck(t.Context(), check, h)
		switch {
		case conformance.IsSkipped(err):
			skipped++
		case err != nil:
			t.Errorf("check %q: %v", check.Name, err)
		}
	}
	if skipped == 0 {
		t.Fatal("no sleep check was skipped for a fake that cannot manage power")
	}
}
