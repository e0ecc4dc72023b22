package conformance_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/conformance"
)

// powerFlaws are the ways a deliberately broken provider breaks the sleep
// clauses of the contract.
type powerFlaws struct {
	none                 bool // the provider cannot manage power at all
	saysItCannot         bool // it has Suspend and Resume, but CanManagePower is false
	suspendNotIdempotent bool // a second Suspend fails
	resumeNotIdempotent  bool // a Resume of a running machine fails
	stopsForeign         bool // Suspend stops machines of any cluster
	startsForeign        bool // Resume starts machines of any cluster
	dropsTagsAsleep      bool // a stopped machine loses its claim tag
	hidesSuspended       bool // List leaves stopped machines out
	keepsSuspended       bool // a stopped machine is never deleted
	unknownIsSuccess     bool // Suspend and Resume of an unknown machine answer success
}

// powerless hides a provider's power calls: a provider that cannot manage
// power.
type powerless struct{ provider.Provider }

func (m *memory) CanManagePower(context.Context) bool { return !m.flaws.power.saysItCannot }

func (m *memory) Suspend(_ context.Context, providerID string) error {
	return m.setPower(providerID, provider.InstanceSuspended, m.flaws.power.suspendNotIdempotent, m.flaws.power.stopsForeign)
}

func (m *memory) Resume(_ context.Context, providerID string) error {
	return m.setPower(providerID, provider.InstanceRunning, m.flaws.power.resumeNotIdempotent, m.flaws.power.startsForeign)
}

func (m *memory) setPower(providerID string, state provider.InstanceState, notIdempotent, foreign bool) error {
	m.infra.mu.Lock()
	defer m.infra.mu.Unlock()
	machine, ok := m.infra.machines[providerID]
	switch {
	case !ok && m.flaws.power.unknownIsSuccess:
		return nil
	case !ok:
		return m.err(provider.NewNotFound("machine %s", providerID))
	case machine.Tags[v1alpha1.TagCluster] != m.cluster && !foreign:
		return m.err(provider.NewTerminal(fmt.Errorf("refusing to power %s: not tagged for cluster %s", providerID, m.cluster)))
	case machine.State == state && notIdempotent:
		return m.err(fmt.Errorf("machine %s is already %s", providerID, state))
	}
	machine.State = state
	if state == provider.InstanceSuspended && m.flaws.power.dropsTagsAsleep {
		delete(machine.Tags, v1alpha1.TagNodeClaim)
	}
	return nil
}

// timeoutForFlaw bounds a check that waits for a state a flawed provider
// never reports.
const timeoutForFlaw = 2 * time.Second

// direct calls the provider under test without a plugin in between.
func direct(_ *testing.T, p provider.Provider, _ string) provider.Provider { return p }

// overPlugin serves the provider under test as a plugin.
func overPlugin(t *testing.T, p provider.Provider, cluster string) provider.Provider {
	return servePlugin(t, p, cluster)
}

// connections are the two ways the power tests reach the provider: the
// sleep clauses must hold across the wire as they do in process.
var connections = []struct {
	name    string
	connect func(t *testing.T, p provider.Provider, cluster string) provider.Provider
}{{"called directly", direct}, {"served as a plugin", overPlugin}}

// TestAWellBehavedPowerManagerPasses: the baseline the broken power
// managers below differ from by one flaw each, sleep checks included.
func TestAWellBehavedPowerManagerPasses(t *testing.T) {
	for _, c := range connections {
		t.Run(c.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Harness { return harnessOver(t, flaws{}, c.connect) })
		})
	}
}

