package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/externalgrpc/testcerts"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// grpcServing is an operator in externalgrpc mode on 127.0.0.1: the
// CloudProvider behind mutual TLS, the expander behind TLS, both with
// certificates of one test authority.
type grpcServing struct {
	authority                *testcerts.Authority
	address, expanderAddress string
	caFile                   string
}

func startExternalGRPC(t *testing.T, opts harness.OperatorOptions) grpcServing {
	t.Helper()
	authority, err := testcerts.NewAuthority("e2e-grpc-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverPair, err := authority.Server("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile, err := authority.WriteFiles(t.TempDir(), serverPair)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	expanderListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Mode = operator.ModeExternalGRPC
	opts.ExternalGRPC = externalgrpc.Options{
		Listener: listener, CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile,
		ExpanderListener: expanderListener,
	}
	harness.StartOperator(t, opts)
	return grpcServing{authority: authority, address: listener.Addr().String(), expanderAddress: expanderListener.Addr().String(), caFile: caFile}
}

// A client that plays cluster-autoscaler's loop over mutual TLS scales a
// pool up for pending pods and down again for empty nodes, through an
// operator in externalgrpc mode: the autoscaler decides when, claimscale
// does how, and every claim goes through the normal lifecycle.
func TestExternalGRPCScalesAPoolUpAndDown(t *testing.T) {
	serving := startExternalGRPC(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "ca-loop")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Limits.Nodes = harness.Ptr(int32(4))
		pool.Spec.Disruption.ConsolidateAfter = &metav1.Duration{Duration: time.Second}
	})
	lifecycle := watchLifecycles(t, s)

	// 6 pods of 1 cpu on 4-cpu nodes: two nodes, bought by the autoscaler.
	deployment := s.CreateDeployment("web", 6, "1", nil)
	s.G.Consistently(func() int { return len(s.Claims()) }, 2*time.Second, 250*time.Millisecond).
		Should(BeZero(), "native provisioning is off in externalgrpc mode")

	autoscaler := newFakeAutoscaler(t, s, serving)
	stopLoop := autoscaler.run()
	defer stopLoop()
	started := time.Now()
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(6), "all pods Running")
	t.Logf("6 pods Running %s after the autoscaler loop started", time.Since(started).Round(100*time.Millisecond))
	s.G.Expect(s.Claims()).To(HaveLen(2), "exactly the nodes the pending pods need")
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	s.G.Expect(autoscaler.calls("NodeGroupIncreaseSize")).To(BeNumerically(">=", 1))

	autoscaler.allowScaleDown(false)
	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return s.RunningPods("web") + len(s.Pods("web")) }).Should(BeZero())
	s.G.Consistently(func() int { return len(s.Claims()) }, 3*time.Second, 250*time.Millisecond).
		Should(Equal(2), "native disruption is off: empty nodes stay until the autoscaler deletes them")
	autoscaler.allowScaleDown(true)
	started = time.Now()
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero(),
		"the autoscaler deleted the empty nodes; their claims drained and deprovisioned them")
	t.Logf("scaled to zero %s after scale-down was allowed; calls: %v", time.Since(started).Round(100*time.Millisecond), autoscaler.callCounts())
	s.G.Expect(autoscaler.calls("NodeGroupDeleteNodes")).To(BeNumerically(">=", 1))
	stopLoop()
	s.G.Expect(autoscaler.failures()).To(BeEmpty(), "every call of the loop succeeded")

	claims := lifecycle()
	s.G.Expect(claims).To(HaveLen(2))
	for name, seen := range claims {
		s.G.Expect(seen).To(ContainElements(v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady, "Deleted"),
			"claim %s went through the whole lifecycle", name)
	}
}

