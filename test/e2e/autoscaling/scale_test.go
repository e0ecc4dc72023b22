package autoscaling

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The 500-pod version of `make scale`: five Deployments of 100 pods of
// 0.8 cpu / 1Gi (one spread over two zones) on one 8 cpu / 32Gi shape. The
// nodes stay within 1 % of the lower bound, every machine is launched once
// and counted once, no line of the controllers' log is at error level (a
// retried write conflict is not an error), and scaling to zero removes
// every node.
func TestFiveHundredPodsPackWithinOnePercentOfTheLowerBound(t *testing.T) {
	logs := harness.TapControllerLogs(t)
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "scale-500")
	defer s.Cleanup()
	s.G.SetDefaultEventuallyTimeout(5 * time.Minute)
	s.CreateProvider(v1alpha1.SimulatedSettings{Zones: []string{"zone-a", "zone-b"}})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{{Name: "c8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.2"}}
		pool.Spec.Limits = nil
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "20%"}}
	})
	launched := func() float64 {
		var metric dto.Metric
		s.G.Expect(metrics.NodeClaimsLaunched.WithLabelValues(s.Name).Write(&metric)).To(Succeed())
		return metric.GetCounter().GetValue()
	}
	launchedBefore := launched()

	const deployments, replicas = 5, 100
	started := time.Now()
	var made []*appsv1.Deployment
	for i := range deployments {
		name := fmt.Sprintf("app-%d", i)
		made = append(made, s.CreateDeployment(name, replicas, "800m", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = harness.Ptr(int64(0))
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
			if i == 0 {
				d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
					MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				}}
			}
		}))
	}
	s.G.Eventually(func() int {
		running := 0
		for _, d := range made {
			running += s.RunningPods(d.Name)
		}
		return running
	}).Should(Equal(deployments*replicas), "every pod Running")
	t.Logf("%d pods Running %s after the Deployments were created", deployments*replicas, time.Since(started).Round(time.Second))
	// Claims still launching when the last pod bound would be nodes too many.
	s.G.Eventually(s.ReadyClaims).Should(Equal(len(s.Claims())), "every claim Ready")

	nodes := s.Nodes()
	s.G.Expect(nodes).NotTo(BeEmpty())
	allocatable := nodes[0].Status.Allocatable
	perNode := min(allocatable.Cpu().MilliValue()/800, allocatable.Memory().Value()/(1<<30), allocatable.Pods().Value())
	lowerBound := int(math.Ceil(float64(deployments*replicas) / float64(perNode)))
	t.Logf("%d nodes for a lower bound of %d (%d pods a node)", len(nodes), lowerBound, perNode)
	s.G.Expect(len(nodes)).To(BeNumerically("<=", int(math.Ceil(float64(lowerBound)*1.01))), "nodes within 1 %% of the lower bound")
	s.G.Expect(launched()-launchedBefore).To(BeEquivalentTo(len(s.Machines())), "nodeclaims_launched_total counts each machine made once")
	s.G.Expect(len(s.Machines())).To(Equal(len(s.Claims())), "one machine per claim")

	for _, d := range made {
		s.Scale(d, 0)
	}
	scaledDown := time.Now()
	s.G.Eventually(func() int { return len(s.Claims()) + len(s.Nodes()) + len(s.Machines()) }).Should(BeZero(),
		"every claim, node and machine removed")
	t.Logf("%d nodes removed %s after scaling to zero", len(nodes), time.Since(scaledDown).Round(time.Second))

	var errorLines []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "\tERROR\t") && !othersEventWrite(line) {
			errorLines = append(errorLines, line)
		}
	}
	s.G.Expect(errorLines).To(BeEmpty(), "error-level lines in the controllers' log")
}

// othersEventWrite says whether an error-level line is client-go's event
// broadcaster failing a write that is neither claimscale's doing nor its
// error: an event the API server refuses because its namespace is being
// deleted (other tests' pending pods, whose namespaces are still going
// away when this one starts), or a write cut short ("context canceled")
// because the manager whose broadcaster made it has stopped: a previous
// test's, whose broadcaster still had events queued or was sleeping 10 s
// before a retry (k8s.io/client-go/tools/events, attemptRecording).
func othersEventWrite(line string) bool {
	return strings.Contains(line, "because it is being terminated") ||
		strings.Contains(line, "Unable to write event") && strings.Contains(line, "context canceled")
}