// TestTheSleepChecksSkipAProviderThatCannotManagePower: a provider without
// the power calls, or one that says at run time it cannot use them, skips
// each sleep check with a note saying so, and fails none.
func TestTheSleepChecksSkipAProviderThatCannotManagePower(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    powerFlaws
	}{
		{"a provider without Suspend and Resume", powerFlaws{none: true}},
		{"a provider whose CanManagePower is false", powerFlaws{saysItCannot: true}},
	} {
		for _, c := range connections {
			t.Run(tc.name+", "+c.name, func(t *testing.T) {
				skipped := 0
				for _, check := range conformance.Checks() {
					err := conformance.RunCheck(t.Context(), check, harnessOver(t, flaws{power: tc.f}, c.connect))
					switch {
					case conformance.IsSkipped(err):
						skipped++
						if !strings.Contains(err.Error(), "cannot manage power") {
							t.Errorf("check %q skipped with %q, want a note that the provider cannot manage power", check.Name, err)
						}
					case err != nil:
						t.Errorf("check %q failed: %v", check.Name, err)
					}
				}
				if skipped == 0 {
					t.Fatal("no check was skipped: the sleep checks ran on a provider that cannot manage power")
				}
				t.Logf("%d sleep checks skipped", skipped)
			})
		}
	}
}

// TestTheKitCatchesBrokenPowerManagers: each power flaw fails the sleep
// check of the clause it breaks, with a message that names the fault.
func TestTheKitCatchesBrokenPowerManagers(t *testing.T) {
	checks := map[string]conformance.Check{}
	for _, c := range conformance.Checks() {
		checks[c.Name] = c
	}
	for _, tc := range []struct {
		name    string
		flaws   flaws
		check   string
		message string
	}{
		{"a second Suspend that fails", flaws{power: powerFlaws{suspendNotIdempotent: true}}, "Suspend and Resume are idempotent", "Suspend is not idempotent"},
		{"a Resume of a running machine that fails", flaws{power: powerFlaws{resumeNotIdempotent: true}}, "Suspend and Resume are idempotent", "Resume is not idempotent"},
		{"a Suspend that stops foreign machines", flaws{power: powerFlaws{stopsForeign: true}}, "Suspend refuses a machine without our cluster tag", "must never be stopped"},
		{"a Resume that starts foreign machines", flaws{power: powerFlaws{startsForeign: true}}, "Resume refuses a machine without our cluster tag", "must never be started"},
		{"a stopped machine that loses its claim tag", flaws{power: powerFlaws{dropsTagsAsleep: true}}, "a suspended machine is listed as suspended with its tags", "lacks its claimscale.io/nodeclaim tag"},
		{"a List that leaves stopped machines out", flaws{power: powerFlaws{hidesSuspended: true}}, "a suspended machine is listed as suspended with its tags", "List no longer answers machine"},
		{"a stopped machine that cannot be deleted", flaws{power: powerFlaws{keepsSuspended: true}}, "Delete works on a suspended machine", "Delete of suspended machine"},
		{"power calls on an unknown machine that succeed", flaws{power: powerFlaws{unknownIsSuccess: true}}, "Suspend and Resume of an unknown machine are not-found", "want an error of kind NotFound"},
		{"power errors without their kind", flaws{flattensErrors: true}, "Suspend refuses a machine without our cluster tag", "failed with a Retryable error, want Terminal"},
	} {
		for _, c := range connections {
			t.Run(tc.name+", "+c.name, func(t *testing.T) {
				check, ok := checks[tc.check]
				if !ok {
					t.Fatalf("no check %q", tc.check)
				}
				h := harnessOver(t, tc.flaws, c.connect)
				h.Timeout = timeoutForFlaw
				err := conformance.RunCheck(t.Context(), check, h)
				if err == nil {
					t.Fatalf("check %q passed a provider with %s", tc.check, tc.name)
				}
				if conformance.IsSkipped(err) {
					t.Fatalf("check %q skipped a provider with %s: %v", tc.check, tc.name, err)
				}
				if !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("check %q failed with\n  %v\nwant a message containing %q", tc.check, err, tc.message)
				}
				t.Logf("caught: %v", err)
			})
		}
	}
}
