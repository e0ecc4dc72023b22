package autoscaling

import (
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// Ten nodes, each carrying one pod of a fifth of its cpu, consolidate to
// at most the lower bound plus one, without a pod waiting long for a
// place and without going below what the PodDisruptionBudget allows.
func TestConsolidationPacksUnderusedNodes(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "consolidate")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = 2 * time.Second
	})
	const nodes, replicas = 10, 10
	underusedNodes(s, nodes, replicas)
	s.CreatePodDisruptionBudget("small", 1)
	before := len(s.Claims())
	s.G.Expect(before).To(Equal(nodes))

	pods := trackPods(s, "small", replicas)
	defer pods.stop()
	budget := trackPodDisruptionBudget(s, "small")
	defer budget.Stop()

	started := time.Now()
	s.SetConsolidationPolicy(v1alpha1.ConsolidationWhenEmptyOrUnderutilized)
	// 10 pods of 800m on 4-cpu nodes: 5 fit on one node, so 2 nodes at
	// the least.
	const lowerBound = 2
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(len(claims)).To(BeNumerically("<=", lowerBound+1))
		for _, claim := range claims {
			g.Expect(claim.DeletionTimestamp.IsZero()).To(BeTrue(), "claim %s still going", claim.Name)
			g.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}
		g.Expect(s.RunningPods("small")).To(Equal(replicas))
	}).Should(Succeed())
	after := len(s.Claims())
	t.Logf("consolidated %d nodes to %d (lower bound %d) in %s", before, after, lowerBound, time.Since(started).Round(100*time.Millisecond))

	pods.stop()
	budget.Stop()
	s.G.Expect(pods.fewestRunning()).To(BeNumerically(">=", replicas-1), "Running pods at the worst moment")
	s.G.Expect(pods.longestWait()).To(BeNumerically("<", 30*time.Second), "longest a pod waited to run again")
	s.G.Expect(budget.violations()).To(BeEmpty(), "PodDisruptionBudget states with fewer healthy pods than desired")
	t.Logf("fewest Running pods %d of %d; longest wait to run %s", pods.fewestRunning(), replicas, pods.longestWait().Round(100*time.Millisecond))
}

// A node whose pod fits only on a smaller, cheaper shape is replaced by one
// node of that shape, and the old node goes only once the new one is
// Ready.
func TestUnderusedNodeIsReplacedByACheaperOne(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "cheaper")
	defer s.Cleanup()
	s.CreateConsolidatingPool(2 * time.Second)
	big := s.CreateDeployment("big", 1, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("big") }).Should(Equal(1))
	s.CreateDeployment("small", 1, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(1))
	s.G.Expect(s.Claims()).To(HaveLen(1), "the small pod joins the big one on its c4 node")
	old := s.Claims()[0]
	s.G.Expect(old.Spec.Shape.Name).To(Equal("c4"))

	var mu sync.Mutex
	readyBeforeDeletion, deletedBeforeReady := false, false
	ready := map[string]bool{}
	seen := map[string]bool{}
	claims := s.WatchClaims(func(_ watch.EventType, claim *v1alpha1.NodeClaim) {
		mu.Lock()
		defer mu.Unlock()
		seen[claim.Name] = true
		if claim.Name != old.Name && meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady) {
			ready[claim.Name] = true
		}
		if claim.Name == old.Name && !claim.DeletionTimestamp.IsZero() {
			if len(ready) > 0 {
				readyBeforeDeletion = true
			} else {
				deletedBeforeReady = true
			}
		}
	})
	defer claims.Stop()

	s.Scale(big, 0)
	s.G.Eventually(func(g Gomega) {
		current := s.Claims()
		g.Expect(current).To(HaveLen(1))
		g.Expect(current[0].Name).NotTo(Equal(old.Name))
		g.Expect(current[0].Spec.Shape.Name).To(Equal("c2"))
		g.Expect(s.RunningPods("small")).To(Equal(1))
	}).Should(Succeed())
	claims.Stop()
	mu.Lock()
	defer mu.Unlock()
	s.G.Expect(deletedBeforeReady).To(BeFalse(), "the c4 claim was deleted before its replacement was Ready")
	s.G.Expect(readyBeforeDeletion).To(BeTrue(), "the c4 claim was deleted after its replacement was Ready")
	s.G.Expect(seen).To(HaveLen(2), "one replacement claim and no other")
	s.G.Expect(harness.EventsOf(s.G, "NodeClaim", old.Name)).To(ContainElement(ContainSubstring("one cheaper node")))
}

