package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// The sleep checks hold a provider that can manage power
// (provider.CanManagePower) to the provider.PowerManager contract: Suspend
// and Resume are idempotent, a sleeping machine is still ours (listed,
// with its tags, in state Suspended) and can be deleted, a machine without
// our cluster tag is neither stopped nor started, a machine that is gone
// is not-found. A provider that cannot manage power skips them: its pools
// delete machines instead of suspending them.

// Skipped is what a check answers when it does not apply to the provider
// under test; Run reports it with t.Skip and the note.
type Skipped struct{ Note string }

func (s *Skipped) Error() string { return "skipped: " + s.Note }

// IsSkipped reports whether err says the check did not apply.
func IsSkipped(err error) bool {
	var target *Skipped
	return errors.As(err, &target)
}

// powerChecks are the sleep clauses of the contract.
func powerChecks() []Check {
	return []Check{
		{"Suspend and Resume are idempotent", checkPowerIdempotent},
		{"a suspended machine is listed as suspended with its tags", checkSuspendedListed},
		{"Delete works on a suspended machine", checkDeleteSuspended},
		{"Suspend refuses a machine without our cluster tag", checkSuspendForeign},
		{"Resume refuses a machine without our cluster tag", checkResumeForeign},
		{"Suspend and Resume of an unknown machine are not-found", checkPowerUnknown},
	}
}

// powerOf answers the provider's PowerManager, or Skipped with a note
// saying why the sleep checks do not apply.
func powerOf(ctx context.Context, p provider.Provider) (provider.PowerManager, error) {
	power, ok := p.(provider.PowerManager)
	if !ok || !provider.CanManagePower(ctx, p) {
		return nil, &Skipped{Note: fmt.Sprintf("provider %T cannot manage power (provider.CanManagePower is false): the sleep checks do not apply, and its pools' machines are deleted instead of suspended", p)}
	}
	return power, nil
}

// pollInterval is how often the sleep checks read a machine's state while
// they wait for it to change: a cloud's stop and start are asynchronous
// (the call returns, the server is "changing" for a while).
const pollInterval = 50 * time.Millisecond

// awaitState reads the machine through List until it is (or, with not,
// is no longer) in state, and answers it as last listed; it gives up when
// the check's time runs out, saying what List answered last: a List the
// deadline cut off (on a slow machine, or through a plugin) is not the
// fault.
func awaitState(ctx context.Context, p provider.Provider, providerID string, state provider.InstanceState, not bool) (*provider.Instance, error) {
	var last *provider.Instance
	answered := false
	gaveUp := func() (*provider.Instance, error) {
		if last == nil {
			return nil, fmt.Errorf("List no longer answers machine %s", providerID)
		}
		return last, fmt.Errorf("machine %s is still in state %q", providerID, last.State)
	}
	for {
		instances, err := p.List(ctx)
		if err != nil {
			if answered && ctx.Err() != nil {
				return gaveUp()
			}
			return nil, fmt.Errorf("List: %w", err)
		}
		answered = true
		last = nil
		for _, i := range instances {
			if i.ProviderID == providerID {
				last = i
			}
		}
		if last != nil && (last.State == state) != not {
			return last, nil
		}
		wait := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			wait.Stop()
			return gaveUp()
		case <-wait.C:
		}
	}
}

// suspended makes a machine for a new claim and suspends it, waiting until
// List reports it Suspended.
func suspended(ctx context.Context, h Harness, power provider.PowerManager, label string) (*provider.Instance, error) {
	claim, _, err := newClaim(ctx, h, label)
	if err != nil {
		return nil, err
	}
	instance, err := create(ctx, h.Provider, claim)
	if err != nil {
		return nil, err
	}
	if err := power.Suspend(ctx, instance.ProviderID); err != nil {
		return nil, fmt.Errorf("Suspend of machine %s: %w", instance.ProviderID, err)
	}
	listed, err := awaitState(ctx, h.Provider, instance.ProviderID, provider.InstanceSuspended, false)
	if err != nil {
		return nil, fmt.Errorf("after its Suspend answered success, List does not report machine %s as %s: %w", instance.ProviderID, provider.InstanceSuspended, err)
	}
	return listed, nil
}

