package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/kubectlplugin"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// why answers what is true now: a pod that never existed is not found, one
// that is gone says so with its last decision, and a node whose last
// record a later round no longer repeats (it emptied out, then took pods
// in a pool that consolidates only empty nodes) is answered as a round
// would decide it now, not with a frozen "(… left)". get and why speak
// kubectl: KIND NAME, pods -A, --pool, -w, -o json.
func TestWhyAndGetAnswerWhatIsTrueNow(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "why-now")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Hour
	})

	s.G.Eventually(func() error {
		_, err := cli.Run("why", "pod", "never-was", "-n", s.Namespace)
		return err
	}).Should(MatchError(ContainSubstring("pod %s/never-was not found", s.Namespace)), "once the controller's endpoint answers")

	// A pod no shape holds is pending with a record; why pods -A lists it.
	huge := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: s.Namespace},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"scenario": s.Name},
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")},
			}}},
		},
	}
	s.G.Expect(env.Client.Create(s.Ctx, huge)).To(Succeed())
	var pending string
	s.G.Eventually(func(g Gomega) {
		var err error
		pending, err = cli.Run("why", "pods", "-A")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pending).To(MatchRegexp(`(?m)^%s\s+huge\s+\S+\s+\S+ ago\s+Unschedulable\s+pool "%s": no shape fits`, s.Namespace, s.Name))
	}).Should(Succeed())
	t.Logf("kubectl claimscale why pods -A:\n%s", pending)
	out, err := cli.Run("why", "pod", "huge", "-n", s.Namespace, "-o", "json")
	s.G.Expect(err).NotTo(HaveOccurred())
	var answer kubectlplugin.PodAnswer
	s.G.Expect(json.Unmarshal([]byte(out), &answer)).To(Succeed(), out)
	s.G.Expect(answer.Exists).To(BeTrue())
	s.G.Expect(answer.Record.Pools[0].Kind).To(Equal("TooSmall"))

	s.G.Expect(env.Client.Delete(s.Ctx, huge)).To(Succeed())
	s.G.Eventually(func(g Gomega) {
		out = cli.Why(g, "pod/huge", "-n", s.Namespace)
		g.Expect(out).To(HavePrefix("pod %s/huge is gone; the last decision about it:\npod %s/huge: Unschedulable", s.Namespace, s.Namespace))
	}).Should(Succeed())
	t.Logf("kubectl claimscale why pod/huge (deleted):\n%s", out)

	// get -w prints the booting claim with its shape and price, then its
	// row again as it changes.
	watchCtx, stopWatch := context.WithCancel(s.Ctx)
	watched := &harness.LockedBuffer{}
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- cli.RunContext(watchCtx, strings.NewReader(""), watched, "get", "--pool", s.Name, "-w")
	}()
	s.G.Eventually(watched.String).Should(ContainSubstring("(pool: 0 claims, limit 20 nodes)"), "an empty pool's row")
	web := s.CreateDeployment("web", 1, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(1))
	claim := s.Claims()[0]
	s.G.Eventually(watched.String).Should(MatchRegexp(`(?m)^%s\s+%s\s+-\s+c4\s+-\s+\S+\s+-\s+-\s+0\.1\s+(Pending|Launched)$`, s.Name, claim.Name), "the booting claim's shape and price")
	s.G.Eventually(watched.String).Should(MatchRegexp(`(?m)^%s\s+%s\s+%s\s+c4\s+-\s+\S+\s+\d+%%\s+\d+%%\s+0\.1\s+Ready$`, s.Name, claim.Name, claim.Status.NodeName), "the Ready claim")
	stopWatch()
	s.G.Expect(<-watchDone).To(Succeed())
	t.Logf("kubectl claimscale get --pool %s -w:\n%s", s.Name, watched.String())

	out, err = cli.Run("get", "--pool", s.Name, "-o", "json")
	s.G.Expect(err).NotTo(HaveOccurred())
	var report kubectlplugin.ClusterReport
	s.G.Expect(json.Unmarshal([]byte(out), &report)).To(Succeed(), out)
	s.G.Expect(report.Pools).To(HaveLen(1))
	s.G.Expect(report.Claims).To(ConsistOf(HaveField("NodeClaim", claim.Name)))

	// Emptied: the round holds the node for consolidateAfter.
	s.Scale(web, 0)
	node := s.Nodes()[0].Name
	s.G.Eventually(func(g Gomega) {
		out = cli.Why(g, "node", node)
		g.Expect(out).To(ContainSubstring("node %s (claim %s, pool %s): Kept, ConsolidateAfter", node, claim.Name, s.Name))
	}).Should(Succeed())
	t.Logf("kubectl claimscale why node %s (empty):\n%s", node, out)
	// Three pods land on it: the pool consolidates only empty nodes, so no
	// round looks at it any more, and the record of the empty node is
	// stale.
	s.Scale(web, 3)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(3))
	s.G.Eventually(func(g Gomega) {
		out = cli.Why(g, "node", node)
		g.Expect(out).To(ContainSubstring("node %s (claim %s, pool %s): not a candidate now, as a disruption round would decide it", node, claim.Name, s.Name))
		g.Expect(out).To(ContainSubstring("runs 3 pods, and pool %s consolidates only empty nodes", s.Name))
		// The empty node's record is not shown as current: either no
		// record is left, or it is shown beneath the current verdict as
		// one that no longer holds.
		g.Expect(out).NotTo(MatchRegexp(`(?m)^node \S+ .*: Kept, ConsolidateAfter`))
		if strings.Contains(out, "Kept, ConsolidateAfter") {
			g.Expect(out).To(MatchRegexp(`no longer holds: Kept, ConsolidateAfter`))
		}
	}).Should(Succeed())
	t.Logf("kubectl claimscale why node %s (3 pods):\n%s", node, out)
	s.G.Expect(s.Claims()).To(HaveLen(1))
	s.Scale(web, 0)
}
