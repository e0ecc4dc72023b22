package externalgrpc

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// Every test below calls the shared server over TCP with mutual TLS, as
// cluster-autoscaler does.

func TestNodeGroupsAreTheShapesOfPoolsWithANodeLimit(t *testing.T) {
	w := newWorld(t, "groups")
	pool := w.pool("groups-limited", nil)
	w.pool("groups-unlimited", func(pool *v1alpha1.NodePool) {
		pool.Spec.Limits = nil
		pool.Spec.MinNodes = 0
	})
	flexible := w.pool("groups-flexible", func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes = v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
			MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("12"),
			MinMemory: resource.MustParse("2Gi"), MaxMemory: resource.MustParse("24Gi"),
		}}
		pool.Spec.MinNodes = 0
	})
	ca := newClient(t)
	groups := func() map[string]*protos.NodeGroup {
		response, err := ca.NodeGroups(w.ctx, &protos.NodeGroupsRequest{})
		w.g.Expect(err).NotTo(HaveOccurred())
		ours := map[string]*protos.NodeGroup{}
		for _, group := range response.GetNodeGroups() {
			if strings.HasPrefix(group.GetId(), "groups-") {
				ours[group.GetId()] = group
			}
		}
		return ours
	}
	ours := groups()
	w.g.Expect(ours).To(HaveLen(2+5), "each shape of the limited pool, a doubling ladder of the flexible one, nothing of the unlimited one")
	w.g.Expect(ours).To(HaveKey("groups-flexible/flex-1-2Gi"))
	w.g.Expect(ours).To(HaveKey("groups-flexible/flex-2-4Gi"))
	w.g.Expect(ours).To(HaveKey("groups-flexible/flex-8-16Gi"))
	w.g.Expect(ours).To(HaveKey("groups-flexible/flex-12-24Gi"), "the largest size closes the ladder")
	cheap, large := ours["groups-limited/c2"], ours["groups-limited/c4"]
	w.g.Expect(cheap.GetMinSize()).To(BeEquivalentTo(1), "minNodes is the cheapest group's minimum")
	w.g.Expect(large.GetMinSize()).To(BeZero())
	w.g.Expect(cheap.GetMaxSize()).To(BeEquivalentTo(5), "limits.nodes")
	w.g.Expect(cheap.GetDebug()).To(And(ContainSubstring("NodePool groups-limited shape c2"), ContainSubstring("provider groups-limited")))

	// Two nodes of c4 leave the pool room for three more, of either shape;
	// the pool's minimum is met by them.
	w.claimOf(pool, "c4", nil)
	w.claimOf(pool, "c4", nil)
	ours = groups()
	w.g.Expect(ours["groups-limited/c4"].GetMaxSize()).To(BeEquivalentTo(5), "2 held and 3 to come")
	w.g.Expect(ours["groups-limited/c2"].GetMaxSize()).To(BeEquivalentTo(3), "the pool's limit spans its groups")
	w.g.Expect(ours["groups-limited/c2"].GetMinSize()).To(BeZero(), "the other group holds the pool's minimum")
	_ = flexible
}

