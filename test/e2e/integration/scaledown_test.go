package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/kubectlplugin"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// simulate --scale-down decides with the disruption package's own code:
// an underused 4-cpu node that a 2-cpu node could replace is named with
// the replacement and the saving while nothing writes (every object keeps
// its resourceVersion), it agrees with what the controller records, first
// while consolidateAfter has not passed, then while a budget of 0 holds
// the node and then, run dry, when nothing does; and the controller, run
// for real, then replaces that very node.
func TestSimulateScaleDownNamesWhatConsolidationTakesAndWritesNothing(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	stop := harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "scale-down")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	s.CreateConsolidatingPool(time.Hour, harness.WithBudgetOfZero)
	big := s.CreateDeployment("big", 1, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("big") }).Should(Equal(1))
	s.CreateDeployment("small", 1, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(1))
	s.G.Expect(s.Claims()).To(HaveLen(1))
	kept := s.Claims()[0]
	s.G.Expect(kept.Spec.Shape.Name).To(Equal("c4"))
	s.Scale(big, 0)
	s.G.Eventually(func() int { return len(s.Pods("big")) }).Should(BeZero())

	nodeLine := "node " + kept.Status.NodeName + " (claim " + kept.Name + ", pool " + s.Name + ", 0.4/h): "
	// Its pods changed less than consolidateAfter ago: the controller
	// counts from when it saw big's pod go, simulate from when small's
	// pod was bound, both a moment ago. A quiet controller keeps the
	// record of the round that saw the change (an hour left, rounded).
	s.G.Eventually(func(g Gomega) {
		record := cli.Why(g, "node/"+kept.Status.NodeName)
		g.Expect(record).To(ContainSubstring("Kept, ConsolidateAfter"))
		g.Expect(record).To(MatchRegexp(`its pods last changed at \S+, consolidateAfter of 1h0m0s not yet passed \((?:1h0m0s|5\dm\d+s) left\)`))
		out, err := cli.Run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(regexp.QuoteMeta(nodeLine+"stays, ConsolidateAfter\n") + `  its pods last changed at \S+, consolidateAfter of 1h0m0s not yet passed \((?:1h0m0s|5\dm\d+s) left\)`))
		t.Logf("kubectl claimscale why node/%s:\n%s", kept.Status.NodeName, record)
		t.Logf("kubectl claimscale simulate --scale-down, consolidateAfter 1h:\n%s", out)
	}).Should(Succeed())
	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
	// The budget of 0 holds the node: the controller's record and the
	// simulation say so alike.
	s.G.Eventually(func(g Gomega) {
		g.Expect(cli.Why(g, "node/"+kept.Status.NodeName)).To(ContainSubstring("Kept, DisruptionBudget"))
		out, err := cli.Run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(nodeLine + "stays, DisruptionBudget\n  a consolidation candidate, but pool " + s.Name + "'s disruption budget for Underutilized allows 0 disruptions now"))
		t.Logf("kubectl claimscale simulate --scale-down, budget 0:\n%s", out)
	}).Should(Succeed())

	// The same cluster with the budget lifted, decided by a controller
	// that runs dry (so the node stays to be simulated) and by simulate.
	stop()
	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "100%"}}
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
	dry := harness.FreeLocalAddress(t)
	stop = harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: dry, DryRun: true})
	cli.Endpoint = "https://" + dry
	s.G.Eventually(func(g Gomega) {
		g.Expect(cli.Why(g, "node/"+kept.Status.NodeName)).To(ContainSubstring("Disrupting, Underutilized (dry-run)"))
	}).Should(Succeed(), "the controller, run dry, would consolidate the node")

	var out string
	s.G.Eventually(func(g Gomega) {
		before := s.ResourceVersions()
		var err error
		out, err = cli.Run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		// The dry-run controller writes claim conditions as it settles;
		// a run with no write at all around it shows simulate's share.
		g.Expect(s.ResourceVersions()).To(Equal(before), "nothing wrote while simulate ran")
		g.Expect(out).To(ContainSubstring("would replace 0.4/h of nodes (Underutilized) with c2 of pool " + s.Name + " at 0.2/h, saving 0.2/h\n"))
		g.Expect(out).To(ContainSubstring(nodeLine + "replace, Underutilized\n  its pods fit on one cheaper node: c2 of pool " + s.Name + " at 0.2/h instead of 0.4/h"))
	}).Should(Succeed())
	t.Logf("kubectl claimscale simulate --scale-down:\n%s", out)

	// The same decision offline, from a snapshot.
	snapshot, err := cli.Run("snapshot")
	s.G.Expect(err).NotTo(HaveOccurred())
	snapshotFile := filepath.Join(t.TempDir(), "cluster.json")
	s.G.Expect(os.WriteFile(snapshotFile, []byte(snapshot), 0o600)).To(Succeed())
	var offline, offlineErr bytes.Buffer
	replay := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &offline, ErrOut: &offlineErr})
	replay.SetArgs([]string{"simulate", "--from", snapshotFile, "--scale-down"})
	s.G.Expect(replay.Execute()).To(Succeed(), offlineErr.String())
	s.G.Expect(offline.String()).To(ContainSubstring(nodeLine+"replace, Underutilized\n"), "the replay decides as the live simulation did:\n%s", offline.String())

	// Run for real, the controller replaces that node with a c2.
	stop()
	harness.StartOperator(t, harness.OperatorOptions{})
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).NotTo(Equal(kept.Name))
		g.Expect(claims[0].Spec.Shape.Name).To(Equal("c2"))
	}).Should(Succeed(), "the controller replaced the node simulate named, with the shape it named")
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(1))
}
