// Package conformance checks a provider.Provider, in-tree or a plugin
// behind the claimscale.provider.v1 protocol, against the contract the
// rest of claimscale relies on: Create is idempotent by claim, the
// ownership tags are on the machine from its create on, List sees only this
// cluster's machines, Delete refuses a machine without our cluster tag and
// takes "already gone" as done, Get of an unknown machine is not-found,
// errors keep their kinds, and Create makes what Shapes promised. A
// provider that can manage power (provider.CanManagePower) is also held to
// the sleep clauses (power.go); one that cannot skips them with a note.
//
// A provider's tests run the kit with Run, giving it a Harness: the
// provider on its test infrastructure (a fake API, a plugin), and a second
// provider on the same infrastructure for another cluster. Each check gets
// a harness of its own.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// Harness is one provider under test.
type Harness struct {
	// Provider is the provider under test, built for ClusterName.
	Provider    provider.Provider
	ClusterName string
	// Foreign is a provider of the same infrastructure built for another
	// cluster: its machines are the ones Provider must not list or delete.
	Foreign provider.Provider
	// Pool is a NodePool Provider serves; claims are made of its shapes.
	Pool *v1alpha1.NodePool
	// UnknownProviderID is a well-formed providerID no machine has.
	UnknownProviderID string
	// ErrorCases are failures the test infrastructure is set up to give,
	// each with the kind of error it must come back as. At least one is
	// required: a kit that checks no error passes every provider.
	ErrorCases []ErrorCase
	// TagsAtCreate returns the ownership markers a machine carried in the
	// call that made it, as the test infrastructure recorded that call (a
	// fake API's request log): a provider that tags in a second call looks
	// the same from outside once Create returns. Without it the kit checks
	// only that the tags are there right after Create; give it whenever
	// the infrastructure can record its calls.
	TagsAtCreate func(ctx context.Context, providerID string) (map[string]string, error)
	// Timeout bounds each check (default one minute).
	Timeout time.Duration
}

// Kind is a provider error kind.
type Kind string

const (
	NotFound             Kind = "NotFound"
	InsufficientCapacity Kind = "InsufficientCapacity"
	Terminal             Kind = "Terminal"
	Retryable            Kind = "Retryable"
	NotSupported         Kind = "NotSupported"
)

// KindOf says which kind err is.
func KindOf(err error) Kind {
	switch {
	case err == nil:
		return ""
	case provider.IsNotFound(err):
		return NotFound
	case provider.IsInsufficientCapacity(err):
		return InsufficientCapacity
	case provider.IsTerminal(err):
		return Terminal
	case provider.IsNotSupported(err):
		return NotSupported
	default:
		return Retryable
	}
}

// ErrorCase is a call that must fail with an error of kind Want.
type ErrorCase struct {
	Name string
	Want Kind
	Call func(ctx context.Context) error
}

// Check is one clause of the contract.
type Check struct {
	Name string
	Run  func(ctx context.Context, h Harness) error
}

// Checks are the clauses of the contract, in the order Run checks them;
// the sleep clauses come last.
func Checks() []Check {
	return append([]Check{
		{"Shapes are well-formed", checkShapes},
		{"Create is idempotent by claim", checkIdempotent},
		{"concurrent Creates of one claim make one machine", checkConcurrent},
		{"Create sets the ownership tags", checkTags},
		{"Create makes the shape Shapes promised", checkShapeMatches},
		{"List returns only this cluster's machines", checkListScoped},
		{"Delete refuses a machine without our cluster tag", checkDeleteForeign},
		{"Delete of a machine already gone is success", checkDeleteGone},
		{"Get of an unknown machine is not-found", checkGetUnknown},
		{"errors keep their kinds", checkErrorKinds},
	}, powerChecks()...)
}

// Run runs every check as a subtest, each with a harness from newHarness
// (which registers its own cleanup with t). A check that does not apply
// (the sleep checks of a provider that cannot manage power) is skipped
// with its note.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, check := range Checks() {
		t.Run(check.Name, func(t *testing.T) {
			err := RunCheck(t.Context(), check, newHarness(t))
			var skipped *Skipped
			switch {
			case errors.As(err, &skipped):
				t.Skip(skipped.Note)
			case err != nil:
				t.Error(err)
			}
		})
	}
}

// RunCheck runs one check and removes the machines it made.
func RunCheck(ctx context.Context, check Check, h Harness) error {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := check.Run(ctx, h)
	cleanup(context.WithoutCancel(ctx), h)
	return err
}

// cleanup deletes what the check made, through each cluster's own provider.
func cleanup(ctx context.Context, h Harness) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, p := range []provider.Provider{h.Provider, h.Foreign} {
		if p == nil {
			continue
		}
		instances, _ := p.List(ctx)
		for _, i := range instances {
			_ = p.Delete(ctx, i.ProviderID)
		}
	}
}