// sampleShapes are config/samples/simulated.yaml's pool: three shapes,
// kubelet reservations and limits.
func samplePool(pool *v1alpha1.NodePool) {
	pool.Spec.Shapes = v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
		{Name: "small", CPU: harness.Qty("2"), Memory: harness.Qty("4Gi"), Price: "0.05"},
		{Name: "medium", CPU: harness.Qty("4"), Memory: harness.Qty("8Gi"), Price: "0.10"},
		{Name: "large", CPU: harness.Qty("8"), Memory: harness.Qty("16Gi"), Price: "0.20"},
	}}
	pool.Spec.Template.Kubelet = v1alpha1.KubeletConfiguration{
		MaxPods:      harness.Ptr(int32(110)),
		KubeReserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		EvictionHard: map[string]v1alpha1.EvictionThreshold{"memory.available": "100Mi"},
	}
	pool.Spec.Limits = &v1alpha1.Limits{Nodes: harness.Ptr(int32(20)), CPU: harness.Qty("100"), Memory: harness.Qty("200Gi")}
}

// The sample workload (20 pods of 1 cpu on the sample pool) under a
// cluster-autoscaler that asks claimscale's expander: the autoscaler sees
// one group per shape with its true template, claimscale's expander picks
// the cheapest packing, and it buys no more nodes than native provisioning
// does for the same pods.
func TestExternalGRPCSampleWorkloadGetsNoMoreNodesThanNative(t *testing.T) {
	// Native provisioning first, for the number to match.
	stopNative := harness.StartOperator(t, harness.OperatorOptions{})
	native := harness.NewScenario(t, "sample-native")
	native.CreateProvider(v1alpha1.SimulatedSettings{})
	native.CreatePool(samplePool)
	native.CreateDeployment("web", 20, "1", nil)
	native.G.Eventually(func() int { return native.RunningPods("web") }).Should(Equal(20))
	nativeClaims := native.Claims()
	native.Cleanup()
	stopNative()
	t.Logf("native provisioning: %d nodes (%s)", len(nativeClaims), shapesOf(nativeClaims))

	serving := startExternalGRPC(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "sample-ca")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(samplePool)
	s.CreateDeployment("web", 20, "1", nil)
	autoscaler := newFakeAutoscaler(t, s, serving)
	// cluster-autoscaler looks every 10 s (--scan-interval), so its loop
	// sees the whole Deployment pending, not the first pods the
	// ReplicaSet controller makes: the fake's faster loop starts once
	// all are.
	s.G.Eventually(func() (int, error) {
		pending, err := autoscaler.pendingPods(s.Ctx)
		return len(pending), err
	}).Should(Equal(20))
	stopLoop := autoscaler.run()
	defer stopLoop()
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(20), "all pods Running")
	stopLoop()
	claims := s.Claims()
	t.Logf("under cluster-autoscaler: %d nodes (%s); expander chose %v; calls %v", len(claims), shapesOf(claims), autoscaler.chosenGroups(), autoscaler.callCounts())
	s.G.Expect(autoscaler.failures()).To(BeEmpty())
	s.G.Expect(len(claims)).To(BeNumerically("<=", len(nativeClaims)), "no more nodes than native provisioning")
	s.G.Expect(autoscaler.groupsSeen()).To(ConsistOf(s.Name+"/small", s.Name+"/medium", s.Name+"/large"), "one group per shape")
	s.G.Expect(autoscaler.chosenGroups()).To(HaveEach(s.Name+"/large"), "the expander's pick: 3 large nodes (0.60 an hour) over 7 medium (0.70) or 20 small (1.00)")
	s.G.Expect(autoscaler.calls("BestOptions")).To(BeNumerically(">=", 1))
}

func shapesOf(claims []v1alpha1.NodeClaim) string {
	count := map[string]int{}
	for _, claim := range claims {
		count[claim.Spec.Shape.Name]++
	}
	return fmt.Sprint(count)
}

