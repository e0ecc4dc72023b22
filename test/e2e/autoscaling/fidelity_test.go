package autoscaling

import (
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling/workloads"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The packer plans pods with hard spreads, affinity and exclusions before
// the pods that share their label selectors, and buys nodes for that
// order; the kube-scheduler binds in its own order (priority, then when
// each pod joined its queue), onto nodes as they register. Karpenter's
// diverse mix (package workloads: generic pods, zone and hostname spreads
// over selectors that count the generic pods, zone self-affinity, hostname
// anti-affinity), 500 pods, created in an order the packer does not
// assume, must bind on the nodes of one provisioning round: no second
// scale-up, no pod left pending, no node bought that the scheduler leaves
// empty.
//
// The pods are created before the pool, and the pool only once the
// scheduler has found no node for every one of them, so that one round
// sees them all, as a batch would on a busy cluster; what the test holds
// the packer to is the scheduler's order afterwards.
//
// Not yet part of make test: with the nominations, the generator's order
// bound every pod on the 100 nodes of one round in both runs, where it had
// needed 3 more nodes without them; the shuffled order needed 1 more node
// in one run of two. A nomination keeps a pod's room on its node, but a
// spread is counted over the pods bound so far, so a pod whose domains are
// uneven at its turn can still miss its node. CLAIMSCALE_E2E_FIDELITY=1
// runs it.
func TestDiverseMixBindsOnTheNodesOfOneRound(t *testing.T) {
	if os.Getenv("CLAIMSCALE_E2E_FIDELITY") == "" {
		t.Skip("set CLAIMSCALE_E2E_FIDELITY=1: the shuffled order still buys a node too many at times")
	}
	harness.StartOperator(t, harness.OperatorOptions{})
	orders := []struct {
		name  string
		order func([]*corev1.Pod) []*corev1.Pod
	}{
		// The generator's order: the generic pods, counted by the spreads,
		// come first and take the nodes first.
		{"unconstrained-first", func(pods []*corev1.Pod) []*corev1.Pod { return pods }},
		{"shuffled", func(pods []*corev1.Pod) []*corev1.Pod {
			shuffled := slices.Clone(pods)
			rand.New(rand.NewPCG(7, 11)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			return shuffled
		}},
	}
	for _, order := range orders {
		t.Run(order.name, func(t *testing.T) {
			logs := harness.TapControllerLogs(t)
			s := harness.NewScenario(t, "fidelity-"+order.name)
			defer s.Cleanup()
			s.G.SetDefaultEventuallyTimeout(5 * time.Minute)
			s.CreateProvider(v1alpha1.SimulatedSettings{Zones: []string{"zone-a", "zone-b", "zone-c"}})

			generator := workloads.NewGenerator()
			generator.Namespace = s.Namespace
			generator.Adjust = func(pod *corev1.Pod) {
				pod.UID = ""
				pod.Spec.NodeSelector = map[string]string{"scenario": s.Name}
				pod.Spec.Tolerations = []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}
				pod.Spec.TerminationGracePeriodSeconds = harness.Ptr(int64(0))
				pod.Spec.Containers[0].Image = "registry.example/app:1"
			}
			pods := order.order(generator.Diverse(500))
			for _, pod := range pods {
				s.G.Expect(env.Client.Create(s.Ctx, pod)).To(Succeed())
			}
			s.G.Eventually(func() int { return unschedulable(s) }).Should(Equal(len(pods)),
				"the scheduler finds no node for any pod before the pool exists")

			s.CreatePool(func(pool *v1alpha1.NodePool) {
				pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
					{Name: "s2", CPU: harness.Qty("2"), Memory: harness.Qty("8Gi"), Price: "0.06"},
					{Name: "m4", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.11"},
					{Name: "l8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.2"},
					{Name: "x16", CPU: harness.Qty("16"), Memory: harness.Qty("64Gi"), Price: "0.38"},
				}
				pool.Spec.Limits = nil
				// Nothing is taken away while the test looks: an empty
				// node must be seen empty, not removed.
				pool.Spec.Disruption.ConsolidateAfter.Duration = time.Hour
			})
			s.G.Eventually(func() int { return boundRunning(s) }).Should(Equal(len(pods)), "every pod Running")
			s.G.Eventually(s.ReadyClaims).Should(Equal(len(s.Claims())), "every claim Ready")

			rounds := roundsThatBoughtNodes(logs.String())
			s.G.Expect(rounds).To(HaveLen(1), "one provisioning round buys the nodes; the rounds that bought some bought %v", rounds)
			s.G.Expect(s.Claims()).To(HaveLen(rounds[0]), "the pods bound on the nodes of the first round")
			perNode := map[string]int{}
			for _, pod := range scenarioPods(s) {
				perNode[pod.Spec.NodeName]++
			}
			var empty []string
			for _, node := range s.Nodes() {
				if perNode[node.Name] == 0 {
					empty = append(empty, node.Name+" ("+node.Labels[corev1.LabelTopologyZone]+")")
				}
			}
			s.G.Expect(empty).To(BeEmpty(), "nodes bought that the scheduler left empty")
			t.Logf("%d pods on %d nodes of one round", len(pods), rounds[0])
		})
	}
}

// newNodesOfRound reads how many nodes a provisioning round bought from
// its log line.
var newNodesOfRound = regexp.MustCompile(`scheduled pending pods.*"newNodes": (\d+)`)

// roundsThatBoughtNodes lists, in order, how many nodes each provisioning
// round in the log bought, leaving out the rounds that bought none.
func roundsThatBoughtNodes(log string) []int {
	var rounds []int
	for _, line := range strings.Split(log, "\n") {
		if match := newNodesOfRound.FindStringSubmatch(line); match != nil {
			if n, _ := strconv.Atoi(match[1]); n > 0 {
				rounds = append(rounds, n)
			}
		}
	}
	return rounds
}

func scenarioPods(s *harness.Scenario) []corev1.Pod {
	var list corev1.PodList
	s.G.Expect(env.Client.List(s.Ctx, &list, client.InNamespace(s.Namespace))).To(Succeed())
	return list.Items
}

// unschedulable counts the scenario's pods the scheduler found no node for.
func unschedulable(s *harness.Scenario) int {
	n := 0
	for _, pod := range scenarioPods(s) {
		for _, condition := range pod.Status.Conditions {
			if condition.Type == corev1.PodScheduled && condition.Status == corev1.ConditionFalse && condition.Reason == corev1.PodReasonUnschedulable {
				n++
			}
		}
	}
	return n
}

// boundRunning counts the scenario's pods Running on a node.
func boundRunning(s *harness.Scenario) int {
	n := 0
	for _, pod := range scenarioPods(s) {
		if pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}