// newClaim is a claim of the pool's first shape (or of shape, when set).
func newClaim(ctx context.Context, h Harness, label string) (*v1alpha1.NodeClaim, provider.Shape, error) {
	shapes, err := h.Provider.Shapes(ctx, h.Pool)
	if err != nil {
		return nil, provider.Shape{}, fmt.Errorf("Shapes of pool %s: %w", h.Pool.Name, err)
	}
	if len(shapes) == 0 {
		return nil, provider.Shape{}, fmt.Errorf("Shapes of pool %s answered none", h.Pool.Name)
	}
	shape := shapes[0]
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("conformance-%s-%04x", label, rand.IntN(1<<16))},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: h.Pool.Name},
			Shape: v1alpha1.ClaimShape{
				Name: shape.Name, CPU: shape.Capacity[corev1.ResourceCPU], Memory: shape.Capacity[corev1.ResourceMemory],
			},
		},
	}
	return claim, shape, nil
}

// create makes the claim's machine, asking again while the provider says
// it is still being made, as the claim lifecycle does.
func create(ctx context.Context, p provider.Provider, claim *v1alpha1.NodeClaim) (*provider.Instance, error) {
	instance, err := p.Create(ctx, claim, provider.CreateOptions{})
	for provider.IsInProgress(err) {
		wait := time.NewTimer(max(provider.RetryAfter(err), 100*time.Millisecond))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil, fmt.Errorf("Create of claim %s was still in progress when the check's time ran out: %w", claim.Name, err)
		case <-wait.C:
		}
		instance, err = p.Create(ctx, claim, provider.CreateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("Create of claim %s: %w", claim.Name, err)
	}
	if instance == nil || instance.ProviderID == "" {
		return nil, fmt.Errorf("Create of claim %s answered no machine (or one without a providerID)", claim.Name)
	}
	return instance, nil
}

// machinesOf lists the machines p sees for a claim.
func machinesOf(ctx context.Context, p provider.Provider, claim string) ([]*provider.Instance, error) {
	instances, err := p.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("List: %w", err)
	}
	var out []*provider.Instance
	for _, i := range instances {
		if i.ClaimName() == claim {
			out = append(out, i)
		}
	}
	return out, nil
}

func checkShapes(ctx context.Context, h Harness) error {
	shapes, err := h.Provider.Shapes(ctx, h.Pool)
	if err != nil {
		return fmt.Errorf("Shapes of pool %s: %w", h.Pool.Name, err)
	}
	if len(shapes) == 0 {
		return fmt.Errorf("Shapes of pool %s answered none", h.Pool.Name)
	}
	seen := map[string]bool{}
	for _, s := range shapes {
		cpu, memory := s.Capacity[corev1.ResourceCPU], s.Capacity[corev1.ResourceMemory]
		switch {
		case s.Name == "":
			return fmt.Errorf("Shapes answered a shape without a name")
		case seen[s.Name]:
			return fmt.Errorf("Shapes answered shape %s twice", s.Name)
		case cpu.Sign() <= 0 || memory.Sign() <= 0:
			return fmt.Errorf("shape %s has cpu %s and memory %s: both must be greater than zero", s.Name, cpu.String(), memory.String())
		case s.Price < 0:
			return fmt.Errorf("shape %s has a negative price %v", s.Name, s.Price)
		}
		seen[s.Name] = true
	}
	return nil
}

func checkIdempotent(ctx context.Context, h Harness) error {
	claim, _, err := newClaim(ctx, h, "idem")
	if err != nil {
		return err
	}
	first, err := create(ctx, h.Provider, claim)
	if err != nil {
		return err
	}
	again, err := create(ctx, h.Provider, claim)
	if err != nil {
		return fmt.Errorf("a repeated Create of claim %s failed, where it must answer the machine it made: %w", claim.Name, err)
	}
	if again.ProviderID != first.ProviderID {
		return fmt.Errorf("Create is not idempotent: a repeated Create of claim %s made machine %s, after %s; it must answer the machine the claim already has", claim.Name, again.ProviderID, first.ProviderID)
	}
	machines, err := machinesOf(ctx, h.Provider, claim.Name)
	if err != nil {
		return err
	}
	if len(machines) != 1 {
		return fmt.Errorf("Create is not idempotent: after two Creates of claim %s, List shows %d machines for it (%s), want 1", claim.Name, len(machines), ids(machines))
	}
	return nil
}