// Machines that never register: their claims time out, their machines are
// deleted, and the claims stay, reported to the autoscaler as instances
// with the error registration-timeout (so its node-group backoff works),
// without claimscale making new claims, until the autoscaler deletes them.
func TestExternalGRPCRegistrationTimeoutsAreReportedUntilTheAutoscalerDeletes(t *testing.T) {
	serving := startExternalGRPC(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "ca-timeout")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{NeverRegisterPercent: 100})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 5 * time.Second}
	})
	autoscaler := newFakeAutoscaler(t, s, serving)
	ca := autoscaler.ca
	id := s.Name + "/c4"
	_, err := ca.NodeGroupIncreaseSize(s.Ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 2})
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Eventually(s.Machines).Should(HaveLen(2), "two machines launched")

	instances := func() []*protos.Instance {
		response, err := ca.NodeGroupNodes(s.Ctx, &protos.NodeGroupNodesRequest{Id: id})
		s.G.Expect(err).NotTo(HaveOccurred())
		return response.GetInstances()
	}
	failedInstance := And(
		HaveField("Status.InstanceState", protos.InstanceStatus_instanceCreating),
		HaveField("Status.ErrorInfo.ErrorCode", externalgrpc.ErrorCodeRegistrationTimeout),
		HaveField("Status.ErrorInfo.InstanceErrorClass", BeEquivalentTo(99)),
	)
	s.G.Eventually(instances).Should(And(HaveLen(2), HaveEach(failedInstance)), "both instances failed with registration-timeout")
	s.G.Eventually(s.Machines).Should(BeEmpty(), "the machines of the failed claims are deleted")
	claims := s.Claims()
	s.G.Expect(claims).To(HaveLen(2))
	for _, claim := range claims {
		s.G.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionFailed)).To(BeTrue(), "claim %s is kept, Failed", claim.Name)
	}
	s.G.Consistently(func() []string {
		var names []string
		for _, claim := range s.Claims() {
			names = append(names, claim.Name)
		}
		return names
	}, 3*time.Second, 250*time.Millisecond).Should(ConsistOf(claims[0].Name, claims[1].Name), "no new claims and none deleted before the autoscaler says so")
	target, err := ca.NodeGroupTargetSize(s.Ctx, &protos.NodeGroupTargetSizeRequest{Id: id})
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Expect(target.GetTargetSize()).To(BeEquivalentTo(2), "failed instances still count, so the autoscaler does not buy around them")

	// cluster-autoscaler deletes failed creations with stand-in nodes that
	// carry only the instance id.
	var standIns []*protos.ExternalGrpcNode
	for _, instance := range instances() {
		standIns = append(standIns, &protos.ExternalGrpcNode{Name: instance.GetId(), ProviderID: instance.GetId(),
			Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "create-error"}})
	}
	_, err = ca.NodeGroupDeleteNodes(s.Ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: standIns})
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero(), "deleted once the autoscaler asked")
	s.G.Eventually(instances).Should(BeEmpty(), "and no longer reported")
}

// A shape the provider has no capacity for: the claim is kept, Failed,
// and reported as an out-of-resources instance (class 1, which backs the
// group off) until the autoscaler deletes it; the other shape's group is
// untouched.
func TestExternalGRPCNoCapacityIsReportedAsOutOfResources(t *testing.T) {
	full := provider.NewRegistry()
	realFactory := simulated.NewFactory(simulated.Config{Kube: env.Client, ExternalRegistrar: true})
	full.Register(v1alpha1.ProviderTypeSimulated, func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		machines, err := realFactory(ctx, np, opts)
		if err != nil {
			return nil, err
		}
		return &noCapacityFor{Provider: machines, shape: "c8"}, nil
	})
	serving := startExternalGRPC(t, harness.OperatorOptions{Registry: full})
	s := harness.NewScenario(t, "ca-full")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = append(pool.Spec.Shapes.Fixed, v1alpha1.Shape{Name: "c8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.2"})
	})
	ca := newFakeAutoscaler(t, s, serving).ca
	_, err := ca.NodeGroupIncreaseSize(s.Ctx, &protos.NodeGroupIncreaseSizeRequest{Id: s.Name + "/c8", Delta: 1})
	s.G.Expect(err).NotTo(HaveOccurred())
	instances := func() []*protos.Instance {
		response, err := ca.NodeGroupNodes(s.Ctx, &protos.NodeGroupNodesRequest{Id: s.Name + "/c8"})
		s.G.Expect(err).NotTo(HaveOccurred())
		return response.GetInstances()
	}
	s.G.Eventually(instances).Should(ConsistOf(And(
		HaveField("Status.ErrorInfo.ErrorCode", externalgrpc.ErrorCodeInsufficientCapacity),
		HaveField("Status.ErrorInfo.InstanceErrorClass", BeEquivalentTo(1)),
	)))
	s.G.Eventually(func() bool {
		claims := s.Claims()
		return len(claims) == 1 && meta.IsStatusConditionTrue(claims[0].Status.Conditions, v1alpha1.ConditionFailed)
	}).Should(BeTrue(), "the claim is kept, Failed")
	s.G.Consistently(func() int { return len(s.Claims()) }, 2*time.Second, 250*time.Millisecond).Should(Equal(1),
		"neither deleted nor replaced before the autoscaler says so")
	s.G.Expect(s.Machines()).To(BeEmpty())

	id := instances()[0].GetId()
	_, err = ca.NodeGroupDeleteNodes(s.Ctx, &protos.NodeGroupDeleteNodesRequest{Id: s.Name + "/c8", Nodes: []*protos.ExternalGrpcNode{{
		Name: id, ProviderID: id, Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "create-error"},
	}}})
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero())
}

