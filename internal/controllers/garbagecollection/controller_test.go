package garbagecollection

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/bootstrap"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
)

// One API server for the package.
var env *testenv.Environment

func TestMain(m *testing.M) { testenv.RunMain(m, testenv.Options{}, &env, nil) }

// machineStore is a test double of provider.Provider: the machines it
// lists, and the deletes it was asked for.
type machineStore struct {
	mu       sync.Mutex
	machines map[string]*provider.Instance
	deleted  []string
}

func (p *machineStore) add(providerID, claimName string, createdAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tags := map[string]string{v1alpha1.TagCluster: "test", v1alpha1.TagNodePool: "gc"}
	if claimName != "" {
		tags[v1alpha1.TagNodeClaim] = claimName
	}
	p.machines[providerID] = &provider.Instance{ProviderID: providerID, Name: claimName, Tags: tags, CreatedAt: createdAt, State: provider.InstanceRunning}
}

func (p *machineStore) List(context.Context) ([]*provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []*provider.Instance
	for _, machine := range p.machines {
		all = append(all, machine)
	}
	return all, nil
}

func (p *machineStore) Delete(_ context.Context, providerID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deleted = append(p.deleted, providerID)
	delete(p.machines, providerID)
	return nil
}

func (p *machineStore) deletes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.deleted...)
}

func (p *machineStore) Create(context.Context, *v1alpha1.NodeClaim, provider.CreateOptions) (*provider.Instance, error) {
	return nil, errors.New("not used")
}
func (p *machineStore) Get(context.Context, string) (*provider.Instance, error) {
	return nil, errors.New("not used")
}
func (p *machineStore) Shapes(context.Context, *v1alpha1.NodePool) ([]provider.Shape, error) {
	return nil, nil
}

// lister hands out the store, and says which providers failed.
type lister struct {
	store  *machineStore
	failed map[string]error
}

func (l *lister) All(context.Context) (map[string]provider.Provider, map[string]error, error) {
	return map[string]provider.Provider{"test": l.store}, l.failed, nil
}

type scenario struct {
	t       *testing.T
	g       *WithT
	ctx     context.Context
	clock   *clocktesting.FakeClock
	store   *machineStore
	lister  *lister
	tokens  *bootstrap.Tokens
	c       *Controller
	cleanup []client.Object
}

func newScenario(t *testing.T) *scenario {
	g := NewWithT(t)
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	store := &machineStore{machines: map[string]*provider.Instance{}}
	s := &scenario{t: t, g: g, ctx: context.Background(), clock: clock, store: store, lister: &lister{store: store}}
	s.tokens = &bootstrap.Tokens{Kube: env.Client, Reader: env.Client, Clock: clock}
	s.c = &Controller{
		Kube: env.Client, APIReader: env.Client, Providers: s.lister, Recorder: events.NewFakeRecorder(100),
		Clock: clock, GracePeriod: 2 * time.Minute, Tokens: s.tokens,
	}
	t.Cleanup(func() {
		for _, object := range s.cleanup {
			patch := client.MergeFrom(object.DeepCopyObject().(client.Object))
			object.SetFinalizers(nil)
			_ = env.Client.Patch(s.ctx, object, patch)
			_ = env.Client.Delete(s.ctx, object)
		}
	})
	return s
}

func (s *scenario) pass() {
	s.t.Helper()
	s.g.Expect(s.c.Pass(s.ctx)).To(Succeed())
}

// claim writes a claim; launched gives it a machine's providerID and the
// Launched condition, and nodeReady a node of that status.
func (s *scenario) claim(name string, launched bool, nodeReady corev1.ConditionStatus) *v1alpha1.NodeClaim {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.TerminationFinalizer}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "gc"},
			Shape:       v1alpha1.ClaimShape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi")},
		},
	}
	s.g.Expect(env.Client.Create(s.ctx, claim)).To(Succeed())
	s.cleanup = append(s.cleanup, claim)
	if launched {
		claim.Status.ProviderID = "test://" + name
		claim.SetCondition(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched", "launched", s.clock.Now())
	}
	if nodeReady != "" {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.g.Expect(env.Client.Create(s.ctx, node)).To(Succeed())
		s.cleanup = append(s.cleanup, node)
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: nodeReady}}
		s.g.Expect(env.Client.Status().Update(s.ctx, node)).To(Succeed())
		claim.Status.NodeName = name
	}
	s.g.Expect(env.Client.Status().Update(s.ctx, claim)).To(Succeed())
	return claim
}