func TestNodeGroupForNode(t *testing.T) {
	w := newWorld(t, "owner")
	pool := w.pool("owner-a", nil)
	w.pool("owner-unlimited", func(pool *v1alpha1.NodePool) {
		pool.Spec.Limits = nil
		pool.Spec.MinNodes = 0
	})
	booting := w.claim(pool, launchedStatus)
	waiting := w.claim(pool, nil)
	ca := newClient(t)

	for _, tc := range []struct {
		name  string
		node  *protos.ExternalGrpcNode
		group string
	}{
		{"a node with the pool and instance-type labels is in that shape's group",
			&protos.ExternalGrpcNode{Name: "n1", ProviderID: "simulated://n1", Labels: map[string]string{v1alpha1.LabelNodePool: "owner-a", corev1.LabelInstanceTypeStable: "c4"}}, "owner-a/c4"},
		{"an unlabelled node is found by its claim's providerID",
			&protos.ExternalGrpcNode{Name: booting.Name, ProviderID: booting.Status.ProviderID}, "owner-a/c2"},
		{"a stand-in node with a placeholder id is found by its claim",
			&protos.ExternalGrpcNode{Name: PlaceholderPrefix + waiting.Name, ProviderID: PlaceholderPrefix + waiting.Name}, "owner-a/c2"},
		{"a node of a shape the pool does not offer is in no group",
			&protos.ExternalGrpcNode{Name: "n4", Labels: map[string]string{v1alpha1.LabelNodePool: "owner-a", corev1.LabelInstanceTypeStable: "c64"}}, ""},
		{"a node that is not ours is in no group",
			&protos.ExternalGrpcNode{Name: "control-plane-1", ProviderID: "other://control-plane-1", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}, ""},
		{"a node of a pool without limits.nodes is in no group",
			&protos.ExternalGrpcNode{Name: "n2", Labels: map[string]string{v1alpha1.LabelNodePool: "owner-unlimited"}}, ""},
		{"a node of a deleted pool is in no group",
			&protos.ExternalGrpcNode{Name: "n3", Labels: map[string]string{v1alpha1.LabelNodePool: "owner-gone"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			response, err := ca.NodeGroupForNode(w.ctx, &protos.NodeGroupForNodeRequest{Node: tc.node})
			g.Expect(err).NotTo(HaveOccurred(), "never an error, also for nodes that are not ours")
			g.Expect(response.GetNodeGroup()).NotTo(BeNil())
			g.Expect(response.GetNodeGroup().GetId()).To(Equal(tc.group))
			if tc.group != "" {
				g.Expect(response.GetNodeGroup().GetMaxSize()).To(BeNumerically(">", 0))
			}
		})
	}
}

func TestTargetSizeFollowsClaims(t *testing.T) {
	w := newWorld(t, "target")
	pool := w.pool("target-a", nil)
	ca := newClient(t)
	targetSize := func() int32 {
		response, err := ca.NodeGroupTargetSize(w.ctx, &protos.NodeGroupTargetSizeRequest{Id: pool.Name + "/c2"})
		w.g.Expect(err).NotTo(HaveOccurred())
		return response.GetTargetSize()
	}
	w.g.Expect(targetSize()).To(BeZero())

	first := w.claim(pool, registeredStatus)
	w.claim(pool, nil)
	w.g.Expect(targetSize()).To(BeEquivalentTo(2), "a registered and a waiting claim")

	w.claimOf(pool, "c4", nil)
	w.g.Expect(targetSize()).To(BeEquivalentTo(2), "another shape's claim is another group's")

	w.deleting(first)
	w.g.Expect(targetSize()).To(BeEquivalentTo(1), "a claim being deleted no longer counts")

	asleep := w.claim(pool, asleepStatus)
	w.suspend(asleep)
	w.g.Expect(targetSize()).To(BeEquivalentTo(1), "a claim whose machine sleeps is no instance of the group")

	_, err := ca.NodeGroupTargetSize(w.ctx, &protos.NodeGroupTargetSizeRequest{Id: "target-none/c2"})
	w.g.Expect(status.Code(err)).To(Equal(codes.NotFound))
}

func TestIncreaseSize(t *testing.T) {
	w := newWorld(t, "increase")
	pool := w.pool("increase-a", nil)
	ca := newClient(t)
	w.claim(pool, registeredStatus)

	_, err := ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c2", Delta: 5})
	w.g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "1 + 5 is beyond the maximum of 5: %v", err)
	w.g.Expect(w.claims(pool.Name)).To(HaveLen(1), "a refused increase writes nothing")

	_, err = ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c2", Delta: 0})
	w.g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "a zero increase is refused")

	_, err = ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "increase-none/c2", Delta: 1})
	w.g.Expect(status.Code(err)).To(Equal(codes.NotFound))

	_, err = ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c2", Delta: 4})
	w.g.Expect(err).NotTo(HaveOccurred(), "1 + 4 reaches the maximum")
	claims := w.claims(pool.Name)
	w.g.Expect(claims).To(HaveLen(5))
	for _, claim := range claims[1:] {
		w.g.Expect(claim.Spec.Shape.Name).To(Equal("c2"), "the group's shape")
		w.g.Expect(claim.Labels).To(HaveKeyWithValue(v1alpha1.LabelNodePool, pool.Name))
		w.g.Expect(claim.Labels).To(HaveKeyWithValue("team", "a"))
		w.g.Expect(claim.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationTemplateHash, pool.TemplateHash(claim.Spec.Shape)))
	}
	response, err := ca.NodeGroupTargetSize(w.ctx, &protos.NodeGroupTargetSizeRequest{Id: pool.Name + "/c2"})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetTargetSize()).To(BeEquivalentTo(5), "the next call counts the new claims at once")

	_, err = ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c2", Delta: 1})
	w.g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "the group is full")
	_, err = ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c4", Delta: 1})
	w.g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "the pool's limit spans its groups: %v", err)
}