func checkConcurrent(ctx context.Context, h Harness) error {
	claim, _, err := newClaim(ctx, h, "conc")
	if err != nil {
		return err
	}
	const callers = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created = map[string]bool{}
		errs    []error
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			instance, err := h.Provider.Create(ctx, claim, provider.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && KindOf(err) != Retryable:
				errs = append(errs, err)
			case err == nil:
				created[instance.ProviderID] = true
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("concurrent Creates of claim %s failed with a non-retryable error: %w", claim.Name, errors.Join(errs...))
	}
	if len(created) > 1 {
		return fmt.Errorf("Create is not idempotent under concurrency: %d concurrent Creates of claim %s answered %d machines (%s), want one", callers, claim.Name, len(created), strings.Join(keys(created), ", "))
	}
	// A caller that lost a race may have been told to retry: the retry
	// must find the one machine.
	instance, err := create(ctx, h.Provider, claim)
	if err != nil {
		return err
	}
	machines, err := machinesOf(ctx, h.Provider, claim.Name)
	if err != nil {
		return err
	}
	if len(machines) != 1 || machines[0].ProviderID != instance.ProviderID {
		return fmt.Errorf("Create is not idempotent under concurrency: after %d concurrent Creates of claim %s, List shows %d machines for it (%s), want exactly %s", callers, claim.Name, len(machines), ids(machines), instance.ProviderID)
	}
	return nil
}

func checkTags(ctx context.Context, h Harness) error {
	claim, _, err := newClaim(ctx, h, "tags")
	if err != nil {
		return err
	}
	instance, err := create(ctx, h.Provider, claim)
	if err != nil {
		return err
	}
	want := provider.Tags(h.ClusterName, claim)
	if missing := missingTags(instance.Tags, want); missing != "" {
		return fmt.Errorf("the machine Create answered for claim %s lacks ownership tags (%s): they must be set in the call that makes it", claim.Name, missing)
	}
	if h.TagsAtCreate != nil {
		atCreate, err := h.TagsAtCreate(ctx, instance.ProviderID)
		if err != nil {
			return fmt.Errorf("reading what machine %s carried when it was made: %w", instance.ProviderID, err)
		}
		if missing := missingTags(atCreate, want); missing != "" {
			return fmt.Errorf("machine %s of claim %s was made without its ownership tags (%s) and tagged by a later call: a crash between the two leaves a machine nobody owns; set them in the call that makes it", instance.ProviderID, claim.Name, missing)
		}
	}
	// Read back at once: a machine without them can be neither listed nor
	// deleted.
	got, err := h.Provider.Get(ctx, instance.ProviderID)
	if err != nil {
		return fmt.Errorf("Get of machine %s right after its Create: %w", instance.ProviderID, err)
	}
	if missing := missingTags(got.Tags, want); missing != "" {
		return fmt.Errorf("machine %s of claim %s, read back right after its Create, lacks ownership tags (%s): they must be set in the call that makes it", instance.ProviderID, claim.Name, missing)
	}
	return nil
}

func checkShapeMatches(ctx context.Context, h Harness) error {
	claim, shape, err := newClaim(ctx, h, "shape")
	if err != nil {
		return err
	}
	instance, err := create(ctx, h.Provider, claim)
	if err != nil {
		return err
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		promised := shape.Capacity[name]
		made, ok := instance.Capacity[name]
		if !ok {
			return fmt.Errorf("machine %s of shape %s reports no %s capacity", instance.ProviderID, shape.Name, name)
		}
		if made.Cmp(promised) < 0 {
			return fmt.Errorf("machine %s of shape %s has %s %s, less than the %s Shapes promised", instance.ProviderID, shape.Name, name, made.String(), promised.String())
		}
	}
	return nil
}

func checkListScoped(ctx context.Context, h Harness) error {
	ours, _, err := newClaim(ctx, h, "ours")
	if err != nil {
		return err
	}
	theirs, _, err := newClaim(ctx, h, "theirs")
	if err != nil {
		return err
	}
	mine, err := create(ctx, h.Provider, ours)
	if err != nil {
		return err
	}
	foreign, err := create(ctx, h.Foreign, theirs)
	if err != nil {
		return fmt.Errorf("making a machine of another cluster: %w", err)
	}
	instances, err := h.Provider.List(ctx)
	if err != nil {
		return fmt.Errorf("List: %w", err)
	}
	found := false
	for _, i := range instances {
		if i.ProviderID == foreign.ProviderID {
			return fmt.Errorf("List answered machine %s of another cluster (tags %v): it must answer only machines tagged %s=%s", i.ProviderID, i.Tags, v1alpha1.TagCluster, h.ClusterName)
		}
		if i.Tags[v1alpha1.TagCluster] != h.ClusterName {
			return fmt.Errorf("List answered machine %s whose tags %v lack %s=%s", i.ProviderID, i.Tags, v1alpha1.TagCluster, h.ClusterName)
		}
		found = found || i.ProviderID == mine.ProviderID
	}
	if !found {
		return fmt.Errorf("List does not answer machine %s, which Create just made for claim %s", mine.ProviderID, ours.Name)
	}
	return nil
}