// noCapacityFor is a provider with no capacity for one shape.
type noCapacityFor struct {
	provider.Provider
	shape string
}

func (n *noCapacityFor) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	if claim.Spec.Shape.Name == n.shape {
		return nil, provider.NewInsufficientCapacity(fmt.Errorf("no host has room for shape %s", n.shape))
	}
	return n.Provider.Create(ctx, claim, opts)
}

// conflictCounter counts the API server's 409 answers to one client's
// writes of existing objects: optimistic-lock conflicts. (A create of an
// object that exists is answered 409 AlreadyExists, which is no conflict.)
type conflictCounter struct {
	next      http.RoundTripper
	conflicts atomic.Int64

	mu       sync.Mutex
	requests []string
}

func (c *conflictCounter) RoundTrip(request *http.Request) (*http.Response, error) {
	response, err := c.next.RoundTrip(request)
	if err == nil && response.StatusCode == http.StatusConflict && request.Method != http.MethodPost {
		c.conflicts.Add(1)
		c.mu.Lock()
		c.requests = append(c.requests, request.Method+" "+request.URL.Path)
		c.mu.Unlock()
	}
	return response, err
}

// conflicted names the requests that were answered 409.
func (c *conflictCounter) conflicted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.requests...)
}

// A scale-up of 20 claims at once writes claim, pool and node state
// without optimistic-lock conflicts, launches each machine once and
// counts each launch once.
func TestExternalGRPCScaleUpOf20ClaimsWritesWithoutConflicts(t *testing.T) {
	counter := &conflictCounter{}
	config := rest.CopyConfig(env.Config)
	config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		counter.next = next
		return counter
	})
	serving := startExternalGRPC(t, harness.OperatorOptions{Config: config})
	s := harness.NewScenario(t, "ca-twenty")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	launched := func() float64 {
		var metric dto.Metric
		s.G.Expect(metrics.NodeClaimsLaunched.WithLabelValues(s.Name).Write(&metric)).To(Succeed())
		return metric.GetCounter().GetValue()
	}
	before := launched()
	autoscaler := newFakeAutoscaler(t, s, serving)
	started := time.Now()
	_, err := autoscaler.ca.NodeGroupIncreaseSize(s.Ctx, &protos.NodeGroupIncreaseSizeRequest{Id: s.Name + "/c4", Delta: 20})
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Eventually(s.ReadyClaims).Should(Equal(20))
	t.Logf("20 claims Ready %s after the increase; %d conflicts: %v", time.Since(started).Round(100*time.Millisecond), counter.conflicts.Load(), counter.conflicted())
	s.G.Eventually(func() int { return len(s.Machines()) }).Should(Equal(20))
	s.G.Expect(launched()-before).To(BeEquivalentTo(len(s.Machines())), "nodeclaims_launched_total counts each machine made once")
	s.G.Expect(counter.conflicts.Load()).To(BeNumerically("<=", 1), "status and node writes do not conflict")
}