// With a budget of one node, consolidation takes one node at a time:
// checked on every change the API server reports, not only at the end.
func TestConsolidationDisruptsOneNodeAtATimeUnderABudgetOfOne(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "consolidate-budget")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
	})
	const nodes, replicas = 6, 6
	underusedNodes(s, nodes, replicas)

	var mu sync.Mutex
	most := 0
	disrupting := map[string]bool{}
	claims := s.WatchClaims(func(event watch.EventType, claim *v1alpha1.NodeClaim) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case event == watch.Deleted:
			delete(disrupting, claim.Name)
		case !claim.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDisrupting):
			disrupting[claim.Name] = true
		default:
			delete(disrupting, claim.Name)
		}
		most = max(most, len(disrupting))
	})
	defer claims.Stop()

	s.SetConsolidationPolicy(v1alpha1.ConsolidationWhenEmptyOrUnderutilized)
	// 6 pods of 800m: 2 nodes at the least.
	s.G.Eventually(func(g Gomega) {
		g.Expect(len(s.Claims())).To(BeNumerically("<=", 3))
		g.Expect(s.RunningPods("small")).To(Equal(replicas))
	}).Should(Succeed())
	claims.Stop()
	mu.Lock()
	defer mu.Unlock()
	s.G.Expect(most).To(Equal(1), "claims disrupting at once")
}

// A pod annotated do-not-disrupt keeps its underused node, which would
// otherwise be replaced by a cheaper one, until the annotation is removed.
func TestDoNotDisruptPodKeepsItsNode(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "do-not-disrupt")
	defer s.Cleanup()
	s.CreateConsolidatingPool(time.Second)
	big := s.CreateDeployment("big", 1, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("big") }).Should(Equal(1))
	s.CreateDeployment("guarded", 1, "1", func(deployment *appsv1.Deployment) {
		deployment.Spec.Template.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
	})
	s.G.Eventually(func() int { return s.RunningPods("guarded") }).Should(Equal(1))
	s.G.Expect(s.Claims()).To(HaveLen(1))
	kept := s.Claims()[0]
	s.Scale(big, 0)

	s.G.Eventually(func() []string { return harness.EventsOf(s.G, "NodeClaim", kept.Name) }).
		Should(ContainElement(And(ContainSubstring("DisruptionBlocked"), ContainSubstring(v1alpha1.AnnotationDoNotDisrupt))))
	s.G.Eventually(func(g Gomega) {
		var claim v1alpha1.NodeClaim
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&kept), &claim)).To(Succeed())
		condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable)
		g.Expect(condition).NotTo(BeNil())
		g.Expect(condition.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition.Reason).To(Equal(v1alpha1.ConsolidatableReasonDoNotDisrupt))
		g.Expect(condition.Message).To(ContainSubstring(v1alpha1.AnnotationDoNotDisrupt))
	}).Should(Succeed(), "the claim's Consolidatable condition says why the node stays")
	s.G.Consistently(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).To(Equal(kept.Name))
		g.Expect(claims[0].DeletionTimestamp.IsZero()).To(BeTrue())
	}, 5*time.Second, 250*time.Millisecond).Should(Succeed(), "the guarded node stays for several consolidation periods")

	guarded := s.Pods("guarded")[0]
	patch := client.MergeFrom(guarded.DeepCopy())
	delete(guarded.Annotations, v1alpha1.AnnotationDoNotDisrupt)
	s.G.Expect(env.Client.Patch(s.Ctx, &guarded, patch)).To(Succeed())
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(1))
		g.Expect(claims[0].Name).NotTo(Equal(kept.Name))
		g.Expect(claims[0].Spec.Shape.Name).To(Equal("c2"))
		g.Expect(s.RunningPods("guarded")).To(Equal(1))
	}).Should(Succeed(), "once the annotation is gone the node is replaced by a cheaper one")
}