func TestIncreaseSizeWritesClaimsOfTheGroupsShape(t *testing.T) {
	w := newWorld(t, "shaped")
	pool := w.pool("shaped-a", nil)
	ca := newClient(t)
	_, err := ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c4", Delta: 2})
	w.g.Expect(err).NotTo(HaveOccurred())
	claims := w.claims(pool.Name)
	w.g.Expect(claims).To(HaveLen(2))
	for _, claim := range claims {
		w.g.Expect(claim.Spec.Shape.Name).To(Equal("c4"))
		w.g.Expect(claim.Spec.Shape.CPU.String()).To(Equal("4"))
	}
	response, err := ca.NodeGroupTargetSize(w.ctx, &protos.NodeGroupTargetSizeRequest{Id: pool.Name + "/c4"})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetTargetSize()).To(BeEquivalentTo(2))
}

func TestIncreaseSizeHonoursTheCPULimit(t *testing.T) {
	w := newWorld(t, "cpulimit")
	pool := w.pool("cpulimit-a", func(pool *v1alpha1.NodePool) {
		pool.Spec.Limits.CPU = qty("5")
	})
	ca := newClient(t)
	_, err := ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c2", Delta: 3})
	w.g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "three 2-cpu nodes exceed 5 cpu: %v", err)
	w.g.Expect(w.claims(pool.Name)).To(BeEmpty())
	_, err = ca.NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: pool.Name + "/c2", Delta: 2})
	w.g.Expect(err).NotTo(HaveOccurred())
}

