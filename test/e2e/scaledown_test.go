package e2e

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
)

// simulate --scale-down decides with the disruption package's own code:
// an underused 4-cpu node that a 2-cpu node could replace is named with
// the replacement and the saving while nothing writes (every object keeps
// its resourceVersion), it agrees with what the controller records, first
// while consolidateAfter has not passed, then while a budget of 0 holds
// the node and then, run dry, when nothing does; and the controller, run
// for real, then replaces that very node.
func TestSimulateScaleDownNamesWhatConsolidationTakesAndWritesNothing(t *testing.T) {
	address := freeLocalAddress(t)
	stop := startOperator(t, operatorOptions{metricsAddress: address})
	s := newScenario(t, "scale-down")
	defer s.cleanup()
	cli := newClaimscaleCLI(s.ctx, t, address)
	s.createConsolidatingPool(time.Hour, withBudgetOfZero)
	big := s.createDeployment("big", 1, "3", nil)
	s.g.Eventually(func() int { return s.runningPods("big") }).Should(Equal(1))
	s.createDeployment("small", 1, "1", nil)
	s.g.Eventually(func() int { return s.runningPods("small") }).Should(Equal(1))
	s.g.Expect(s.claims()).To(HaveLen(1))
	kept := s.claims()[0]
	s.g.Expect(kept.Spec.Shape.Name).To(Equal("c4"))
	s.scale(big, 0)
	s.g.Eventually(func() int { return len(s.pods("big")) }).Should(BeZero())

	nodeLine := "node " + kept.Status.NodeName + " (claim " + kept.Name + ", pool " + s.name + ", 0.4/h): "
	// Its pods changed less than consolidateAfter ago: the controller
	// counts from when it saw big's pod go, simulate from when small's
	// pod was bound, both a moment ago. A quiet controller keeps the
	// record of the round that saw the change (an hour left, rounded).
	s.g.Eventually(func(g Gomega) {
		record := cli.why(g, "node/"+kept.Status.NodeName)
		g.Expect(record).To(ContainSubstring("Kept, ConsolidateAfter"))
		g.Expect(record).To(MatchRegexp(`its pods last changed at \S+, consolidateAfter of 1h0m0s not yet passed \((?:1h0m0s|5\dm\d+s) left\)`))
		out, err := cli.run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(regexp.QuoteMeta(nodeLine+"stays, ConsolidateAfter\n") + `  its pods last changed at \S+, consolidateAfter of 1h0m0s not yet passed \((?:1h0m0s|5\dm\d+s) left\)`))
		t.Logf("kubectl claimscale why node/%s:\n%s", kept.Status.NodeName, record)
		t.Logf("kubectl claimscale simulate --scale-down, consolidateAfter 1h:\n%s", out)
	}).Should(Succeed())
	s.g.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		return env.Client.Update(s.ctx, &pool)
	}).Should(Succeed())
	// The budget of 0 holds the node: the controller's record and the
	// simulation say so alike.
	s.g.Eventually(func(g Gomega) {
		g.Expect(cli.why(g, "node/"+kept.Status.NodeName)).To(ContainSubstring("Kept, DisruptionBudget"))
		out, err := cli.run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(nodeLine + "stays, DisruptionBudget\n  a consolidation candidate, but pool " + s.name + "'s disruption budget for Underutilized allows 0 disruptions now"))
		t.Logf("kubectl claimscale simulate --scale-down, budget 0:\n%s", out)
	}).Should(Succeed())

	// The same cluster with the budget lifted, decided by a controller
	// that runs dry (so the node stays to be simulated) and by simulate.
	stop()
	s.g.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.ctx, client.ObjectKey{Name: s.name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "100%"}}
		return env.Client.Update(s.ctx, &pool)
	}).Should(Succeed())
	dry := freeLocalAddress(t)
	stop = startOperator(t, operatorOptions{metricsAddress: dry, dryRun: true})
	cli.endpoint = "https://" + dry
	s.g.Eventually(func(g Gomega) {
		g.Expect(cli.why(g, "node/"+kept.Status.NodeName)).To(ContainSubstring("Disrupting, Underutilized (dry-run)"))
	}).Should(Succeed(), "the controller, run dry, would consolidate the node")

	var out string
	s.g.Eventually(func(g Gomega) {
		before := s.resourceVersions()
		var err error
		out, err = cli.run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		// The dry-run controller writes claim conditions as it settles;
		// a run with no write at all around it shows simulate's share.
		g.Expect(s.resourceVersions()).To(Equal(before), "nothing wrote while simulate ran")
		g.Expect(out).To(ContainSubstring("would replace 0.4/h of nodes (Underutilized) with c2 of pool " + s.name + " at 0.2/h, saving 0.2/h\n"))
		g.Expect(out).To(ContainSubstring(nodeLine + "replace, Underutilized\n  its pods fit on one cheaper node: c2 of pool " + s.name + " at 0.2/h instead of 0.4/h"))
	}).Should(Succeed())
	t.Logf("kubectl claimscale simulate --scale-down:\n%s", out)

	// The same decision offline, from a snapshot.
	snapshot, err := cli.run("snapshot")
	s.g.Expect(err).NotTo(HaveOccurred())
	snapshotFile := filepath.Join(t.TempDir(), "cluster.json")
	s.g.Expect(os.WriteFile(snapshotFile, []byte(snapshot), 0o600)).To(Succeed())
	var offline, offlineErr bytes.Buffer
	replay := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &offline, ErrOut: &offlineErr})
	replay.SetArgs([]string{"simulate", "--from", snapshotFile, "--scale-down"})
	s.g.Expect(replay.Execute()).To(Succeed(), offlineErr.String())
	s.g.Expect(offline.String()).To(ContainSubstring(nodeLine+"replace, Underutilized\n"), "the replay decides as the live simulation did:\n%s", offline.String())

	// Run for real, the controller replaces that node with a c2.
	stop()
	startOperator(t, operatorOptions{})
	s.g.Eventually(func(g Gomega) {
		claims := s.claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).NotTo(Equal(kept.Name))
		g.Expect(claims[0].Spec.Shape.Name).To(Equal("c2"))
	}).Should(Succeed(), "the controller replaced the node simulate named, with the shape it named")
	s.g.Eventually(func() int { return s.runningPods("small") }).Should(Equal(1))
}