func checkDeleteForeign(ctx context.Context, h Harness) error {
	theirs, _, err := newClaim(ctx, h, "foreign")
	if err != nil {
		return err
	}
	foreign, err := create(ctx, h.Foreign, theirs)
	if err != nil {
		return fmt.Errorf("making a machine of another cluster: %w", err)
	}
	deleteErr := h.Provider.Delete(ctx, foreign.ProviderID)
	if _, err := h.Foreign.Get(ctx, foreign.ProviderID); err != nil {
		if provider.IsNotFound(err) {
			return fmt.Errorf("Delete removed machine %s, which carries no %s=%s tag (its tags: %v): a machine without our cluster tag must never be deleted", foreign.ProviderID, v1alpha1.TagCluster, h.ClusterName, foreign.Tags)
		}
		return fmt.Errorf("Get of the other cluster's machine %s after the refused Delete: %w", foreign.ProviderID, err)
	}
	if deleteErr == nil {
		return fmt.Errorf("Delete of machine %s, which carries no %s=%s tag, answered success: it must refuse with a Terminal error", foreign.ProviderID, v1alpha1.TagCluster, h.ClusterName)
	}
	if KindOf(deleteErr) != Terminal {
		return fmt.Errorf("Delete of machine %s of another cluster failed with a %s error, want Terminal (retrying cannot help): %v", foreign.ProviderID, KindOf(deleteErr), deleteErr)
	}
	return nil
}

func checkDeleteGone(ctx context.Context, h Harness) error {
	claim, _, err := newClaim(ctx, h, "gone")
	if err != nil {
		return err
	}
	instance, err := create(ctx, h.Provider, claim)
	if err != nil {
		return err
	}
	if err := h.Provider.Delete(ctx, instance.ProviderID); err != nil {
		return fmt.Errorf("Delete of machine %s: %w", instance.ProviderID, err)
	}
	if err := h.Provider.Delete(ctx, instance.ProviderID); err != nil {
		return fmt.Errorf("a second Delete of machine %s, already deleted, failed with %v: a machine already gone is success", instance.ProviderID, err)
	}
	if _, err := h.Provider.Get(ctx, instance.ProviderID); !provider.IsNotFound(err) {
		return fmt.Errorf("Get of deleted machine %s answered %v, want an error of kind NotFound", instance.ProviderID, describe(err))
	}
	if machines, err := machinesOf(ctx, h.Provider, claim.Name); err != nil {
		return err
	} else if len(machines) > 0 {
		return fmt.Errorf("List still answers %s for claim %s after its machine was deleted", ids(machines), claim.Name)
	}
	return nil
}

func checkGetUnknown(ctx context.Context, h Harness) error {
	_, err := h.Provider.Get(ctx, h.UnknownProviderID)
	if !provider.IsNotFound(err) {
		return fmt.Errorf("Get of unknown machine %s answered %s, want an error of kind NotFound", h.UnknownProviderID, describe(err))
	}
	return nil
}

func checkErrorKinds(ctx context.Context, h Harness) error {
	if len(h.ErrorCases) == 0 {
		return errors.New("the harness gives no ErrorCases: set up the test infrastructure to fail at least one call (a claim no host can hold, a refused setting) and say which kind of error each must come back as")
	}
	var failures []string
	for _, c := range h.ErrorCases {
		err := c.Call(ctx)
		if got := KindOf(err); got != c.Want {
			failures = append(failures, fmt.Sprintf("%s: answered %s, want an error of kind %s", c.Name, describe(err), c.Want))
		}
	}
	if len(failures) > 0 {
		return errors.New("errors lose their kind: " + strings.Join(failures, "; "))
	}
	return nil
}

func describe(err error) string {
	if err == nil {
		return "success"
	}
	return fmt.Sprintf("a %s error (%v)", KindOf(err), err)
}

func missingTags(have, want map[string]string) string {
	var missing []string
	for k, v := range want {
		if have[k] != v {
			missing = append(missing, fmt.Sprintf("%s=%s, has %q", k, v, have[k]))
		}
	}
	sort.Strings(missing)
	return strings.Join(missing, "; ")
}

func ids(instances []*provider.Instance) string {
	out := make([]string, 0, len(instances))
	for _, i := range instances {
		out = append(out, i.ProviderID)
	}
	return strings.Join(out, ", ")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
