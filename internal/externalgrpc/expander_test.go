package externalgrpc

import (
	"crypto/tls"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc/protos"
)

// newExpanderClient dials the shared server's expander the way
// cluster-autoscaler does: TLS that verifies the server against a CA file,
// and no client certificate.
func newExpanderClient(t testing.TB) protos.ExpanderClient {
	t.Helper()
	creds, err := credentials.NewClientTLSFromFile(caFile, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial(expanderAddress, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return protos.NewExpanderClient(conn)
}

// samplePool is the sample pool's three shapes at their prices.
func samplePool(pool *v1alpha1.NodePool) {
	pool.Spec.Shapes = v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
		{Name: "small", CPU: qty("2"), Memory: qty("4Gi"), Price: "0.05"},
		{Name: "medium", CPU: qty("4"), Memory: qty("8Gi"), Price: "0.10"},
		{Name: "large", CPU: qty("8"), Memory: qty("16Gi"), Price: "0.20"},
	}}
	pool.Spec.Limits.Nodes = ptr(int32(20))
	pool.Spec.MinNodes = 0
}

// pendingPods are n pods of one cpu that tolerate the test pools' taint.
func pendingPods(n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default", UID: types.UID(fmt.Sprint("uid-web-", i))},
			Spec: corev1.PodSpec{
				Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi"),
				}}}},
			},
		})
	}
	return pods
}

// caOptions builds the request cluster-autoscaler sends: for each group,
// its template node from NodeGroupTemplateNodeInfo and an option with the
// nodes its binpacking estimator would ask for (pods per node by cpu, as
// the template's allocatable allows) and every pending pod.
func caOptions(g *WithT, w *world, groups []string, pods []*corev1.Pod) *protos.BestOptionsRequest {
	ca := newClient(w.t)
	request := &protos.BestOptionsRequest{NodeBytesMap: map[string][]byte{}}
	var podBytes [][]byte
	for _, pod := range pods {
		encoded, err := pod.Marshal()
		g.Expect(err).NotTo(HaveOccurred())
		podBytes = append(podBytes, encoded)
	}
	for _, id := range groups {
		template, err := ca.NodeGroupTemplateNodeInfo(w.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
		g.Expect(err).NotTo(HaveOccurred())
		node := &corev1.Node{}
		g.Expect(node.Unmarshal(template.GetNodeBytes())).To(Succeed())
		perNode := int(node.Status.Allocatable.Cpu().MilliValue() / 1000)
		request.NodeBytesMap[id] = template.GetNodeBytes()
		request.Options = append(request.Options, &protos.Option{
			NodeGroupId: id, NodeCount: int32((len(pods) + perNode - 1) / perNode), Debug: id, PodBytes: podBytes,
		})
	}
	return request
}

func TestTheExpanderPrefersTheCheapestPacking(t *testing.T) {
	w := newWorld(t, "expander")
	pool := w.pool("expander-a", samplePool)
	expander := newExpanderClient(t)
	groups := []string{pool.Name + "/small", pool.Name + "/medium", pool.Name + "/large"}

	// 20 pods of 1 cpu: small (1.9 cpu allocatable) packs one a node, 20
	// nodes for 1.00 an hour; medium three, 7 for 0.70; large seven, 3 for
	// 0.60.
	response, err := expander.BestOptions(w.ctx, caOptions(w.g, w, groups, pendingPods(20)))
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetOptions()).To(ConsistOf(HaveField("NodeGroupId", pool.Name+"/large")))

	// 3 pods: small 3 nodes at 0.15, medium one at 0.10, large one at 0.20.
	response, err = expander.BestOptions(w.ctx, caOptions(w.g, w, groups, pendingPods(3)))
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetOptions()).To(ConsistOf(HaveField("NodeGroupId", pool.Name+"/medium")))

	// 1 pod: small is cheapest.
	response, err = expander.BestOptions(w.ctx, caOptions(w.g, w, groups, pendingPods(1)))
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetOptions()).To(ConsistOf(HaveField("NodeGroupId", pool.Name+"/small")))
}

func TestTheExpanderNeverFiltersEverythingAway(t *testing.T) {
	w := newWorld(t, "expnone")
	pool := w.pool("expnone-a", samplePool)
	expander := newExpanderClient(t)
	request := caOptions(w.g, w, []string{pool.Name + "/small", pool.Name + "/large"}, pendingPods(4))
	foreign := &protos.Option{NodeGroupId: "some-other-cloud-group", NodeCount: 1, PodBytes: request.Options[0].PodBytes}
	request.Options = append(request.Options, foreign)

	// 4 pods: four small nodes and one large cost 0.20 alike; the fewest
	// nodes win. The option of a group claimscale does not serve is not
	// judged, and not chosen.
	response, err := expander.BestOptions(w.ctx, request)
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetOptions()).To(ConsistOf(HaveField("NodeGroupId", pool.Name+"/large")))

	// With nothing it can judge, every option is returned: an empty answer
	// would stop cluster-autoscaler from scaling up at all.
	response, err = expander.BestOptions(w.ctx, &protos.BestOptionsRequest{Options: []*protos.Option{foreign}})
	w.g.Expect(err).NotTo(HaveOccurred())
	w.g.Expect(response.GetOptions()).To(ConsistOf(HaveField("NodeGroupId", "some-other-cloud-group")))
}

func TestTheExpanderServesTLSWithoutClientCertificates(t *testing.T) {
	g := NewWithT(t)
	w := newWorld(t, "exptls")

	_, err := newExpanderClient(t).BestOptions(w.ctx, &protos.BestOptionsRequest{})
	g.Expect(err).NotTo(HaveOccurred(), "cluster-autoscaler's client presents no certificate and is served")

	plain, err := grpc.NewClient(expanderAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	g.Expect(err).NotTo(HaveOccurred())
	defer plain.Close()
	_, err = protos.NewExpanderClient(plain).BestOptions(w.ctx, &protos.BestOptionsRequest{})
	g.Expect(err).To(HaveOccurred(), "plaintext is refused")

	unverified, err := grpc.NewClient(expanderAddress, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	g.Expect(err).NotTo(HaveOccurred())
	defer unverified.Close()
	_, err = protos.NewExpanderClient(unverified).BestOptions(w.ctx, &protos.BestOptionsRequest{})
	g.Expect(err).To(MatchError(ContainSubstring("certificate")), "a client that does not trust claimscale's CA cannot verify it")

	// The expander's listener is not a way around the CloudProvider's
	// client certificates: it serves only the expander.
	creds, err := credentials.NewClientTLSFromFile(caFile, "")
	g.Expect(err).NotTo(HaveOccurred())
	conn, err := dial(expanderAddress, creds)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	_, err = protos.NewCloudProviderClient(conn).NodeGroupIncreaseSize(w.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "exptls/c2", Delta: 1})
	g.Expect(err).To(MatchError(ContainSubstring("Unimplemented")))
}