func checkPowerIdempotent(ctx context.Context, h Harness) error {
	power, err := powerOf(ctx, h.Provider)
	if err != nil {
		return err
	}
	instance, err := suspended(ctx, h, power, "sleep")
	if err != nil {
		return err
	}
	if err := power.Suspend(ctx, instance.ProviderID); err != nil {
		return fmt.Errorf("Suspend is not idempotent: a second Suspend of machine %s, already suspended, failed with %s; a machine already stopped is success", instance.ProviderID, describe(err))
	}
	if err := power.Resume(ctx, instance.ProviderID); err != nil {
		return fmt.Errorf("Resume of suspended machine %s: %w", instance.ProviderID, err)
	}
	if _, err := awaitState(ctx, h.Provider, instance.ProviderID, provider.InstanceSuspended, true); err != nil {
		return fmt.Errorf("after its Resume answered success, List still reports machine %s as %s: %w", instance.ProviderID, provider.InstanceSuspended, err)
	}
	if err := power.Resume(ctx, instance.ProviderID); err != nil {
		return fmt.Errorf("Resume is not idempotent: a second Resume of machine %s, already started, failed with %s; a running machine is success", instance.ProviderID, describe(err))
	}
	machines, err := machinesOf(ctx, h.Provider, instance.ClaimName())
	if err != nil {
		return err
	}
	if len(machines) != 1 || machines[0].ProviderID != instance.ProviderID {
		return fmt.Errorf("after Suspend and Resume, List shows %d machines for claim %s (%s), want exactly %s: a woken machine keeps its identity", len(machines), instance.ClaimName(), ids(machines), instance.ProviderID)
	}
	if machines[0].State == provider.InstanceSuspended {
		return fmt.Errorf("a second Resume of machine %s put it back to %s", instance.ProviderID, provider.InstanceSuspended)
	}
	return nil
}

func checkSuspendedListed(ctx context.Context, h Harness) error {
	power, err := powerOf(ctx, h.Provider)
	if err != nil {
		return err
	}
	instance, err := suspended(ctx, h, power, "listed")
	if err != nil {
		return err
	}
	want := map[string]string{
		v1alpha1.TagCluster:   h.ClusterName,
		v1alpha1.TagNodePool:  h.Pool.Name,
		v1alpha1.TagNodeClaim: instance.ClaimName(),
	}
	if instance.ClaimName() == "" {
		return fmt.Errorf("suspended machine %s, as List answers it, lacks its %s tag: a sleeping machine nobody owns is never woken nor collected", instance.ProviderID, v1alpha1.TagNodeClaim)
	}
	if missing := missingTags(instance.Tags, want); missing != "" {
		return fmt.Errorf("suspended machine %s, as List answers it, lacks ownership tags (%s): a sleeping machine keeps them", instance.ProviderID, missing)
	}
	got, err := h.Provider.Get(ctx, instance.ProviderID)
	if err != nil {
		return fmt.Errorf("Get of suspended machine %s: %w", instance.ProviderID, err)
	}
	if got.State != provider.InstanceSuspended {
		return fmt.Errorf("Get of suspended machine %s answers state %q where List answers %s", instance.ProviderID, got.State, provider.InstanceSuspended)
	}
	if missing := missingTags(got.Tags, want); missing != "" {
		return fmt.Errorf("suspended machine %s, as Get answers it, lacks ownership tags (%s): a sleeping machine keeps them", instance.ProviderID, missing)
	}
	return nil
}

func checkDeleteSuspended(ctx context.Context, h Harness) error {
	power, err := powerOf(ctx, h.Provider)
	if err != nil {
		return err
	}
	instance, err := suspended(ctx, h, power, "deleted")
	if err != nil {
		return err
	}
	if err := h.Provider.Delete(ctx, instance.ProviderID); err != nil {
		return fmt.Errorf("Delete of suspended machine %s failed with %s: a sleeping machine past its pool's deleteAfter must be deletable without waking it", instance.ProviderID, describe(err))
	}
	if _, err := h.Provider.Get(ctx, instance.ProviderID); !provider.IsNotFound(err) {
		return fmt.Errorf("Get of suspended machine %s after its Delete answered %s, want an error of kind NotFound", instance.ProviderID, describe(err))
	}
	if machines, err := machinesOf(ctx, h.Provider, instance.ClaimName()); err != nil {
		return err
	} else if len(machines) > 0 {
		return fmt.Errorf("List still answers %s for claim %s after its suspended machine was deleted", ids(machines), instance.ClaimName())
	}
	return nil
}

// foreignMachine makes a running machine of the other cluster.
func foreignMachine(ctx context.Context, h Harness, label string) (*provider.Instance, error) {
	theirs, _, err := newClaim(ctx, h, label)
	if err != nil {
		return nil, err
	}
	foreign, err := create(ctx, h.Foreign, theirs)
	if err != nil {
		return nil, fmt.Errorf("making a machine of another cluster: %w", err)
	}
	return foreign, nil
}

