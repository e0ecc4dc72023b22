package nodeclaim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/index"
	"github.com/claimscale/claimscale/internal/providerresolver"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/pkg/provider"
)

// One API server for the package, and a client that reads through an
// informer cache with the controllers' indexes, as in the manager.
var (
	env    *testenv.Environment
	cached client.Client
)

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	testenv.RunMain(m, testenv.Options{}, &env, func(ctx context.Context, env *testenv.Environment) (err error) {
		cached, err = env.CachedClient(ctx, index.Setup)
		return err
	})
}

// recordingProvider is a test double of provider.Provider: it keeps
// machines in memory, records each call, and returns an injected error
// from the next call of an operation.
type recordingProvider struct {
	mu       sync.Mutex
	machines map[string]*provider.Instance // by providerID
	userData map[string][]byte             // by claim name
	calls    []string
	next     map[string]error // by operation
	// providerIDs are what Create answers for these claims instead of
	// test://<claim>.
	providerIDs map[string]string
}

func newRecordingProvider() *recordingProvider {
	return &recordingProvider{machines: map[string]*provider.Instance{}, userData: map[string][]byte{}, next: map[string]error{}, providerIDs: map[string]string{}}
}

// failNext makes the next call of an operation (create, delete) fail.
func (p *recordingProvider) failNext(operation string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next[operation] = err
}

func (p *recordingProvider) call(operation, subject string) error {
	p.calls = append(p.calls, operation+" "+subject)
	err := p.next[operation]
	delete(p.next, operation)
	return err
}

func (p *recordingProvider) recorded() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

func (p *recordingProvider) Create(_ context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.call("create", claim.Name); err != nil {
		return nil, err
	}
	id := "test://" + claim.Name
	if fixed, ok := p.providerIDs[claim.Name]; ok {
		id = fixed
	}
	if machine, ok := p.machines[id]; ok {
		return machine, nil
	}
	p.machines[id] = &provider.Instance{
		ProviderID: id, Name: claim.Name, State: provider.InstanceRunning,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		Tags:     provider.Tags("test", claim),
	}
	p.userData[claim.Name] = opts.UserData
	return p.machines[id], nil
}

func (p *recordingProvider) Delete(_ context.Context, providerID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.call("delete", providerID); err != nil {
		return err
	}
	delete(p.machines, providerID)
	return nil
}

func (p *recordingProvider) Get(_ context.Context, providerID string) (*provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if machine, ok := p.machines[providerID]; ok {
		return machine, nil
	}
	return nil, provider.NewNotFound("machine %s", providerID)
}

func (p *recordingProvider) List(context.Context) ([]*provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.call("list", ""); err != nil {
		return nil, err
	}
	var all []*provider.Instance
	for _, machine := range p.machines {
		all = append(all, machine)
	}
	return all, nil
}

func (p *recordingProvider) Shapes(context.Context, *v1alpha1.NodePool) ([]provider.Shape, error) {
	return nil, nil
}

// resolver hands out the one provider, or says the NodeProvider is gone.
// wrapped, when set, is handed out instead: a double around provider.
type resolver struct {
	provider *recordingProvider
	wrapped  provider.Provider
	gone     bool
}

func (r *resolver) ProviderNameOf(context.Context, *v1alpha1.NodeClaim) (string, error) {
	if r.gone {
		return "", &providerresolver.ProviderNotFoundError{Provider: "test"}
	}
	return "test", nil
}

func (r *resolver) ForProviderName(_ context.Context, name string) (provider.Provider, error) {
	if r.gone {
		return nil, &providerresolver.ProviderNotFoundError{Provider: name}
	}
	if r.wrapped != nil {
		return r.wrapped, nil
	}
	return r.provider, nil
}

// capacityLedger records the pool, shape and zone backed off.
type capacityLedger struct {
	mu       sync.Mutex
	recorded []string
}

func (l *capacityLedger) Record(pool, shape, zone string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recorded = append(l.recorded, pool+"/"+shape+"/"+zone)
	return 5 * time.Minute
}

func (l *capacityLedger) entries() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recorded...)
}

// scenario is one pool on the shared API server and a lifecycle
// controller on a fake clock.
type scenario struct {
	t        *testing.T
	g        *WithT
	ctx      context.Context
	pool     *v1alpha1.NodePool
	clock    *clocktesting.FakeClock
	provider *recordingProvider
	resolver *resolver
	capacity *capacityLedger
	recorder *events.FakeRecorder
	c        *Controller
}

func newScenario(t *testing.T, name string, mutate ...func(*v1alpha1.NodePool)) *scenario {
	t.Helper()
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(5 * time.Second)
	ctx := context.Background()
	cpu, memory := resource.MustParse("2"), resource.MustParse("4Gi")
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "test"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c2", CPU: &cpu, Memory: &memory}}},
		},
	}
	for _, m := range mutate {
		m(pool)
	}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	machines := newRecordingProvider()
	s := &scenario{
		t: t, g: g, ctx: ctx, pool: pool,
		clock:    clocktesting.NewFakeClock(time.Now().Truncate(time.Second)),
		provider: machines, resolver: &resolver{provider: machines},
		capacity: &capacityLedger{}, recorder: events.NewFakeRecorder(100),
	}
	s.c = &Controller{
		Kube: cached, Providers: s.resolver, Capacity: s.capacity, Recorder: s.recorder, Clock: s.clock,
		DefaultRegistrationTimeout: 15 * time.Minute,
	}
	t.Cleanup(s.cleanup)
	return s
}

