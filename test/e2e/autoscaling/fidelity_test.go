package autoscaling

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
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
// Registration nominates each node's planned pods before it lets pods
// onto the node, provisioning counts a nominated pod on its node (as the
// scheduler does), and a pod planned on a claim still booting on the
// claim's node, so that rounds run while the first round's nodes register
// do not pack those pods again among the booting claims (where a pod
// could lose its node, or two anti-affine pods share one). The packer
// keeps every hard spread that counts pods packed after it (the spread
// selectors here count the generic pods), so each spread holds on its
// node once all pods are bound: a pod the scheduler fails at its turn,
// because the domains were uneven then, binds there later, and a round
// that sees it pending meanwhile finds its room instead of buying a node
// (see docs/tuning.md). A failure logs the claims bought after the first
// round and the pods on them.
func TestDiverseMixBindsOnTheNodesOfOneRound(t *testing.T) {
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
			s.G.Eventually(func() int { return s.RunningPods("") }).Should(Equal(len(pods)), "every pod Running")
			s.G.Eventually(s.ReadyClaims).Should(Equal(len(s.Claims())), "every claim Ready")

			rounds := roundsThatBoughtNodes(logs.String())
			if len(rounds) > 1 {
				describeLateNodes(t, s, rounds[0])
			}
			s.G.Expect(rounds).To(HaveLen(1), "one provisioning round buys the nodes; the rounds that bought some bought %v", rounds)
			s.G.Expect(s.Claims()).To(HaveLen(rounds[0]), "the pods bound on the nodes of the first round")
			perNode := map[string]int{}
			for _, pod := range s.Pods("") {
				perNode[pod.Spec.NodeName]++
			}
			var empty []string
			for _, node := range s.Nodes() {
				if perNode[node.Name] == 0 {
					empty = append(empty, node.Name+" ("+node.Labels[corev1.LabelTopologyZone]+")")
				}
			}
			s.G.Expect(empty).To(BeEmpty(), "nodes bought that the scheduler left empty")
			later, replaced := laterRounds(logs.String())
			t.Logf("%d pods on %d nodes of one round; %d rounds after it placed pods the scheduler had not bound %d times on the nodes there were", len(pods), rounds[0], later, replaced)
		})
	}
}

// newNodesOfRound reads how many nodes a provisioning round bought from
// its log line.
var newNodesOfRound = regexp.MustCompile(`scheduled pending pods.*"newNodes": (\d+)`)

// placedOfRound reads how many pods a provisioning round placed on
// nodes there were (existing or booting) from its log line.
var placedOfRound = regexp.MustCompile(`scheduled pending pods.*"newNodes": (\d+), "placedOnExisting": (\d+)`)

// laterRounds counts the provisioning rounds after the first that bought
// nodes that placed pods, and the pods they placed.
func laterRounds(log string) (rounds, pods int) {
	bought := false
	for _, line := range strings.Split(log, "\n") {
		match := placedOfRound.FindStringSubmatch(line)
		if match == nil {
			continue
		}
		if !bought {
			bought = match[1] != "0"
			continue
		}
		if n, _ := strconv.Atoi(match[2]); n > 0 {
			rounds++
			pods += n
		}
	}
	return rounds, pods
}

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

// unschedulable counts the scenario's pods the scheduler found no node for.
func unschedulable(s *harness.Scenario) int {
	n := 0
	for _, pod := range s.Pods("") {
		for _, condition := range pod.Status.Conditions {
			if condition.Type == corev1.PodScheduled && condition.Status == corev1.ConditionFalse && condition.Reason == corev1.PodReasonUnschedulable {
				n++
			}
		}
	}
	return n
}

// describeLateNodes logs the claims bought after the first round's, with
// the pods on their nodes, and every pod the scheduler failed once nodes
// were there, with what it said: what a failure needs to be read.
func describeLateNodes(t *testing.T, s *harness.Scenario, first int) {
	claims := s.Claims()
	sort.Slice(claims, func(i, j int) bool { return claims[i].CreationTimestamp.Before(&claims[j].CreationTimestamp) })
	late := map[string]bool{}
	for _, claim := range claims[min(first, len(claims)):] {
		late[claim.Status.NodeName] = true
		t.Logf("late claim %s, node %q, zone %s", claim.Name, claim.Status.NodeName, claim.Labels[corev1.LabelTopologyZone])
	}
	var events corev1.EventList
	s.G.Expect(env.Client.List(s.Ctx, &events, client.InNamespace(s.Namespace))).To(Succeed())
	failures := map[string][]string{}
	for _, event := range events.Items {
		if event.Reason == "FailedScheduling" && !strings.Contains(event.Message, "no nodes available") && !strings.HasPrefix(event.Message, "0/0 ") {
			failures[event.InvolvedObject.Name] = append(failures[event.InvolvedObject.Name], event.Message)
		}
	}
	for _, pod := range s.Pods("") {
		if !late[pod.Spec.NodeName] && failures[pod.Name] == nil {
			continue
		}
		var asks []string
		for _, c := range pod.Spec.TopologySpreadConstraints {
			asks = append(asks, fmt.Sprintf("spread %s skew %d %s", c.TopologyKey, c.MaxSkew, c.WhenUnsatisfiable))
		}
		if a := pod.Spec.Affinity; a != nil && a.PodAffinity != nil {
			asks = append(asks, "pod affinity")
		}
		if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
			asks = append(asks, "pod anti-affinity")
		}
		t.Logf("pod %s on %s (late: %t), labels %v, asks %v, failed: %q", pod.Name, pod.Spec.NodeName, late[pod.Spec.NodeName], pod.Labels, asks, failures[pod.Name])
	}
}
