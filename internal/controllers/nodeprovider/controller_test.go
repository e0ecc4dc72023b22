package nodeprovider

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
)

// One API server for the package.
var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

// listingProvider is a test double of provider.Provider whose List
// answers, or fails with the error set.
type listingProvider struct {
	mu      sync.Mutex
	listErr error
	lists   int
}

func (p *listingProvider) List(context.Context) ([]*provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lists++
	return nil, p.listErr
}

func (p *listingProvider) Create(context.Context, *v1alpha1.NodeClaim, provider.CreateOptions) (*provider.Instance, error) {
	return nil, errors.New("not used")
}
func (p *listingProvider) Delete(context.Context, string) error { return errors.New("not used") }
func (p *listingProvider) Get(context.Context, string) (*provider.Instance, error) {
	return nil, errors.New("not used")
}
func (p *listingProvider) Shapes(context.Context, *v1alpha1.NodePool) ([]provider.Shape, error) {
	return nil, nil
}

// builder builds the provider, or fails with the error set.
type builder struct {
	provider *listingProvider
	err      error
}

func (b *builder) For(context.Context, *v1alpha1.NodeProvider) (provider.Provider, error) {
	if b.err != nil {
		return nil, b.err
	}
	return b.provider, nil
}

func TestNodeProviderReadySaysWhetherItsAPICanBeUsed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nodeProvider := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "status"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &v1alpha1.SimulatedSettings{}},
	}
	g.Expect(env.Client.Create(ctx, nodeProvider)).To(Succeed())
	defer env.Client.Delete(ctx, nodeProvider)
	machines := &listingProvider{}
	providers := &builder{provider: machines}
	recorder := events.NewFakeRecorder(100)
	c := &Controller{Kube: env.Client, Providers: providers, Recorder: recorder}
	ready := func() (*metav1.Condition, reconcile.Result) {
		result, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nodeProvider)})
		g.Expect(err).NotTo(HaveOccurred())
		fresh := &v1alpha1.NodeProvider{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(nodeProvider), fresh)).To(Succeed())
		for i := range fresh.Status.Conditions {
			if fresh.Status.Conditions[i].Type == v1alpha1.ConditionReady {
				return &fresh.Status.Conditions[i], result
			}
		}
		return nil, result
	}

	condition, result := ready()
	g.Expect(condition).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonReady)))
	g.Expect(machines.lists).To(Equal(1), "the API is asked")
	g.Expect(result.RequeueAfter).To(Equal(recheck))

	for _, tc := range []struct {
		name            string
		buildErr        error
		listErr         error
		reason, message string
	}{
		{"settings that do not build a provider", errors.New("zone lpg1 is not one of rma1"), nil, v1alpha1.ReasonInvalidConfiguration, "zone lpg1"},
		{"an API that refuses connections", nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, v1alpha1.ReasonUnreachable, "connection refused"},
		{"an API that does not answer in time", nil, context.DeadlineExceeded, v1alpha1.ReasonUnreachable, "listing machines"},
		{"an API that answers with an error", nil, errors.New("401 invalid token"), v1alpha1.ReasonAPIError, "401 invalid token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			providers.err, machines.listErr = tc.buildErr, tc.listErr
			condition, result := ready()
			g.Expect(condition.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition.Reason).To(Equal(tc.reason))
			g.Expect(condition.Message).To(ContainSubstring(tc.message))
			g.Expect(result.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", recheck)))
		})
	}

	providers.err, machines.listErr = nil, nil
	condition, _ = ready()
	g.Expect(condition.Status).To(Equal(metav1.ConditionTrue), "it recovers")
	var warnings []string
	for len(recorder.Events) > 0 {
		if event := <-recorder.Events; strings.HasPrefix(event, corev1.EventTypeWarning) {
			warnings = append(warnings, event)
		}
	}
	// Unreachable twice in a row is one warning.
	g.Expect(warnings).To(HaveLen(3))
}

// problemProvider reports problems, as the Proxmox provider does of a VM
// locked mid-clone.
type problemProvider struct {
	listingProvider
	problems []provider.Problem
}

func (p *problemProvider) Problems() []provider.Problem { return p.problems }

type problemBuilder struct{ provider *problemProvider }

func (b *problemBuilder) For(context.Context, *v1alpha1.NodeProvider) (provider.Provider, error) {
	return b.provider, nil
}

func TestNodeProviderDegradedShowsTheProvidersProblemsWithAnEvent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nodeProvider := &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "degraded"},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &v1alpha1.SimulatedSettings{}},
	}
	g.Expect(env.Client.Create(ctx, nodeProvider)).To(Succeed())
	defer env.Client.Delete(ctx, nodeProvider)
	machines := &problemProvider{}
	recorder := events.NewFakeRecorder(100)
	c := &Controller{Kube: env.Client, Providers: &problemBuilder{provider: machines}, Recorder: recorder}
	degraded := func() *metav1.Condition {
		_, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nodeProvider)})
		g.Expect(err).NotTo(HaveOccurred())
		fresh := &v1alpha1.NodeProvider{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(nodeProvider), fresh)).To(Succeed())
		for i := range fresh.Status.Conditions {
			if fresh.Status.Conditions[i].Type == v1alpha1.ConditionDegraded {
				return &fresh.Status.Conditions[i]
			}
		}
		return nil
	}
	g.Expect(degraded()).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse)))

	machines.problems = []provider.Problem{{Reason: "StaleLock", Message: "VM 1000 on pve1 has held the Proxmox lock \"clone\""}}
	condition := degraded()
	g.Expect(condition.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(condition.Reason).To(Equal("StaleLock"))
	g.Expect(condition.Message).To(ContainSubstring("VM 1000 on pve1"))
	degraded()
	var warnings []string
	for len(recorder.Events) > 0 {
		if event := <-recorder.Events; strings.Contains(event, "StaleLock") {
			warnings = append(warnings, event)
		}
	}
	g.Expect(warnings).To(HaveLen(1), "one event per new problem")

	machines.problems = nil
	g.Expect(degraded().Status).To(Equal(metav1.ConditionFalse), "it clears")
}