func checkSuspendForeign(ctx context.Context, h Harness) error {
	power, err := powerOf(ctx, h.Provider)
	if err != nil {
		return err
	}
	foreign, err := foreignMachine(ctx, h, "foreign-sleep")
	if err != nil {
		return err
	}
	suspendErr := power.Suspend(ctx, foreign.ProviderID)
	after, err := h.Foreign.Get(ctx, foreign.ProviderID)
	if err != nil {
		return fmt.Errorf("Get of the other cluster's machine %s after the refused Suspend: %w", foreign.ProviderID, err)
	}
	if after.State == provider.InstanceSuspended {
		return fmt.Errorf("Suspend stopped machine %s, which carries no %s=%s tag (its tags: %v): a machine without our cluster tag must never be stopped", foreign.ProviderID, v1alpha1.TagCluster, h.ClusterName, foreign.Tags)
	}
	if suspendErr == nil {
		return fmt.Errorf("Suspend of machine %s, which carries no %s=%s tag, answered success: it must refuse with a Terminal error", foreign.ProviderID, v1alpha1.TagCluster, h.ClusterName)
	}
	if KindOf(suspendErr) != Terminal {
		return fmt.Errorf("Suspend of machine %s of another cluster failed with a %s error, want Terminal (retrying cannot help): %v", foreign.ProviderID, KindOf(suspendErr), suspendErr)
	}
	return nil
}

// checkResumeForeign asks our provider to start the other cluster's
// machine. When the other cluster's provider can suspend it, it is asleep
// first, so that a Resume that starts it is seen; otherwise it is running
// and only the refusal is checked.
func checkResumeForeign(ctx context.Context, h Harness) error {
	power, err := powerOf(ctx, h.Provider)
	if err != nil {
		return err
	}
	foreign, err := foreignMachine(ctx, h, "foreign-wake")
	if err != nil {
		return err
	}
	asleep := false
	if theirs, err := powerOf(ctx, h.Foreign); err == nil {
		if err := theirs.Suspend(ctx, foreign.ProviderID); err != nil {
			return fmt.Errorf("the other cluster's provider suspending its own machine %s: %w", foreign.ProviderID, err)
		}
		if _, err := awaitState(ctx, h.Foreign, foreign.ProviderID, provider.InstanceSuspended, false); err != nil {
			return fmt.Errorf("the other cluster's provider suspended its machine %s: %w", foreign.ProviderID, err)
		}
		asleep = true
	}
	resumeErr := power.Resume(ctx, foreign.ProviderID)
	if asleep {
		after, err := h.Foreign.Get(ctx, foreign.ProviderID)
		if err != nil {
			return fmt.Errorf("Get of the other cluster's machine %s after the refused Resume: %w", foreign.ProviderID, err)
		}
		if after.State != provider.InstanceSuspended {
			return fmt.Errorf("Resume started machine %s (now %q), which carries no %s=%s tag (its tags: %v): a machine without our cluster tag must never be started", foreign.ProviderID, after.State, v1alpha1.TagCluster, h.ClusterName, foreign.Tags)
		}
	}
	if resumeErr == nil {
		return fmt.Errorf("Resume of machine %s, which carries no %s=%s tag, answered success: it must refuse with a Terminal error", foreign.ProviderID, v1alpha1.TagCluster, h.ClusterName)
	}
	if KindOf(resumeErr) != Terminal {
		return fmt.Errorf("Resume of machine %s of another cluster failed with a %s error, want Terminal (retrying cannot help): %v", foreign.ProviderID, KindOf(resumeErr), resumeErr)
	}
	return nil
}

func checkPowerUnknown(ctx context.Context, h Harness) error {
	power, err := powerOf(ctx, h.Provider)
	if err != nil {
		return err
	}
	if err := power.Suspend(ctx, h.UnknownProviderID); !provider.IsNotFound(err) {
		return fmt.Errorf("Suspend of unknown machine %s answered %s, want an error of kind NotFound", h.UnknownProviderID, describe(err))
	}
	if err := power.Resume(ctx, h.UnknownProviderID); !provider.IsNotFound(err) {
		return fmt.Errorf("Resume of unknown machine %s answered %s, want an error of kind NotFound", h.UnknownProviderID, describe(err))
	}
	return nil
}
