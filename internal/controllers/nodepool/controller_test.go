package nodepool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
)

// One API server for the package, and a client that reads through a cache
// with the controllers' indexes.
var (
	env    *testenv.Environment
	cached client.Client
)

func TestMain(m *testing.M) {
	testenv.RunMain(m, testenv.Options{}, &env, func(ctx context.Context, env *testenv.Environment) (err error) {
		cached, err = env.CachedClient(ctx, index.Setup)
		return err
	})
}

// shapesProvider is a test double of provider.Provider that offers a
// catalog, or fails with an injected error.
type shapesProvider struct {
	mu     sync.Mutex
	shapes []provider.Shape
	err    error
	// ownJoin, when set, is what makes its machines join instead of
	// claimscale's user data (provider.OwnJoiner).
	ownJoin string
}

func (p *shapesProvider) OwnJoin() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ownJoin
}

func (p *shapesProvider) set(shapes []provider.Shape, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shapes, p.err = shapes, err
}

func (p *shapesProvider) Shapes(context.Context, *v1alpha1.NodePool) ([]provider.Shape, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shapes, p.err
}

func (p *shapesProvider) Create(context.Context, *v1alpha1.NodeClaim, provider.CreateOptions) (*provider.Instance, error) {
	return nil, errors.New("not used")
}
func (p *shapesProvider) Delete(context.Context, string) error { return errors.New("not used") }
func (p *shapesProvider) Get(context.Context, string) (*provider.Instance, error) {
	return nil, errors.New("not used")
}
func (p *shapesProvider) List(context.Context) ([]*provider.Instance, error) { return nil, nil }

// resolver hands out the provider, or the error set.
type resolver struct {
	provider *shapesProvider
	err      error
}

func (r *resolver) ForProviderName(context.Context, string) (provider.Provider, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.provider, nil
}

// templateVerdict is a test double of the template check.
type templateVerdict struct{ err error }

func (v *templateVerdict) Check(context.Context, *v1alpha1.NodePool, scheduling.Shapes) error {
	return v.err
}

var c2 = provider.Shape{Name: "c2", Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}, Price: 0.1}

type scenario struct {
	t        *testing.T
	g        *WithT
	ctx      context.Context
	pool     *v1alpha1.NodePool
	provider *shapesProvider
	resolver *resolver
	template *templateVerdict
	recorder *events.FakeRecorder
	c        *Controller
}

func newScenario(t *testing.T, name string) *scenario {
	g := NewWithT(t)
	ctx := context.Background()
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "test"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2"}}},
		},
	}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	machines := &shapesProvider{shapes: []provider.Shape{c2}}
	s := &scenario{
		t: t, g: g, ctx: ctx, pool: pool, provider: machines,
		resolver: &resolver{provider: machines}, template: &templateVerdict{},
		recorder: events.NewFakeRecorder(100),
	}
	s.c = &Controller{Kube: cached, Providers: s.resolver, Templates: s.template, Recorder: s.recorder}
	t.Cleanup(func() {
		var claims v1alpha1.NodeClaimList
		_ = env.Client.List(ctx, &claims)
		for i := range claims.Items {
			claim := &claims.Items[i]
			if claim.Spec.NodePoolRef.Name == name {
				patch := client.MergeFrom(claim.DeepCopy())
				controllerutil.RemoveFinalizer(claim, v1alpha1.TerminationFinalizer)
				_ = env.Client.Patch(ctx, claim, patch)
				_ = env.Client.Delete(ctx, claim)
			}
		}
		_ = env.Client.Delete(ctx, pool)
	})
	return s
}

// claim writes a claim of the pool, with the capacity its machine
// reported (nil: none yet), and waits for the cache to see it.
func (s *scenario) claim(name, cpu, memory string, capacity corev1.ResourceList) *v1alpha1.NodeClaim {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.TerminationFinalizer}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse(cpu), Memory: resource.MustParse(memory)},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, claim)).To(Succeed())
	if capacity != nil {
		claim.Status.Capacity = capacity
		s.g.Expect(env.Client.Status().Update(s.ctx, claim)).To(Succeed())
	}
	s.waitForCache(claim)
	return claim
}

func (s *scenario) waitForCache(claim *v1alpha1.NodeClaim) {
	s.t.Helper()
	s.g.Eventually(func() string {
		seen := &v1alpha1.NodeClaim{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(claim), seen)
		return seen.ResourceVersion
	}).Should(Equal(claim.ResourceVersion))
}

