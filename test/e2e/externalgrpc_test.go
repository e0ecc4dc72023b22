package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/externalgrpc/testcerts"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
)

// A client that plays cluster-autoscaler's loop over mutual TLS scales a
// pool up for pending pods and down again for empty nodes, through an
// operator in externalgrpc mode: the autoscaler decides when, claimscale
// does how, and every claim goes through the normal lifecycle.
func TestClusterAutoscalerScalesAPoolThroughExternalGRPC(t *testing.T) {
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
	startOperator(t, operatorOptions{mode: operator.ModeExternalGRPC, externalGRPC: externalgrpc.Options{
		Listener: listener, CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile,
	}})
	s := newScenario(t, "ca-loop")
	defer s.cleanup()
	s.createProvider(v1alpha1.SimulatedSettings{})
	s.createPool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Limits.Nodes = ptr(int32(4))
		pool.Spec.Disruption.ConsolidateAfter = &metav1.Duration{Duration: time.Second}
	})
	lifecycle := watchLifecycles(t, s)

	// 6 pods of 1 cpu on 4-cpu nodes: two nodes, bought by the autoscaler.
	deployment := s.createDeployment("web", 6, "1", nil)
	s.g.Consistently(func() int { return len(s.claims()) }, 2*time.Second, 250*time.Millisecond).
		Should(BeZero(), "native provisioning is off in externalgrpc mode")

	autoscaler := newFakeAutoscaler(t, s, listener.Addr().String(), authority)
	stopLoop := autoscaler.run()
	defer stopLoop()
	started := time.Now()
	s.g.Eventually(func() int { return s.runningPods("web") }).Should(Equal(6), "all pods Running")
	t.Logf("6 pods Running %s after the autoscaler loop started", time.Since(started).Round(100*time.Millisecond))
	s.g.Expect(s.claims()).To(HaveLen(2), "exactly the nodes the pending pods need")
	s.g.Eventually(s.readyClaims).Should(Equal(2))
	s.g.Expect(autoscaler.calls("NodeGroupIncreaseSize")).To(BeNumerically(">=", 1))

	autoscaler.allowScaleDown(false)
	s.scale(deployment, 0)
	s.g.Eventually(func() int { return s.runningPods("web") + len(s.pods("web")) }).Should(BeZero())
	s.g.Consistently(func() int { return len(s.claims()) }, 3*time.Second, 250*time.Millisecond).
		Should(Equal(2), "native disruption is off: empty nodes stay until the autoscaler deletes them")
	autoscaler.allowScaleDown(true)
	started = time.Now()
	s.g.Eventually(func() int { return len(s.claims()) + len(s.nodes()) + len(s.machines()) }).Should(BeZero(),
		"the autoscaler deleted the empty nodes; their claims drained and deprovisioned them")
	t.Logf("scaled to zero %s after scale-down was allowed; calls: %v", time.Since(started).Round(100*time.Millisecond), autoscaler.callCounts())
	s.g.Expect(autoscaler.calls("NodeGroupDeleteNodes")).To(BeNumerically(">=", 1))
	stopLoop()
	s.g.Expect(autoscaler.failures()).To(BeEmpty(), "every call of the loop succeeded")

	claims := lifecycle()
	s.g.Expect(claims).To(HaveLen(2))
	for name, seen := range claims {
		s.g.Expect(seen).To(ContainElements(v1alpha1.ConditionLaunched, v1alpha1.ConditionRegistered, v1alpha1.ConditionInitialized, v1alpha1.ConditionReady, "Deleted"),
			"claim %s went through the whole lifecycle", name)
	}
}