func (s *scenario) deleting(name string) bool {
	claim := &v1alpha1.NodeClaim{}
	if err := env.Client.Get(s.ctx, client.ObjectKey{Name: name}, claim); err != nil {
		return true
	}
	return !claim.DeletionTimestamp.IsZero()
}

func TestMachineWithoutAClaimIsDeletedOnlyAfterTheGracePeriod(t *testing.T) {
	s := newScenario(t)
	s.store.add("test://orphan", "orphan", s.clock.Now().Add(-time.Minute))

	s.pass()
	s.g.Expect(s.store.deletes()).To(BeEmpty(), "its claim may just not be visible yet")

	s.clock.Step(time.Minute + time.Second)
	s.pass()
	s.g.Expect(s.store.deletes()).To(Equal([]string{"test://orphan"}))
}

func TestMachinesOfExistingClaimsAndMachinesWithoutAClaimTagAreKept(t *testing.T) {
	s := newScenario(t)
	s.claim("owned", true, "")
	s.store.add("test://owned", "owned", s.clock.Now().Add(-time.Hour))
	// Listed, but not tagged with a claim: nothing says it is ours to
	// collect.
	s.store.add("test://untagged", "", s.clock.Now().Add(-time.Hour))

	s.pass()
	s.g.Expect(s.store.deletes()).To(BeEmpty())
}

func TestClaimWhoseMachineVanishedIsDeletedUnlessItsNodeIsReady(t *testing.T) {
	s := newScenario(t)
	s.claim("vanished-notready", true, corev1.ConditionUnknown)
	s.claim("vanished-ready", true, corev1.ConditionTrue)
	s.claim("vanished-nonode", true, "")
	s.claim("not-launched", false, "")
	s.claim("present", true, corev1.ConditionFalse)
	s.store.add("test://present", "present", s.clock.Now())

	// While a provider cannot list, no claim is judged.
	s.lister.failed = map[string]error{"other": errors.New("unreachable")}
	s.pass()
	for _, name := range []string{"vanished-notready", "vanished-ready", "vanished-nonode", "not-launched", "present"} {
		s.g.Expect(s.deleting(name)).To(BeFalse(), name)
	}

	s.lister.failed = nil
	s.pass()
	s.g.Expect(s.deleting("vanished-notready")).To(BeTrue())
	s.g.Expect(s.deleting("vanished-nonode")).To(BeTrue())
	s.g.Expect(s.deleting("vanished-ready")).To(BeFalse(), "a Ready node means the machine lives")
	s.g.Expect(s.deleting("not-launched")).To(BeFalse())
	s.g.Expect(s.deleting("present")).To(BeFalse())
}

func TestOrphanedAndExpiredBootstrapTokensAreDeletedAndOthersKept(t *testing.T) {
	s := newScenario(t)
	live := s.claim("token-live", false, "")
	expiring := s.claim("token-expiring", false, "")
	gone := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "token-gone", UID: types.UID("gone")}}

	now := s.clock.Now()
	kept, err := s.tokens.Ensure(s.ctx, live, now.Add(time.Hour), nil)
	s.g.Expect(err).NotTo(HaveOccurred())
	_, err = s.tokens.Ensure(s.ctx, expiring, now.Add(time.Minute), nil)
	s.g.Expect(err).NotTo(HaveOccurred())
	_, err = s.tokens.Ensure(s.ctx, gone, now.Add(time.Hour), nil)
	s.g.Expect(err).NotTo(HaveOccurred())
	// A bootstrap token someone else made, without claimscale's label.
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: bootstrap.TokenNamespace, Name: "bootstrap-token-abcdef"},
		Type:       corev1.SecretType("bootstrap.kubernetes.io/token"),
		StringData: map[string]string{"token-id": "abcdef", "token-secret": "0123456789abcdef", "expiration": now.Add(-time.Hour).Format(time.RFC3339)},
	}
	s.g.Expect(env.Client.Create(s.ctx, foreign)).To(Succeed())
	s.cleanup = append(s.cleanup, foreign)

	s.clock.Step(2 * time.Minute)
	s.pass()
	var secrets corev1.SecretList
	s.g.Expect(env.Client.List(s.ctx, &secrets, client.InNamespace(bootstrap.TokenNamespace))).To(Succeed())
	var names []string
	for _, secret := range secrets.Items {
		names = append(names, secret.Name)
	}
	s.g.Expect(names).To(ConsistOf("bootstrap-token-"+kept.ID, "bootstrap-token-abcdef"))
}