// reconcile runs the controller once, once the cache has the pool as the
// API server has it, and returns the pool as written.
func (s *scenario) reconcile() (*v1alpha1.NodePool, reconcile.Result) {
	s.t.Helper()
	fresh := &v1alpha1.NodePool{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(s.pool), fresh)).To(Succeed())
	s.g.Eventually(func() string {
		seen := &v1alpha1.NodePool{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(s.pool), seen)
		return seen.ResourceVersion
	}).Should(Equal(fresh.ResourceVersion))
	result, err := s.c.Reconcile(s.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s.pool)})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(s.pool), fresh)).To(Succeed())
	return fresh, result
}

func conditionOf(pool *v1alpha1.NodePool, conditionType string) *metav1.Condition {
	for i := range pool.Status.Conditions {
		if pool.Status.Conditions[i].Type == conditionType {
			return &pool.Status.Conditions[i]
		}
	}
	return nil
}

func TestPoolStatusCountsLiveClaimsAndTheirCapacity(t *testing.T) {
	s := newScenario(t, "resources")
	// A machine's reported capacity wins over its shape's.
	s.claim("resources-a", "2", "4Gi", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1800m"), corev1.ResourceMemory: resource.MustParse("3Gi")})
	s.claim("resources-b", "2", "4Gi", nil)
	going := s.claim("resources-c", "8", "32Gi", nil)
	s.g.Expect(env.Client.Delete(s.ctx, going)).To(Succeed())
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(going), going)).To(Succeed())
	s.waitForCache(going)

	pool, result := s.reconcile()
	s.g.Expect(pool.Status.Nodes).To(Equal(int32(2)), "a claim being deleted does not count")
	s.g.Expect(pool.Status.Resources.Cpu().String()).To(Equal("3800m"))
	s.g.Expect(pool.Status.Resources.Memory().String()).To(Equal("7Gi"))
	s.g.Expect(conditionOf(pool, v1alpha1.ConditionReady)).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonReady)))
	s.g.Expect(conditionOf(pool, v1alpha1.ConditionProviderReady)).To(HaveField("Status", metav1.ConditionTrue))
	s.g.Expect(result.RequeueAfter).To(Equal(shapesRefresh))
}

func TestPoolReadyReasonsSayWhatKeepsThePoolFromMakingNodes(t *testing.T) {
	s := newScenario(t, "reasons")
	for _, tc := range []struct {
		name          string
		arrange       func()
		reason        string
		message       string
		providerReady metav1.ConditionStatus
	}{
		{"a NodeProvider that does not exist", func() { s.resolver.err = &providerresolver.ProviderNotFoundError{Provider: "test"} },
			v1alpha1.ReasonProviderNotFound, "NodeProvider test does not exist", metav1.ConditionFalse},
		{"a provider that cannot be built", func() { s.resolver.err = errors.New("credentials Secret has no key token") },
			v1alpha1.ReasonProviderUnavailable, "credentials Secret has no key token", metav1.ConditionFalse},
		{"a provider API that does not answer", func() { s.provider.set(nil, fmt.Errorf("listing flavors: %w", context.DeadlineExceeded)) },
			v1alpha1.ReasonUnreachable, "listing flavors", metav1.ConditionFalse},
		{"a provider API that refuses", func() { s.provider.set(nil, errors.New("403 forbidden")) },
			v1alpha1.ReasonShapesUnavailable, "403 forbidden", metav1.ConditionFalse},
		{"a provider offering none of the shapes", func() { s.provider.set([]provider.Shape{}, nil) },
			v1alpha1.ReasonNoShapes, "offers none of the pool's shapes", metav1.ConditionFalse},
		{"a template no node can satisfy", func() { s.template.err = errors.New("startup taint blocks every DaemonSet") },
			v1alpha1.ReasonTemplateInvalid, "startup taint blocks every DaemonSet", metav1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.resolver.err, s.template.err = nil, nil
			s.provider.set([]provider.Shape{c2}, nil)
			tc.arrange()
			pool, result := s.reconcile()
			ready := conditionOf(pool, v1alpha1.ConditionReady)
			s.g.Expect(ready).NotTo(BeNil())
			s.g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			s.g.Expect(ready.Reason).To(Equal(tc.reason))
			s.g.Expect(ready.Message).To(ContainSubstring(tc.message))
			s.g.Expect(conditionOf(pool, v1alpha1.ConditionProviderReady).Status).To(Equal(tc.providerReady))
			s.g.Expect(result.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<", shapesRefresh)), "looked at again on a backoff")
		})
	}
	s.resolver.err, s.template.err = nil, nil
	s.provider.set([]provider.Shape{c2}, nil)
	pool, _ := s.reconcile()
	s.g.Expect(conditionOf(pool, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue), "the pool recovers")
	var warnings int
	for len(s.recorder.Events) > 0 {
		if strings.HasPrefix(<-s.recorder.Events, corev1.EventTypeWarning) {
			warnings++
		}
	}
	s.g.Expect(warnings).To(Equal(6), "one warning per new reason")
}