// watchLifecycles records, per claim of the scenario's pool, every
// condition it was ever seen with True, and "Deleted" once it is gone. The
// returned function stops watching and returns the record.
func watchLifecycles(t *testing.T, s *harness.Scenario) func() map[string][]string {
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	s.G.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	events, err := watcher.Watch(ctx, &v1alpha1.NodeClaimList{}, client.MatchingLabels{v1alpha1.LabelNodePool: s.Name})
	s.G.Expect(err).NotTo(HaveOccurred())
	seen := map[string]map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for event := range events.ResultChan() {
			claim, ok := event.Object.(*v1alpha1.NodeClaim)
			if !ok {
				continue
			}
			if seen[claim.Name] == nil {
				seen[claim.Name] = map[string]bool{}
			}
			for _, condition := range claim.Status.Conditions {
				if condition.Status == metav1.ConditionTrue {
					seen[claim.Name][condition.Type] = true
				}
			}
			if event.Type == watch.Deleted {
				seen[claim.Name]["Deleted"] = true
			}
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			events.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return func() map[string][]string {
		stop()
		out := map[string][]string{}
		for name, conditions := range seen {
			for condition := range conditions {
				out[name] = append(out[name], condition)
			}
		}
		return out
	}
}

// fakeAutoscaler plays cluster-autoscaler's main loop against the
// scenario's pool, the way the real one (1.36) uses the protocols: Refresh,
// NodeGroups, NodeGroupForNode for every node, TargetSize per group; for
// pending pods, the template node of every group, a binpacking estimate
// per group, BestOptions on claimscale's expander, and IncreaseSize of the
// group it returns; DeleteNodes for nodes that stayed empty.
type fakeAutoscaler struct {
	t        *testing.T
	s        *harness.Scenario
	ca       protos.CloudProviderClient
	expander protos.ExpanderClient
	interval time.Duration

	mu         sync.Mutex
	counts     map[string]int
	errs       []error
	scaleDown  bool
	emptyLoops map[string]int
	seen       map[string]bool
	chosen     []string
}

func newFakeAutoscaler(t *testing.T, s *harness.Scenario, serving grpcServing) *fakeAutoscaler {
	pair, err := serving.authority.Client("cluster-autoscaler")
	s.G.Expect(err).NotTo(HaveOccurred())
	config, err := serving.authority.ClientTLS(pair)
	s.G.Expect(err).NotTo(HaveOccurred())
	conn, err := grpc.NewClient(serving.address, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	s.G.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	// The expander's client as cluster-autoscaler makes it: the CA file of
	// --grpc-expander-cert, no client certificate.
	expanderCreds, err := credentials.NewClientTLSFromFile(serving.caFile, "")
	s.G.Expect(err).NotTo(HaveOccurred())
	expanderConn, err := grpc.NewClient(serving.expanderAddress, grpc.WithTransportCredentials(expanderCreds))
	s.G.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = expanderConn.Close() })
	return &fakeAutoscaler{
		t: t, s: s, ca: protos.NewCloudProviderClient(conn), expander: protos.NewExpanderClient(expanderConn),
		interval: 500 * time.Millisecond, counts: map[string]int{}, scaleDown: true,
		emptyLoops: map[string]int{}, seen: map[string]bool{},
	}
}

// run loops until the returned function is called.
func (a *fakeAutoscaler) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(a.interval)
		defer ticker.Stop()
		for {
			if err := a.loop(ctx); err != nil && ctx.Err() == nil {
				a.mu.Lock()
				a.errs = append(a.errs, err)
				a.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

func (a *fakeAutoscaler) allowScaleDown(allowed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.scaleDown = allowed
}

func (a *fakeAutoscaler) calls(method string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counts[method]
}

func (a *fakeAutoscaler) callCounts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	counts := map[string]int{}
	for method, n := range a.counts {
		counts[method] = n
	}
	return counts
}

// groupsSeen are the scenario pool's groups the autoscaler was told of.
func (a *fakeAutoscaler) groupsSeen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ids []string
	for id := range a.seen {
		ids = append(ids, id)
	}
	return ids
}