// staleCache is the cached client of a manager whose informer has not yet
// seen the latest writes: it lists the claims it was given, and does
// everything else on the API server.
type staleCache struct {
	client.Client
	claims []v1alpha1.NodeClaim
}

func (c *staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if claims, ok := list.(*v1alpha1.NodeClaimList); ok {
		claims.Items = append([]v1alpha1.NodeClaim(nil), c.claims...)
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// withStaleCache makes the controller list the claims as they are now,
// whatever is written afterwards.
func (s *scenario) withStaleCache(claims ...*v1alpha1.NodeClaim) {
	stale := &staleCache{Client: env.Client}
	for _, claim := range claims {
		fresh := &v1alpha1.NodeClaim{}
		s.g.Expect(env.Client.Get(s.ctx, client.ObjectKeyFromObject(claim), fresh)).To(Succeed())
		stale.claims = append(stale.claims, *fresh)
	}
	s.c.Kube = stale
}

func (s *scenario) markFailed(name string) {
	s.t.Helper()
	claim := &v1alpha1.NodeClaim{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: name}, claim)).To(Succeed())
	claim.SetCondition(v1alpha1.ConditionFailed, metav1.ConditionTrue, "RegistrationTimeout", "gave up", s.clock.Now())
	s.g.Expect(env.Client.Status().Update(s.ctx, claim)).To(Succeed())
}

// A claim that gave up is marked Failed before its machine is deleted; a
// pass whose cache still shows it Launched and not Failed, with the machine
// already gone, must not take it for an orphan: cluster-autoscaler, not
// garbage collection, deletes a kept Failed claim.
func TestAClaimFailedOnTheAPIServerButNotYetInTheCacheIsKept(t *testing.T) {
	s := newScenario(t)
	claim := s.claim("gaveup", true, corev1.ConditionFalse)
	s.withStaleCache(claim)
	s.markFailed("gaveup")

	s.pass()
	s.g.Expect(s.deleting("gaveup")).To(BeFalse(), "the API server says Failed")
}

// The same stale cache, when the API server agrees the claim is orphaned:
// it goes.
func TestAClaimOrphanedInTheCacheAndOnTheAPIServerIsDeleted(t *testing.T) {
	s := newScenario(t)
	claim := s.claim("orphaned", true, corev1.ConditionFalse)
	s.withStaleCache(claim)

	s.pass()
	s.g.Expect(s.deleting("orphaned")).To(BeTrue())
	s.g.Expect(s.c.Recorder.(*events.FakeRecorder).Events).To(Receive(ContainSubstring("machine test://orphaned no longer exists")))
}

// hookedReader runs a hook after each read, as if another controller wrote
// the object just after it was read.
type hookedReader struct {
	client.Reader
	afterGet func(key client.ObjectKey)
}

func (r *hookedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := r.Reader.Get(ctx, key, obj, opts...)
	r.afterGet(key)
	return err
}

// A claim written between its fresh read and its deletion (the lifecycle
// marking it Failed) conflicts instead of being deleted as judged from the
// older copy.
func TestAClaimWrittenAfterItWasJudgedOrphanedIsKept(t *testing.T) {
	s := newScenario(t)
	s.claim("raced", true, "")
	once := sync.Once{}
	s.c.APIReader = &hookedReader{Reader: env.Client, afterGet: func(key client.ObjectKey) {
		if key.Name == "raced" {
			once.Do(func() { s.markFailed("raced") })
		}
	}}

	s.pass()
	s.g.Expect(s.deleting("raced")).To(BeFalse(), "the claim changed after it was read")
}

// The mark is the one condition garbage collection owns, applied under its
// own field manager, so the conditions the lifecycle wrote stay its own.
func TestTheMachineGoneMarkIsAppliedUnderItsOwnFieldManager(t *testing.T) {
	s := newScenario(t)
	s.claim("marked", true, corev1.ConditionFalse)

	s.pass()
	claim := &v1alpha1.NodeClaim{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: "marked"}, claim)).To(Succeed())
	s.g.Expect(claim.DeletionTimestamp.IsZero()).To(BeFalse())
	disrupting := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDisrupting)
	s.g.Expect(disrupting).NotTo(BeNil())
	s.g.Expect(disrupting.Reason).To(Equal(metrics.ReasonMachineGone))
	s.g.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched)).To(BeTrue(), "the lifecycle's condition stays")
	s.g.Expect(claim.ManagedFields).To(ContainElement(And(HaveField("Manager", Name), HaveField("Subresource", "status"),
		HaveField("Operation", metav1.ManagedFieldsOperationApply))), "garbage collection applies under its own field manager")
}