func (s *scenario) cleanup() {
	var claims v1alpha1.NodeClaimList
	_ = env.Client.List(s.ctx, &claims)
	for i := range claims.Items {
		claim := &claims.Items[i]
		if claim.Spec.NodePoolRef.Name != s.pool.Name {
			continue
		}
		patch := client.MergeFrom(claim.DeepCopy())
		controllerutil.RemoveFinalizer(claim, v1alpha1.TerminationFinalizer)
		_ = env.Client.Patch(s.ctx, claim, patch)
		_ = env.Client.Delete(s.ctx, claim)
	}
	var nodes corev1.NodeList
	_ = env.Client.List(s.ctx, &nodes)
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if node.Labels["test-pool"] != s.pool.Name {
			continue
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Finalizers = nil
		_ = env.Client.Patch(s.ctx, node, patch)
		_ = env.Client.Delete(s.ctx, node)
	}
	_ = env.Client.Delete(s.ctx, s.pool)
}

// newClaim writes a claim of the pool, as provisioning would.
func (s *scenario) newClaim(name string, mutate ...func(*v1alpha1.NodeClaim)) *v1alpha1.NodeClaim {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: s.pool.Name, "team": "blue"}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: s.pool.Name},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
	for _, m := range mutate {
		m(claim)
	}
	s.g.Expect(env.Client.Create(s.ctx, claim)).To(Succeed())
	s.g.Eventually(func() error { return cached.Get(s.ctx, client.ObjectKeyFromObject(claim), &v1alpha1.NodeClaim{}) }).Should(Succeed())
	return claim
}

// reconcile runs the controller once on the claim, after the cache has
// caught up with the API server (as a watch event would).
func (s *scenario) reconcile(name string) (reconcile.Result, error) {
	s.t.Helper()
	s.syncCache(name)
	return s.c.Reconcile(s.ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
}

func (s *scenario) mustReconcile(name string) reconcile.Result {
	s.t.Helper()
	result, err := s.reconcile(name)
	s.g.Expect(err).NotTo(HaveOccurred())
	return result
}

func (s *scenario) syncCache(name string) {
	s.t.Helper()
	fresh := &v1alpha1.NodeClaim{}
	if err := env.Client.Get(s.ctx, client.ObjectKey{Name: name}, fresh); err != nil {
		return
	}
	s.g.Eventually(func() string {
		seen := &v1alpha1.NodeClaim{}
		_ = cached.Get(s.ctx, client.ObjectKey{Name: name}, seen)
		return seen.ResourceVersion
	}).Should(Equal(fresh.ResourceVersion))
}

// claim reads a claim from the API server; nil once it is gone.
func (s *scenario) claim(name string) *v1alpha1.NodeClaim {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{}
	if err := env.Client.Get(s.ctx, client.ObjectKey{Name: name}, claim); err != nil {
		s.g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		return nil
	}
	return claim
}

// node makes the Node a machine's kubelet would register, Ready or not.
func (s *scenario) node(name, providerID string, ready corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
	s.t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test-pool": s.pool.Name}},
		Spec:       corev1.NodeSpec{ProviderID: providerID, Taints: taints},
	}
	s.g.Expect(env.Client.Create(s.ctx, node)).To(Succeed())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(s.clock.Now())}}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1900m"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Capacity = node.Status.Allocatable
	s.g.Expect(env.Client.Status().Update(s.ctx, node)).To(Succeed())
	s.g.Eventually(func() string {
		seen := &corev1.Node{}
		_ = cached.Get(s.ctx, client.ObjectKeyFromObject(node), seen)
		return seen.ResourceVersion
	}).Should(Equal(node.ResourceVersion))
	return node
}

func (s *scenario) getNode(name string) *corev1.Node {
	s.t.Helper()
	node := &corev1.Node{}
	if err := env.Client.Get(s.ctx, client.ObjectKey{Name: name}, node); err != nil {
		s.g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		return nil
	}
	return node
}

// pod binds a pod to a node, as the scheduler would.
func (s *scenario) pod(name, nodeName string) *corev1.Pod {
	s.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	s.g.Expect(env.Client.Status().Update(s.ctx, pod)).To(Succeed())
	s.t.Cleanup(func() { _ = env.Client.Delete(s.ctx, pod, client.GracePeriodSeconds(0)) })
	return pod
}

func (s *scenario) getPod(pod *corev1.Pod) *corev1.Pod {
	s.t.Helper()
	found := &corev1.Pod{}
	if err := env.Client.Get(s.ctx, client.ObjectKeyFromObject(pod), found); err != nil {
		s.g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		return nil
	}
	return found
}

// condition returns a claim's condition of a type, or nil.
func condition(claim *v1alpha1.NodeClaim, conditionType string) *metav1.Condition {
	for i := range claim.Status.Conditions {
		if claim.Status.Conditions[i].Type == conditionType {
			return &claim.Status.Conditions[i]
		}
	}
	return nil
}

// recorded drains the events recorded so far.
func (s *scenario) recorded() []string { return expect.Events(s.recorder) }

// withBootstrap gives the controller the real bootstrapper against the
// test API server.
func (s *scenario) withBootstrap() {
	s.c.Bootstrap = &bootstrap.Bootstrapper{
		Tokens: &bootstrap.Tokens{Kube: env.Client, Reader: env.Client, Clock: s.clock},
		Cluster: &bootstrap.ClusterSource{
			Reader: env.Client, Endpoint: env.Config.Host, CAPEM: env.Config.CAData,
		},
		Reader: env.Client, Namespace: "default",
	}
}