// A pool whose template.bootstrap its provider's machines would never run
// (Cluster API's bootstrap provider renders the join) says so rather than
// making nodes that silently ignore it.
func TestPoolWithABootstrapItsProviderIgnoresIsNotReady(t *testing.T) {
	s := newScenario(t, "ownjoin")
	s.g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pool := &v1alpha1.NodePool{}
		if err := env.Client.Get(s.ctx, client.ObjectKeyFromObject(s.pool), pool); err != nil {
			return err
		}
		pool.Spec.Template.Bootstrap = &v1alpha1.Bootstrap{Method: v1alpha1.JoinKubeadm}
		return env.Client.Update(s.ctx, pool)
	})).To(Succeed())

	pool, _ := s.reconcile()
	s.g.Expect(conditionOf(pool, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue), "a provider that delivers user data runs it")

	s.provider.mu.Lock()
	s.provider.ownJoin = "the Cluster API bootstrap provider"
	s.provider.mu.Unlock()
	pool, _ = s.reconcile()
	ready := conditionOf(pool, v1alpha1.ConditionReady)
	s.g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	s.g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonTemplateInvalid))
	s.g.Expect(ready.Message).To(And(ContainSubstring("template.bootstrap is set"), ContainSubstring("the Cluster API bootstrap provider")))
	s.g.Expect(conditionOf(pool, v1alpha1.ConditionProviderReady).Status).To(Equal(metav1.ConditionTrue))
}

func TestPoolStatusIsWrittenOnlyWhenItChanges(t *testing.T) {
	s := newScenario(t, "unchanged")
	first, _ := s.reconcile()
	second, _ := s.reconcile()
	s.g.Expect(second.ResourceVersion).To(Equal(first.ResourceVersion))
}

// The pool's reconcile sets its cost, claims-by-phase and limit-usage
// gauges from its claims, and a deleted pool's series go away.
func TestPoolReconcileSetsCostPhaseAndLimitMetrics(t *testing.T) {
	s := newScenario(t, "metered")
	two := int32(2)
	patch := client.MergeFrom(s.pool.DeepCopy())
	s.pool.Spec.Limits = &v1alpha1.Limits{Nodes: &two}
	s.g.Expect(env.Client.Patch(s.ctx, s.pool, patch)).To(Succeed())
	for _, name := range []string{"metered-a", "metered-b"} {
		claim := &v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.NodeClaimSpec{
				NodePoolRef: v1alpha1.NodePoolReference{Name: s.pool.Name},
				Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Price: "0.25"},
			},
		}
		s.g.Expect(env.Client.Create(s.ctx, claim)).To(Succeed())
		s.waitForCache(claim)
	}

	s.reconcile()
	s.g.Expect(testutil.ToFloat64(metrics.NodePoolHourlyCost.WithLabelValues("metered", "c2"))).To(Equal(0.5))
	s.g.Expect(testutil.ToFloat64(metrics.NodeClaimsByPhase.WithLabelValues("metered", metrics.PhaseLaunching))).To(Equal(2.0))
	s.g.Expect(testutil.ToFloat64(metrics.NodePoolLimitUsage.WithLabelValues("metered", "nodes"))).To(Equal(1.0))

	s.g.Expect(env.Client.Delete(s.ctx, s.pool)).To(Succeed())
	s.g.Eventually(func() error {
		return cached.Get(s.ctx, client.ObjectKeyFromObject(s.pool), &v1alpha1.NodePool{})
	}).ShouldNot(Succeed())
	_, err := s.c.Reconcile(s.ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s.pool)})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(metrics.NodePoolHourlyCost.DeleteLabelValues("metered", "c2")).To(BeFalse(), "no cost series of the deleted pool")
	s.g.Expect(metrics.NodePoolLimitUsage.DeleteLabelValues("metered", "nodes")).To(BeFalse(), "no limit series of the deleted pool")
}