func TestDeleteNodes(t *testing.T) {
	w := newWorld(t, "delete")
	pool := w.pool("delete-a", nil)
	other := w.pool("delete-b", nil)
	ca := newClient(t)
	running := w.claim(pool, registeredStatus)
	runningNode := w.node(running)
	strangerClaim := w.claim(other, registeredStatus)
	strangerNode := w.node(strangerClaim)
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "delete-foreign"}, Spec: corev1.NodeSpec{ProviderID: "other://delete-foreign"}}
	w.g.Expect(env.Client.Create(w.ctx, foreign)).To(Succeed())
	w.synced(foreign)
	t.Cleanup(func() { _ = env.Client.Delete(w.ctx, foreign) })
	asCASends := func(node *corev1.Node) *protos.ExternalGrpcNode {
		return &protos.ExternalGrpcNode{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels}
	}

	t.Run("a node of another pool refuses the whole request and nothing is deleted", func(t *testing.T) {
		g := NewWithT(t)
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{
			asCASends(runningNode), asCASends(strangerNode),
		}})
		g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%v", err)
		g.Expect(w.liveClaims(pool.Name)).To(ConsistOf(running.Name))
		g.Expect(w.liveClaims(other.Name)).To(ConsistOf(strangerClaim.Name))
	})
	t.Run("a node labelled for another pool is refused even when its providerID is ours", func(t *testing.T) {
		g := NewWithT(t)
		mislabelled := asCASends(runningNode)
		mislabelled.Labels = map[string]string{v1alpha1.LabelNodePool: other.Name}
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{mislabelled}})
		g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%v", err)
		g.Expect(w.liveClaims(pool.Name)).To(ConsistOf(running.Name))
	})
	t.Run("a node claimscale did not make is refused", func(t *testing.T) {
		g := NewWithT(t)
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{asCASends(foreign)}})
		g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%v", err)
	})
	t.Run("a stand-in for a machine that never registered is deleted by providerID", func(t *testing.T) {
		g := NewWithT(t)
		booting := w.claim(pool, launchedStatus)
		standIn := &protos.ExternalGrpcNode{Name: booting.Status.ProviderID, ProviderID: booting.Status.ProviderID,
			Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "unregistered"}}
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{standIn}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(w.liveClaims(pool.Name)).NotTo(ContainElement(booting.Name))
	})
	t.Run("a stand-in for a claim without a machine is deleted by its placeholder id", func(t *testing.T) {
		g := NewWithT(t)
		failed := w.claim(pool, failedStatus("LaunchFailed"))
		id := PlaceholderPrefix + failed.Name
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{
			{Name: id, ProviderID: id, Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "create-error"}},
		}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(w.liveClaims(pool.Name)).NotTo(ContainElement(failed.Name))
	})
	t.Run("a stand-in whose claim is already gone deletes nothing and succeeds", func(t *testing.T) {
		g := NewWithT(t)
		id := PlaceholderPrefix + "delete-a-vanished"
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{{Name: id, ProviderID: id}}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(w.liveClaims(pool.Name)).To(ConsistOf(running.Name))
	})
	t.Run("a registered node of the pool is deleted through its claim", func(t *testing.T) {
		g := NewWithT(t)
		_, err := ca.NodeGroupDeleteNodes(w.ctx, &protos.NodeGroupDeleteNodesRequest{Id: pool.Name + "/c2", Nodes: []*protos.ExternalGrpcNode{asCASends(runningNode)}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(w.liveClaims(pool.Name)).To(BeEmpty())
		g.Expect(w.liveClaims(other.Name)).To(ConsistOf(strangerClaim.Name))
		response, err := ca.NodeGroupTargetSize(w.ctx, &protos.NodeGroupTargetSizeRequest{Id: pool.Name + "/c2"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(response.GetTargetSize()).To(BeZero(), "the next call sees the deletion")
	})
}

func TestDecreaseTargetSizeWithdrawsOnlyClaimsThatHaveNotRegistered(t *testing.T) {
	w := newWorld(t, "decrease")
	pool := w.pool("decrease-a", nil)
	ca := newClient(t)
	running := w.claim(pool, registeredStatus)
	booting := w.claim(pool, launchedStatus)
	waiting := w.claim(pool, nil)

	_, err := ca.NodeGroupDecreaseTargetSize(w.ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: pool.Name + "/c2", Delta: -3})
	w.g.Expect(status.Code(err)).To(Equal(codes.FailedPrecondition), "3 would take a registered node: %v", err)
	w.g.Expect(w.liveClaims(pool.Name)).To(HaveLen(3), "a refused decrease deletes nothing")

	_, err = ca.NodeGroupDecreaseTargetSize(w.ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: pool.Name + "/c2", Delta: 1})
	w.g.Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "delta must be negative")

	_, err = ca.NodeGroupDecreaseTargetSize(w.ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: pool.Name + "/c2", Delta: -1})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(w.liveClaims(pool.Name)).To(ConsistOf(running.Name, booting.Name), "the claim not launched yet, %s, goes first", waiting.Name)

	_, err = ca.NodeGroupDecreaseTargetSize(w.ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: pool.Name + "/c2", Delta: -1})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(w.liveClaims(pool.Name)).To(ConsistOf(running.Name))
}