// chosenGroups are the groups the expander's answers led it to grow.
func (a *fakeAutoscaler) chosenGroups() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.chosen...)
}

func (a *fakeAutoscaler) failures() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

func (a *fakeAutoscaler) count(method string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counts[method]++
}

// How long the fake waits for an answer, as cluster-autoscaler's
// grpc_timeout.
const caCallTimeout = 5 * time.Second

// groupState is what one loop knows of a group.
type groupState struct {
	group   *protos.NodeGroup
	members []corev1.Node
	target  int32
}

func (a *fakeAutoscaler) loop(ctx context.Context) error {
	call := func(method string) (context.Context, context.CancelFunc) {
		a.count(method)
		return context.WithTimeout(ctx, caCallTimeout)
	}
	callCtx, cancel := call("Refresh")
	_, err := a.ca.Refresh(callCtx, &protos.RefreshRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("Refresh: %w", err)
	}
	callCtx, cancel = call("NodeGroups")
	groups, err := a.ca.NodeGroups(callCtx, &protos.NodeGroupsRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("NodeGroups: %w", err)
	}
	states := map[string]*groupState{}
	var ids []string
	for _, candidate := range groups.GetNodeGroups() {
		if strings.HasPrefix(candidate.GetId(), a.s.Name+"/") {
			states[candidate.GetId()] = &groupState{group: candidate}
			ids = append(ids, candidate.GetId())
			a.mu.Lock()
			a.seen[candidate.GetId()] = true
			a.mu.Unlock()
		}
	}
	if len(ids) == 0 {
		return fmt.Errorf("no node group of pool %s among %v", a.s.Name, groups.GetNodeGroups())
	}

	// Which nodes are the groups', as cluster-autoscaler asks for each.
	var nodes corev1.NodeList
	if err := env.Client.List(ctx, &nodes); err != nil {
		return err
	}
	for _, node := range nodes.Items {
		callCtx, cancel = call("NodeGroupForNode")
		answer, err := a.ca.NodeGroupForNode(callCtx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
			Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels, Annotations: node.Annotations,
		}})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeGroupForNode %s: %w", node.Name, err)
		}
		if state := states[answer.GetNodeGroup().GetId()]; state != nil {
			state.members = append(state.members, node)
		}
	}
	for _, id := range ids {
		callCtx, cancel = call("NodeGroupTargetSize")
		target, err := a.ca.NodeGroupTargetSize(callCtx, &protos.NodeGroupTargetSizeRequest{Id: id})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeGroupTargetSize %s: %w", id, err)
		}
		states[id].target = target.GetTargetSize()
	}

	// One list of every pod, as cluster-autoscaler's loop reads one
	// snapshot: pending pods listed apart from the pods on the nodes
	// would count a pod the scheduler binds in between as neither, and
	// the loop would buy a node for it.
	var pods corev1.PodList
	if err := env.Client.List(ctx, &pods); err != nil {
		return err
	}
	snapshot := podsOf(pods.Items)
	pending := a.pendingAmong(pods.Items)
	if len(pending) > 0 {
		return a.scaleUp(ctx, ids, states, pending, snapshot)
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, a.deleteEmpty(ctx, states[id], snapshot))
	}
	return errors.Join(errs...)
}

// podSnapshot counts one list's pods by the node they are bound to.
type podSnapshot map[string]int

func podsOf(pods []corev1.Pod) podSnapshot {
	onNode := podSnapshot{}
	for _, pod := range pods {
		if pod.Spec.NodeName != "" {
			onNode[pod.Spec.NodeName]++
		}
	}
	return onNode
}