// Changing a pool's labels drifts every claim; each is replaced, and the
// new nodes carry the new labels.
func TestDriftedClaimsAreReplacedWithTheNewTemplate(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "drift")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	const replicas = 3
	s.CreateDeployment("web", replicas, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(replicas))
	s.G.Eventually(s.ReadyClaims).Should(Equal(replicas))
	originals := map[string]bool{}
	for _, claim := range s.Claims() {
		originals[claim.Name] = true
	}

	var mu sync.Mutex
	drifted := map[string]string{}
	order := newReadyFirst(originals)
	claims := s.WatchClaims(func(event watch.EventType, claim *v1alpha1.NodeClaim) {
		mu.Lock()
		defer mu.Unlock()
		if condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionDrifted); condition != nil && condition.Status == metav1.ConditionTrue {
			drifted[claim.Name] = condition.Reason + ": " + condition.Message
		}
		order.observe(event, claim)
	})
	defer claims.Stop()

	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Template.Labels["tier"] = "v2"
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())

	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(replicas))
		for _, claim := range claims {
			g.Expect(originals).NotTo(HaveKey(claim.Name), "claim %s is still an original", claim.Name)
			g.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}
		nodes := s.Nodes()
		g.Expect(nodes).To(HaveLen(replicas))
		for _, node := range nodes {
			g.Expect(node.Labels).To(HaveKeyWithValue("tier", "v2"), "node %s", node.Name)
		}
		g.Expect(s.RunningPods("web")).To(Equal(replicas))
	}).Should(Succeed())
	claims.Stop()
	mu.Lock()
	defer mu.Unlock()
	for name := range originals {
		s.G.Expect(drifted).To(HaveKeyWithValue(name, ContainSubstring("LabelsDrifted")), "claim %s was Drifted before it went", name)
	}
	for name := range drifted {
		s.G.Expect(originals).To(HaveKey(name), "only the original claims drift")
	}
	s.G.Expect(order.violations).To(BeEmpty(), "originals that went before a replacement was Ready")
}

// Nodes past their pool's expireAfter are each replaced once, and the
// workload keeps running: a replacement is Ready before a node drains.
func TestExpiredNodesAreReplacedOnce(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "expire")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	const expireAfter = 20 * time.Second
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ExpireAfter = &metav1.Duration{Duration: expireAfter}
	})
	const replicas = 2
	s.CreateDeployment("web", replicas, "3", nil)
	s.CreatePodDisruptionBudget("web", 1)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(replicas))
	s.G.Eventually(s.ReadyClaims).Should(Equal(replicas))
	originals := map[string]bool{}
	for _, claim := range s.Claims() {
		originals[claim.Name] = true
	}
	pods := trackPods(s, "web", replicas)
	defer pods.stop()
	var mu sync.Mutex
	// replaced counts the replacements of each claim, by its replaces
	// annotation: a replacement that itself expires (on a busy machine the
	// second original may take longer than expireAfter to go) is replaced
	// in turn, which is no second replacement of an original.
	replaced := map[string]map[string]bool{}
	order := newReadyFirst(originals)
	claims := s.WatchClaims(func(event watch.EventType, claim *v1alpha1.NodeClaim) {
		mu.Lock()
		defer mu.Unlock()
		for _, old := range strings.Split(claim.Annotations[v1alpha1.AnnotationReplaces], ",") {
			if old == "" {
				continue
			}
			if replaced[old] == nil {
				replaced[old] = map[string]bool{}
			}
			replaced[old][claim.Name] = true
		}
		order.observe(event, claim)
	})
	defer claims.Stop()

	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(replicas))
		for _, claim := range claims {
			g.Expect(originals).NotTo(HaveKey(claim.Name))
			g.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}
		g.Expect(s.RunningPods("web")).To(Equal(replicas))
	}).Should(Succeed())
	// The replacements would expire in turn; one round is what is tested.
	s.G.Eventually(func() error {
		var pool v1alpha1.NodePool
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &pool); err != nil {
			return err
		}
		pool.Spec.Disruption.ExpireAfter = nil
		return env.Client.Update(s.Ctx, &pool)
	}).Should(Succeed())
	claims.Stop()
	pods.stop()
	mu.Lock()
	defer mu.Unlock()
	for original := range originals {
		s.G.Expect(replaced[original]).To(HaveLen(1), "exactly one replacement for original %s", original)
	}
	s.G.Expect(order.violations).To(BeEmpty(), "originals that went before a replacement was Ready")
	s.G.Expect(pods.fewestRunning()).To(BeNumerically(">=", replicas-1), "Running pods at the worst moment")
	s.G.Expect(pods.longestWait()).To(BeNumerically("<", 30*time.Second), "longest a pod waited to run again")
}