func TestNodeGroupNodesReportEachClaimsState(t *testing.T) {
	w := newWorld(t, "instances")
	pool := w.pool("instances-a", nil)
	ca := newClient(t)
	running := w.claim(pool, registeredStatus)
	booting := w.claim(pool, launchedStatus)
	waiting := w.claim(pool, nil)
	noCapacity := w.claim(pool, failedStatus("InsufficientCapacity"))
	failed := w.claim(pool, failedStatus("LaunchFailed"))
	inProgress := w.claim(pool, failedStatus(v1alpha1.ReasonLaunching))
	timedOut := w.claim(pool, func(claim *v1alpha1.NodeClaim) {
		launchedStatus(claim)
		setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionFalse, v1alpha1.ReasonRegistrationTimeout)
		setCondition(claim, v1alpha1.ConditionFailed, metav1.ConditionTrue, v1alpha1.ReasonRegistrationTimeout)
	})
	keptNoCapacity := w.claim(pool, func(claim *v1alpha1.NodeClaim) {
		setCondition(claim, v1alpha1.ConditionLaunched, metav1.ConditionFalse, "InsufficientCapacity")
		setCondition(claim, v1alpha1.ConditionFailed, metav1.ConditionTrue, v1alpha1.ReasonInsufficientCapacity)
	})
	neverReady := w.claim(pool, func(claim *v1alpha1.NodeClaim) {
		registeredStatus(claim)
		setCondition(claim, v1alpha1.ConditionInitialized, metav1.ConditionFalse, "NodeNotReady")
		meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionRegistered).LastTransitionTime = metav1.NewTime(time.Now().Add(-DefaultReadyTimeout - time.Minute))
	})
	leaving := w.claim(pool, registeredStatus)
	w.deleting(leaving)
	otherShape := w.claimOf(pool, "c4", registeredStatus)
	// Left from native mode: a machine asleep and one being put to sleep
	// are no instances cluster-autoscaler could time out and delete.
	asleep := w.claim(pool, asleepStatus)
	w.suspend(asleep)
	suspending := w.claim(pool, registeredStatus)
	w.suspend(suspending)

	response, err := ca.NodeGroupNodes(w.ctx, &protos.NodeGroupNodesRequest{Id: pool.Name + "/c2"})
	w.g.Expect(err).NotTo(HaveOccurred())
	type seen struct {
		state protos.InstanceStatus_InstanceState
		code  string
		class int32
	}
	got := map[string]seen{}
	for _, instance := range response.GetInstances() {
		got[instance.GetId()] = seen{instance.GetStatus().GetInstanceState(), instance.GetStatus().GetErrorInfo().GetErrorCode(), instance.GetStatus().GetErrorInfo().GetInstanceErrorClass()}
	}
	w.g.Expect(got).To(Equal(map[string]seen{
		running.Status.ProviderID:               {protos.InstanceStatus_instanceRunning, "", 0},
		booting.Status.ProviderID:               {protos.InstanceStatus_instanceCreating, "", 0},
		PlaceholderPrefix + waiting.Name:        {protos.InstanceStatus_instanceCreating, "", 0},
		PlaceholderPrefix + noCapacity.Name:     {protos.InstanceStatus_instanceCreating, "insufficient-capacity", 1},
		PlaceholderPrefix + failed.Name:         {protos.InstanceStatus_instanceCreating, "launch-failed", 99},
		PlaceholderPrefix + inProgress.Name:     {protos.InstanceStatus_instanceCreating, "", 0},
		timedOut.Status.ProviderID:              {protos.InstanceStatus_instanceCreating, "registration-timeout", 99},
		PlaceholderPrefix + keptNoCapacity.Name: {protos.InstanceStatus_instanceCreating, "insufficient-capacity", 1},
		leaving.Status.ProviderID:               {protos.InstanceStatus_instanceDeleting, "", 0},
		neverReady.Status.ProviderID:            {protos.InstanceStatus_instanceCreating, "node-never-ready", 99},
	}), "every claim of the group's shape, none of %s, not the sleeping %s and %s", otherShape.Name, asleep.Name, suspending.Name)
}