// scaleUp estimates, per group, the nodes the pending pods need beyond
// the room left on the groups' nodes and the nodes still coming (sized by
// each group's template), asks the expander which option is best, and
// grows the group of the first option it returns.
func (a *fakeAutoscaler) scaleUp(ctx context.Context, ids []string, states map[string]*groupState, pending []corev1.Pod, onNode podSnapshot) error {
	perPod := pending[0].Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
	perNode := map[string]int{}
	request := &protos.BestOptionsRequest{NodeBytesMap: map[string][]byte{}}
	covered := 0
	for _, id := range ids {
		callCtx, cancel := context.WithTimeout(ctx, caCallTimeout)
		a.count("NodeGroupTemplateNodeInfo")
		info, err := a.ca.NodeGroupTemplateNodeInfo(callCtx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeGroupTemplateNodeInfo %s: %w", id, err)
		}
		template := &corev1.Node{}
		if err := template.Unmarshal(info.GetNodeBytes()); err != nil {
			return fmt.Errorf("decoding the template node of %s: %w", id, err)
		}
		request.NodeBytesMap[id] = info.GetNodeBytes()
		perNode[id] = int(template.Status.Allocatable.Cpu().MilliValue() / perPod)
		state := states[id]
		for _, node := range state.members {
			covered += perNode[id] - onNode[node.Name]
		}
		covered += max(int(state.target)-len(state.members), 0) * perNode[id]
	}
	remaining := len(pending) - covered
	if remaining <= 0 {
		return nil
	}
	counts := map[string]int32{}
	for _, id := range ids {
		if perNode[id] == 0 {
			continue
		}
		state := states[id]
		nodes := min((remaining+perNode[id]-1)/perNode[id], int(state.group.GetMaxSize()-state.target))
		if nodes <= 0 {
			continue
		}
		option := &protos.Option{NodeGroupId: id, NodeCount: int32(nodes), Debug: id}
		for _, pod := range pending[:min(remaining, nodes*perNode[id])] {
			podBytes, err := pod.Marshal()
			if err != nil {
				return err
			}
			option.PodBytes = append(option.PodBytes, podBytes)
		}
		counts[id] = int32(nodes)
		request.Options = append(request.Options, option)
	}
	if len(request.Options) == 0 {
		return nil
	}
	callCtx, cancel := context.WithTimeout(ctx, caCallTimeout)
	a.count("BestOptions")
	best, err := a.expander.BestOptions(callCtx, request)
	cancel()
	if err != nil {
		return fmt.Errorf("BestOptions: %w", err)
	}
	if len(best.GetOptions()) == 0 {
		return fmt.Errorf("the expander chose none of %d options", len(request.Options))
	}
	id := best.GetOptions()[0].GetNodeGroupId()
	var known []string
	for _, groupID := range ids {
		known = append(known, fmt.Sprintf("%s: target %d, %d nodes", groupID, states[groupID].target, len(states[groupID].members)))
	}
	a.t.Logf("scale-up: %d pending pods, room for %d on nodes present and coming (%s); the expander chose %s, +%d", len(pending), covered, strings.Join(known, "; "), id, counts[id])
	a.mu.Lock()
	a.chosen = append(a.chosen, id)
	a.mu.Unlock()
	callCtx, cancel = context.WithTimeout(ctx, caCallTimeout)
	defer cancel()
	a.count("NodeGroupIncreaseSize")
	if _, err := a.ca.NodeGroupIncreaseSize(callCtx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: counts[id]}); err != nil {
		return fmt.Errorf("NodeGroupIncreaseSize %s by %d: %w", id, counts[id], err)
	}
	return nil
}

// deleteEmpty deletes, one call each, the group's nodes that carried no
// pods for three loops in a row (cluster-autoscaler's unneeded time).
func (a *fakeAutoscaler) deleteEmpty(ctx context.Context, state *groupState, onNode podSnapshot) error {
	a.mu.Lock()
	allowed := a.scaleDown
	a.mu.Unlock()
	var errs []error
	for _, node := range state.members {
		if !node.DeletionTimestamp.IsZero() || node.Spec.Unschedulable {
			continue
		}
		a.mu.Lock()
		if onNode[node.Name] > 0 {
			delete(a.emptyLoops, node.Name)
		} else {
			a.emptyLoops[node.Name]++
		}
		unneeded := a.emptyLoops[node.Name] >= 3
		a.mu.Unlock()
		if !allowed || !unneeded {
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, caCallTimeout)
		a.count("NodeGroupDeleteNodes")
		_, err := a.ca.NodeGroupDeleteNodes(callCtx, &protos.NodeGroupDeleteNodesRequest{Id: state.group.GetId(), Nodes: []*protos.ExternalGrpcNode{{
			Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels,
		}}})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("NodeGroupDeleteNodes %s: %w", node.Name, err))
		}
	}
	return errors.Join(errs...)
}

