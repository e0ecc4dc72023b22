package integration

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	pb "github.com/claimscale/claimscale/internal/externalscaler/protos"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// queueScaler answers like a KEDA external scaler for a queue: active
// while the queue holds jobs, one metric, its length. It records the
// ScaledObjectRef it was asked with.
type queueScaler struct {
	pb.UnimplementedExternalScalerServer
	mu       sync.Mutex
	length   float64
	asked    *pb.ScaledObjectRef
	metricOK bool
}

func (q *queueScaler) set(length float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.length = length
}

func (q *queueScaler) lastRef() *pb.ScaledObjectRef {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.asked
}

func (q *queueScaler) IsActive(_ context.Context, ref *pb.ScaledObjectRef) (*pb.IsActiveResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked = ref
	return &pb.IsActiveResponse{Result: q.length > 0}, nil
}

func (q *queueScaler) GetMetricSpec(context.Context, *pb.ScaledObjectRef) (*pb.GetMetricSpecResponse, error) {
	return &pb.GetMetricSpecResponse{MetricSpecs: []*pb.MetricSpec{{MetricName: "queueLength", TargetSizeFloat: 50}}}, nil
}

func (q *queueScaler) GetMetrics(_ context.Context, request *pb.GetMetricsRequest) (*pb.GetMetricsResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.metricOK = request.GetMetricName() == "queueLength"
	return &pb.GetMetricsResponse{MetricValues: []*pb.MetricValue{{MetricName: "queueLength", MetricValueFloat: q.length}}}, nil
}

// A pool's headroom follows a KEDA external scaler served by the test: a
// queue of 25 jobs at 10 per node wants 3 nodes, an empty queue none. When
// the scaler goes away its last answer stands for the grace period, the
// pool's condition says so, and then the headroom falls to the floor.
func TestExternalScalerRaisesHeadroomAndFallsBackWhenUnreachable(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scaler := &queueScaler{}
	server := grpc.NewServer()
	pb.RegisterExternalScalerServer(server, scaler)
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()

	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "external-scaler")
	defer s.Cleanup()
	defer s.DropWarmCapacity()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	grace := 8 * time.Second
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		pool.Spec.Headroom = &v1alpha1.Headroom{External: &v1alpha1.ExternalHeadroom{
			Address:       listener.Addr().String(),
			Metadata:      map[string]string{"queue": "jobs"},
			TargetPerNode: harness.Qty("10"),
			Max:           5,
			GracePeriod:   &metav1.Duration{Duration: grace},
		}}
	})
	condition := func() *metav1.Condition {
		var pool v1alpha1.NodePool
		s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool)).To(Succeed())
		return meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionExternalHeadroom)
	}
	s.G.Eventually(condition).Should(HaveField("Status", metav1.ConditionTrue))
	s.G.Consistently(func() int { return len(s.Claims()) }, 2*time.Second, 250*time.Millisecond).Should(BeZero(), "an empty queue wants no headroom")
	s.G.Expect(scaler.lastRef().GetName()).To(Equal(s.Name), "the ScaledObjectRef names the pool")
	s.G.Expect(scaler.lastRef().GetScalerMetadata()).To(Equal(map[string]string{"queue": "jobs"}))

	scaler.set(25)
	s.G.Eventually(s.ReadyClaims).Should(Equal(3), "25 jobs at 10 per node want 3 nodes")
	s.G.Consistently(func() int { return len(s.Claims()) }, 3*time.Second, 250*time.Millisecond).Should(Equal(3))
	scaler.mu.Lock()
	s.G.Expect(scaler.metricOK).To(BeTrue(), "GetMetrics asks for the metric GetMetricSpec named")
	scaler.mu.Unlock()

	scaler.set(0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero(), "back to no headroom when the queue empties")

	scaler.set(25)
	s.G.Eventually(s.ReadyClaims).Should(Equal(3))
	server.Stop()
	stopped := time.Now()
	s.G.Eventually(condition).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "ExternalScalerUnreachable"),
		HaveField("Message", ContainSubstring("last answer of 3 stands until"))))
	s.G.Consistently(func() int { return len(s.Claims()) }, time.Until(stopped.Add(grace-2*time.Second)), 250*time.Millisecond).Should(Equal(3),
		"the last answer stands for the grace period")
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero(), "then the floor of 0")
	// The count falls when the grace period ends; the condition says so at
	// the poller's next round.
	s.G.Eventually(func() string { return condition().Message }).Should(ContainSubstring("headroom is the floor of 0"))

	s.DropWarmCapacity()
	s.G.Eventually(condition).Should(BeNil(), "no ExternalHeadroom condition once the pool has no external headroom")
}