// watchLifecycles records, per claim of the scenario's pool, every
// condition it was ever seen with True, and "Deleted" once it is gone. The
// returned function stops watching and returns the record.
func watchLifecycles(t *testing.T, s *scenario) func() map[string][]string {
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	s.g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	events, err := watcher.Watch(ctx, &v1alpha1.NodeClaimList{}, client.MatchingLabels{v1alpha1.LabelNodePool: s.name})
	s.g.Expect(err).NotTo(HaveOccurred())
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
// scenario's pool, the way the real one uses the protocol: Refresh,
// NodeGroups, NodeGroupForNode for every node, TargetSize, IncreaseSize for
// pending pods that fit nowhere, DeleteNodes for nodes that stayed empty.
type fakeAutoscaler struct {
	t        *testing.T
	s        *scenario
	ca       protos.CloudProviderClient
	interval time.Duration

	mu         sync.Mutex
	counts     map[string]int
	errs       []error
	scaleDown  bool
	emptyLoops map[string]int
}

func newFakeAutoscaler(t *testing.T, s *scenario, address string, authority *testcerts.Authority) *fakeAutoscaler {
	pair, err := authority.Client("cluster-autoscaler")
	s.g.Expect(err).NotTo(HaveOccurred())
	config, err := authority.ClientTLS(pair)
	s.g.Expect(err).NotTo(HaveOccurred())
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	s.g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = conn.Close() })
	return &fakeAutoscaler{
		t: t, s: s, ca: protos.NewCloudProviderClient(conn), interval: 500 * time.Millisecond,
		counts: map[string]int{}, scaleDown: true, emptyLoops: map[string]int{},
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
	var group *protos.NodeGroup
	for _, candidate := range groups.GetNodeGroups() {
		if candidate.GetId() == a.s.name {
			group = candidate
		}
	}
	if group == nil {
		return fmt.Errorf("no node group %s among %v", a.s.name, groups.GetNodeGroups())
	}

	// Which nodes are the group's, as cluster-autoscaler asks for each.
	var nodes corev1.NodeList
	if err := env.Client.List(ctx, &nodes); err != nil {
		return err
	}
	var members []corev1.Node
	for _, node := range nodes.Items {
		callCtx, cancel = call("NodeGroupForNode")
		answer, err := a.ca.NodeGroupForNode(callCtx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
			Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels, Annotations: node.Annotations,
		}})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeGroupForNode %s: %w", node.Name, err)
		}
		if answer.GetNodeGroup().GetId() == group.GetId() {
			members = append(members, node)
		}
	}
	callCtx, cancel = call("NodeGroupTargetSize")
	target, err := a.ca.NodeGroupTargetSize(callCtx, &protos.NodeGroupTargetSizeRequest{Id: group.GetId()})
	cancel()
	if err != nil {
		return fmt.Errorf("NodeGroupTargetSize: %w", err)
	}

	pending, err := a.pendingPods(ctx)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return a.scaleUp(ctx, group, members, target.GetTargetSize(), pending)
	}
	return a.deleteEmpty(ctx, group, members)
}

// scaleUp asks for the nodes the pending pods need beyond the room left
// on the group's nodes and the nodes still coming, sized by the template.
func (a *fakeAutoscaler) scaleUp(ctx context.Context, group *protos.NodeGroup, members []corev1.Node, target int32, pending []corev1.Pod) error {
	callCtx, cancel := context.WithTimeout(ctx, caCallTimeout)
	a.count("NodeGroupTemplateNodeInfo")
	info, err := a.ca.NodeGroupTemplateNodeInfo(callCtx, &protos.NodeGroupTemplateNodeInfoRequest{Id: group.GetId()})
	cancel()
	if err != nil {
		return fmt.Errorf("NodeGroupTemplateNodeInfo: %w", err)
	}
	template := &corev1.Node{}
	if err := template.Unmarshal(info.GetNodeBytes()); err != nil {
		return fmt.Errorf("decoding the template node: %w", err)
	}
	perPod := pending[0].Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
	perNode := int(template.Status.Allocatable.Cpu().MilliValue() / perPod)
	room := 0
	for _, node := range members {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node.Name}); err != nil {
			return err
		}
		room += perNode - len(pods.Items)
	}
	upcoming := int(target) - len(members)
	needed := (len(pending)-room+perNode-1)/perNode - upcoming
	needed = min(needed, int(group.GetMaxSize()-target))
	if needed <= 0 {
		return nil
	}
	callCtx, cancel = context.WithTimeout(ctx, caCallTimeout)
	defer cancel()
	a.count("NodeGroupIncreaseSize")
	if _, err := a.ca.NodeGroupIncreaseSize(callCtx, &protos.NodeGroupIncreaseSizeRequest{Id: group.GetId(), Delta: int32(needed)}); err != nil {
		return fmt.Errorf("NodeGroupIncreaseSize by %d: %w", needed, err)
	}
	return nil
}

// deleteEmpty deletes, one call each, the group's nodes that carried no
// pods for three loops in a row (cluster-autoscaler's unneeded time).
func (a *fakeAutoscaler) deleteEmpty(ctx context.Context, group *protos.NodeGroup, members []corev1.Node) error {
	a.mu.Lock()
	allowed := a.scaleDown
	a.mu.Unlock()
	var errs []error
	for _, node := range members {
		if !node.DeletionTimestamp.IsZero() || node.Spec.Unschedulable {
			continue
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node.Name}); err != nil {
			return err
		}
		a.mu.Lock()
		if len(pods.Items) > 0 {
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
		_, err := a.ca.NodeGroupDeleteNodes(callCtx, &protos.NodeGroupDeleteNodesRequest{Id: group.GetId(), Nodes: []*protos.ExternalGrpcNode{{
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
	if err := env.Client.List(ctx, &pods, client.InNamespace(a.s.namespace)); err != nil {
		return nil, err
	}
	var pending []corev1.Pod
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		for _, condition := range pod.Status.Conditions {
			if condition.Type == corev1.PodScheduled && condition.Reason == corev1.PodReasonUnschedulable {
				pending = append(pending, pod)
			}
		}
	}
	return pending, nil
}