// A steady workload that cannot be packed tighter keeps its nodes through
// several consolidation periods, from the moment its nodes are made: no
// claim is deleted and none is made beyond those it needs.
func TestSteadyWorkloadDoesNotFlap(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "steady")
	defer s.Cleanup()
	s.CreateConsolidatingPool(time.Second)
	var mu sync.Mutex
	created, deleted := map[string]bool{}, map[string]bool{}
	claims := s.WatchClaims(func(event watch.EventType, claim *v1alpha1.NodeClaim) {
		mu.Lock()
		defer mu.Unlock()
		created[claim.Name] = true
		if event == watch.Deleted || !claim.DeletionTimestamp.IsZero() {
			deleted[claim.Name] = true
		}
	})
	defer claims.Stop()

	// Two pods of 1.5 cpu per 4-cpu node: no node's pods fit on the
	// others, nor on a 2-cpu node.
	const replicas = 6
	s.CreateDeployment("web", replicas, "1500m", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(replicas))
	s.G.Consistently(func(g Gomega) {
		g.Expect(s.RunningPods("web")).To(Equal(replicas))
	}, 8*time.Second, 250*time.Millisecond).Should(Succeed())
	claims.Stop()
	mu.Lock()
	defer mu.Unlock()
	s.G.Expect(deleted).To(BeEmpty(), "claims deleted")
	s.G.Expect(created).To(HaveLen(3), "claims made")
	for name := range created {
		s.G.Expect(harness.EventsOf(s.G, "NodeClaim", name)).To(ContainElement(ContainSubstring("Consolidatable=False")),
			"claim %s says why it stays", name)
	}
}

// A controller that stops while a replacement boots leaves the pairing on
// the replacement claim; the next one finishes the job: the old node goes
// once the replacement is Ready, and no second replacement is made.
func TestReplacementResumesAfterRestart(t *testing.T) {
	s := harness.NewScenario(t, "resume")
	defer s.Cleanup()
	s.CreateConsolidatingPool(time.Second)
	stopFirst := harness.StartOperator(t, harness.OperatorOptions{})
	big := s.CreateDeployment("big", 1, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("big") }).Should(Equal(1))
	s.CreateDeployment("small", 1, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(1))
	s.G.Expect(s.Claims()).To(HaveLen(1))
	old := s.Claims()[0]

	replacing := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	seen := map[string]bool{}
	claims := s.WatchClaims(func(_ watch.EventType, claim *v1alpha1.NodeClaim) {
		mu.Lock()
		seen[claim.Name] = true
		mu.Unlock()
		if claim.Annotations[v1alpha1.AnnotationReplaces] == old.Name {
			once.Do(func() { close(replacing) })
		}
	})
	defer claims.Stop()
	s.Scale(big, 0)
	s.G.Eventually(replacing).Should(BeClosed())
	stopFirst()
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&old), &old)).To(Succeed())
	s.G.Expect(old.DeletionTimestamp.IsZero()).To(BeTrue(), "the old claim waits for its replacement")

	harness.StartOperator(t, harness.OperatorOptions{})
	s.G.Eventually(func(g Gomega) {
		current := s.Claims()
		g.Expect(current).To(HaveLen(1))
		g.Expect(current[0].Name).NotTo(Equal(old.Name))
		g.Expect(current[0].Spec.Shape.Name).To(Equal("c2"))
		g.Expect(current[0].Annotations).NotTo(HaveKey(v1alpha1.AnnotationReplaces), "the pairing is cleared once done")
		g.Expect(s.RunningPods("small")).To(Equal(1))
	}).Should(Succeed())
	claims.Stop()
	mu.Lock()
	defer mu.Unlock()
	s.G.Expect(seen).To(HaveLen(2), "the old claim and one replacement")
}

// readyFirst checks, on every change to a pool's claims, that each
// original claim starts going only once one more replacement is Ready than
// originals went before it.
type readyFirst struct {
	originals, ready, going map[string]bool
	violations              []string
}

func newReadyFirst(originals map[string]bool) *readyFirst {
	return &readyFirst{originals: originals, ready: map[string]bool{}, going: map[string]bool{}}
}