// pendingPods are the scenario's pods the scheduler found no node for.
func (a *fakeAutoscaler) pendingPods(ctx context.Context) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := env.Client.List(ctx, &pods, client.InNamespace(a.s.Namespace)); err != nil {
		return nil, err
	}
	return a.pendingAmong(pods.Items), nil
}

// pendingAmong are those of the scenario's pods that the scheduler found
// no node for.
func (a *fakeAutoscaler) pendingAmong(pods []corev1.Pod) []corev1.Pod {
	var pending []corev1.Pod
	for _, pod := range pods {
		if pod.Namespace != a.s.Namespace {
			continue
		}
		if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		for _, condition := range pod.Status.Conditions {
			if condition.Type == corev1.PodScheduled && condition.Reason == corev1.PodReasonUnschedulable {
				pending = append(pending, pod)
			}
		}
	}
	return pending
}

// The chart serves the expander on its own port and lets only
// cluster-autoscaler's pods reach it; the policy is one the API server
// accepts. Without TLS there is no expander: cluster-autoscaler refuses a
// plaintext one.
func TestExternalGRPCChartLetsOnlyClusterAutoscalerReachTheExpander(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	values := filepath.Join(root, "charts", "claimscale", "values-externalgrpc.yaml")
	byName := map[string]*unstructured.Unstructured{}
	for _, object := range harness.HelmTemplate(t, "-f", values) {
		byName[object.GetKind()+"/"+object.GetName()] = object
	}
	g.Expect(byName).To(HaveKey("NetworkPolicy/claimscale-expander"))
	policy := byName["NetworkPolicy/claimscale-expander"]
	rules, _, _ := unstructured.NestedSlice(policy.Object, "spec", "ingress")
	g.Expect(rules).To(HaveLen(2))
	expanderRule := rules[0].(map[string]any)
	g.Expect(expanderRule["ports"]).To(ConsistOf(HaveKeyWithValue("port", "expander")))
	g.Expect(expanderRule["from"]).To(ConsistOf(And(
		HaveKeyWithValue("podSelector", HaveKeyWithValue("matchLabels", HaveKeyWithValue("app.kubernetes.io/name", "externalgrpc-cluster-autoscaler"))),
		HaveKeyWithValue("namespaceSelector", HaveKeyWithValue("matchLabels", HaveKeyWithValue("kubernetes.io/metadata.name", "kube-system"))),
	)), "only cluster-autoscaler's pods, in its namespace")
	g.Expect(rules[1].(map[string]any)).NotTo(HaveKey("from"), "the other ports stay open as without a policy")
	g.Expect(env.Client.Create(context.Background(), policy, client.DryRunAll)).To(Succeed())

	service := byName["Service/claimscale-grpc"]
	ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
	g.Expect(ports).To(ContainElement(And(HaveKeyWithValue("name", "expander"), HaveKeyWithValue("port", BeEquivalentTo(8087)))))
	containers, _, _ := unstructured.NestedSlice(byName["Deployment/claimscale"].Object, "spec", "template", "spec", "containers")
	g.Expect(containers[0].(map[string]any)["args"]).To(ContainElement("--grpc-expander-bind-address=:8087"))

	for _, object := range harness.HelmTemplate(t, "-f", values, "--set", "externalgrpc.insecure=true,externalgrpc.certManager.enabled=false") {
		g.Expect(object.GetKind()).NotTo(Equal("NetworkPolicy"))
		if object.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(object.Object, "spec", "template", "spec", "containers")
			g.Expect(containers[0].(map[string]any)["args"]).NotTo(ContainElement(ContainSubstring("expander")))
		}
	}
}