func TestTemplateNodeIsTheSchedulingCoresTemplate(t *testing.T) {
	w := newWorld(t, "template")
	pool := w.pool("template-a", nil)
	broken := w.pool("template-broken", func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "unsized"}}
	})
	ca := newClient(t)

	response, err := ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: pool.Name + "/c2"})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetNodeBytes()).NotTo(BeEmpty())
	node := &corev1.Node{}
	w.g.Expect(node.Unmarshal(response.GetNodeBytes())).To(Succeed())

	cheapest := scheduling.Shape{Name: "c2", CPU: resource.MustParse("2"), Memory: resource.MustParse("4Gi"), Price: 0.1}
	want, err := scheduling.TemplateNode(pool, cheapest, "zone-a", "any")
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(node.Status.Allocatable).To(HaveLen(len(want.Status.Allocatable)))
	for name, quantity := range want.Status.Allocatable {
		got := node.Status.Allocatable[name]
		w.g.Expect(got.Equal(quantity)).To(BeTrue(), "allocatable %s: %s, want %s", name, got.String(), quantity.String())
	}
	w.g.Expect(node.Status.Allocatable.Cpu().MilliValue()).To(BeEquivalentTo(1900), "2 cpu less 100m kubeReserved")
	w.g.Expect(node.Labels).To(And(
		HaveKeyWithValue(v1alpha1.LabelNodePool, pool.Name),
		HaveKeyWithValue(corev1.LabelInstanceTypeStable, "c2"),
		HaveKeyWithValue(corev1.LabelTopologyZone, "zone-a"),
		HaveKeyWithValue("team", "a"),
	))
	w.g.Expect(node.Spec.Taints).To(ConsistOf(HaveField("Key", "dedicated")))

	response, err = ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: pool.Name + "/c4"})
	w.g.Expect(err).NotTo(HaveOccurred())
	large := &corev1.Node{}
	w.g.Expect(large.Unmarshal(response.GetNodeBytes())).To(Succeed())
	w.g.Expect(large.Status.Allocatable.Cpu().MilliValue()).To(BeEquivalentTo(3900), "each group's template is its own shape")
	w.g.Expect(large.Labels).To(HaveKeyWithValue(corev1.LabelInstanceTypeStable, "c4"))

	_, err = ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: broken.Name + "/unsized"})
	w.g.Expect(status.Code(err)).To(Equal(codes.Unimplemented), "a template that cannot be built is Unimplemented, never empty: %v", err)
	_, err = ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: "template-none/c2"})
	w.g.Expect(status.Code(err)).To(Equal(codes.NotFound))
}

func TestPricing(t *testing.T) {
	w := newWorld(t, "pricing")
	priced := w.pool("pricing-named", nil)
	unpriced := w.pool("pricing-derived", func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes = v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
			MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("8"),
			MinMemory: resource.MustParse("2Gi"), MaxMemory: resource.MustParse("16Gi"),
		}}
	})
	flexible := w.pool("pricing-flexible", func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes = v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
			MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("8"),
			MinMemory: resource.MustParse("2Gi"), MaxMemory: resource.MustParse("16Gi"),
			PricePerCPU: "0.02", PricePerGiB: "0.005",
		}}
	})
	ca := newClient(t)
	running := w.claim(priced, registeredStatus)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	period := func(hours time.Duration) (*timestamppb.Timestamp, *timestamppb.Timestamp) {
		return timestamppb.New(start), timestamppb.New(start.Add(hours * time.Hour))
	}

	from, to := period(3)
	response, err := ca.PricingNodePrice(w.ctx, &protos.PricingNodePriceRequest{
		Node: &protos.ExternalGrpcNode{Name: running.Name, ProviderID: running.Status.ProviderID}, StartTimestamp: from, EndTimestamp: to,
	})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetPrice()).To(BeNumerically("~", 0.3, 1e-9), "c2 at 0.1 an hour for 3 hours")

	from, to = period(2)
	response, err = ca.PricingNodePrice(w.ctx, &protos.PricingNodePriceRequest{
		Node: &protos.ExternalGrpcNode{Name: "template-node", Labels: map[string]string{
			v1alpha1.LabelNodePool: priced.Name, corev1.LabelInstanceTypeStable: "c4",
		}}, StartTimestamp: from, EndTimestamp: to,
	})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetPrice()).To(BeNumerically("~", 0.4, 1e-9), "a template node is priced by its labels")

	template := func(pool *v1alpha1.NodePool) *protos.ExternalGrpcNode {
		response, err := ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: pool.Name + "/flex-1-2Gi"})
		w.g.Expect(err).NotTo(HaveOccurred())
		node := &corev1.Node{}
		w.g.Expect(node.Unmarshal(response.GetNodeBytes())).To(Succeed())
		return &protos.ExternalGrpcNode{Name: node.Name, Labels: node.Labels}
	}
	response, err = ca.PricingNodePrice(w.ctx, &protos.PricingNodePriceRequest{Node: template(flexible), StartTimestamp: from, EndTimestamp: to})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetPrice()).To(BeNumerically("~", 2*(0.02+2*0.005), 1e-9), "1 cpu and 2 GiB at the pool's rates for 2 hours")

	_, err = ca.PricingNodePrice(w.ctx, &protos.PricingNodePriceRequest{Node: template(unpriced), StartTimestamp: from, EndTimestamp: to})
	w.g.Expect(status.Code(err)).To(Equal(codes.Unimplemented), "a price derived from size is no price")

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{v1alpha1.LabelNodePool: priced.Name},
			Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("950m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
			}}}},
		},
	}
	podBytes, err := pod.Marshal()
	w.g.Expect(err).NotTo(HaveOccurred())
	podPrice, err := ca.PricingPodPrice(w.ctx, &protos.PricingPodPriceRequest{PodBytes: podBytes, StartTimestamp: from, EndTimestamp: to})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(podPrice.GetPrice()).To(BeNumerically("~", 2*0.2*950.0/3900, 1e-9),
		"the cheaper share: 950m of c4's 3900m at 0.2 an hour (c2 would be half of 1900m at 0.1) for 2 hours")

	pod.Spec.Tolerations = nil
	podBytes, err = pod.Marshal()
	w.g.Expect(err).NotTo(HaveOccurred())
	_, err = ca.PricingPodPrice(w.ctx, &protos.PricingPodPriceRequest{PodBytes: podBytes, StartTimestamp: from, EndTimestamp: to})
	w.g.Expect(status.Code(err)).To(Equal(codes.Unimplemented), "a pod no priced group admits has no price: %v", err)
}