func (r *readyFirst) observe(event watch.EventType, claim *v1alpha1.NodeClaim) {
	if !r.originals[claim.Name] {
		if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionReady) {
			r.ready[claim.Name] = true
		}
		return
	}
	if (event == watch.Deleted || !claim.DeletionTimestamp.IsZero()) && !r.going[claim.Name] {
		r.going[claim.Name] = true
		if len(r.ready) < len(r.going) {
			r.violations = append(r.violations, claim.Name)
		}
	}
}

// underusedNodes makes n nodes that each carry one pod of 800m (a fifth of
// the pool's 4 cpu) of the Deployment "small": first n pods of 3 cpu force
// a node each, the small pods fill the cpu left beside them, then the big
// pods go.
func underusedNodes(s *harness.Scenario, n int, small int32) {
	s.T.Helper()
	big := s.CreateDeployment("big", int32(n), "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("big") }).Should(Equal(n))
	s.G.Expect(s.Claims()).To(HaveLen(n), "one 3-cpu pod per 4-cpu node")
	s.CreateDeployment("small", small, "800m", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(BeEquivalentTo(small))
	s.Scale(big, 0)
	s.G.Eventually(func() []corev1.Pod { return s.Pods("big") }).Should(BeEmpty())
	s.G.Expect(s.Claims()).To(HaveLen(n), "the small pods fitted beside the big ones")
}

// podTracker follows an app's pods: the fewest Running at any moment once
// all were, and how long each pod waited to be Running.
type podTracker struct {
	*harness.Watcher
	mu       sync.Mutex
	want     int
	armed    bool
	fewest   int
	pods     map[types.UID]*trackedPod
	finished time.Time
}

type trackedPod struct {
	seen, upAt time.Time
	up, gone   bool
}

func trackPods(s *harness.Scenario, app string, want int) *podTracker {
	tracker := &podTracker{want: want, fewest: want, pods: map[types.UID]*trackedPod{}}
	tracker.Watcher = s.Watch(&corev1.PodList{}, tracker.observe, client.InNamespace(s.Namespace), client.MatchingLabels{"app": app})
	return tracker
}

func (p *podTracker) observe(event watch.Event) {
	pod, ok := event.Object.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	tracked, ok := p.pods[pod.UID]
	if !ok {
		tracked = &trackedPod{seen: now}
		p.pods[pod.UID] = tracked
	}
	up := pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero()
	if up && !tracked.up {
		tracked.up, tracked.upAt = true, now
	}
	if event.Type == watch.Deleted || !pod.DeletionTimestamp.IsZero() {
		tracked.gone = true
	}
	running := 0
	for _, t := range p.pods {
		if t.up && !t.gone {
			running++
		}
	}
	if running >= p.want {
		p.armed = true
	}
	if p.armed {
		p.fewest = min(p.fewest, running)
	}
}

func (p *podTracker) stop() {
	p.Watcher.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished.IsZero() {
		p.finished = time.Now()
	}
}

func (p *podTracker) fewestRunning() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fewest
}

// longestWait is the longest any pod took from being seen to Running (or
// has waited so far, if it never ran and is still there).
func (p *podTracker) longestWait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	longest := time.Duration(0)
	for _, t := range p.pods {
		switch {
		case t.up:
			longest = max(longest, t.upAt.Sub(t.seen))
		case !t.gone:
			longest = max(longest, p.finished.Sub(t.seen))
		}
	}
	return longest
}

// budgetTracker records every state of a PodDisruptionBudget with fewer
// healthy pods than it desires.
type budgetTracker struct {
	*harness.Watcher
	mu  sync.Mutex
	bad []string
}

func trackPodDisruptionBudget(s *harness.Scenario, name string) *budgetTracker {
	tracker := &budgetTracker{}
	tracker.Watcher = s.Watch(&policyv1.PodDisruptionBudgetList{}, func(event watch.Event) {
		budget, ok := event.Object.(*policyv1.PodDisruptionBudget)
		if !ok || budget.Name != name {
			return
		}
		tracker.mu.Lock()
		defer tracker.mu.Unlock()
		if budget.Status.CurrentHealthy < budget.Status.DesiredHealthy {
			tracker.bad = append(tracker.bad, budget.Status.String())
		}
	}, client.InNamespace(s.Namespace))
	return tracker
}

func (b *budgetTracker) violations() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bad...)
}