func TestTheRemainingCallsAnswerAsTheContractSays(t *testing.T) {
	w := newWorld(t, "plain")
	ca := newClient(t)

	label, err := ca.GPULabel(w.ctx, &protos.GPULabelRequest{})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(label.GetLabel()).To(Equal("example.com/gpu"), "the configured label")

	types, err := ca.GetAvailableGPUTypes(w.ctx, &protos.GetAvailableGPUTypesRequest{})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(types.GetGpuTypes()).To(BeEmpty())

	_, err = ca.Refresh(w.ctx, &protos.RefreshRequest{})
	w.g.Expect(err).NotTo(HaveOccurred())

	_, err = ca.Cleanup(w.ctx, &protos.CleanupRequest{})
	w.g.Expect(err).NotTo(HaveOccurred())

	pool := w.pool("plain-a", func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 7 * time.Minute}
	})
	defaults := &protos.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.6, IgnoreDaemonSetsUtilization: true,
		ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
		MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
	}
	options, err := ca.NodeGroupGetOptions(w.ctx, &protos.NodeGroupAutoscalingOptionsRequest{Id: pool.Name + "/c2", Defaults: defaults})
	w.g.Expect(err).NotTo(HaveOccurred())
	got := options.GetNodeGroupAutoscalingOptions()
	w.g.Expect(got.GetMaxNodeProvisionDuration().AsDuration()).To(Equal(8*time.Minute), "the pool's registration timeout and a minute")
	w.g.Expect(got.GetScaleDownUtilizationThreshold()).To(Equal(0.5), "the defaults sent are echoed")
	w.g.Expect(got.GetScaleDownGpuUtilizationThreshold()).To(Equal(0.6))
	w.g.Expect(got.GetIgnoreDaemonSetsUtilization()).To(BeTrue())
	w.g.Expect(got.GetScaleDownUnneededDuration().AsDuration()).To(Equal(10 * time.Minute))
	w.g.Expect(got.GetScaleDownUnreadyDuration().AsDuration()).To(Equal(20 * time.Minute))

	_, err = ca.NodeGroupGetOptions(w.ctx, &protos.NodeGroupAutoscalingOptionsRequest{Id: pool.Name + "/c2"})
	w.g.Expect(status.Code(err)).To(Equal(codes.Unimplemented), "without defaults to echo: %v", err)
	_, err = ca.NodeGroupGetOptions(w.ctx, &protos.NodeGroupAutoscalingOptionsRequest{Id: "plain-none/c2", Defaults: defaults})
	w.g.Expect(status.Code(err)).To(Equal(codes.NotFound))
}
