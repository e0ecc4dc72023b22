package autoscaling

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// How long the machines bought while a test watches take to boot: long
// enough that a disruption round (one a second) would have many chances
// to count on one before it is a node.
const slowBoot = 20 * time.Second

// A disruption moves pods only onto nodes that are registered and
// initialized: two pods of 2.5 cpu wait, a medium node runs two pods of 1
// cpu, and the large claim bought for the waiting pods boots. The medium
// node's pods would fit on the large one beside them, but it stays until
// the large node is initialized; then it goes.
//
// While it boots, the controller's record (why), the claim's
// Consolidatable condition and simulate --scale-down all say so, alike.
func TestConsolidationWaitsForTheNodeItsPodsWouldMoveTo(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "booting")
	defer s.Cleanup()
	cli := harness.NewClaimscaleCLI(s.Ctx, t, address)
	medium := mediumNodeOfSmallPods(s)
	setBootDelay(s, slowBoot)
	w := watchBoot(s, medium.Name)
	defer w.Stop()
	s.CreateDeployment("big", 2, "2500m", nil)
	large := launchedClaimBesides(s, medium.Name)

	note := "its pods would fit only on " + large.Name + ", not initialized yet: a node still booting is room only for the pending pods it was made for"
	s.G.Eventually(func(g Gomega) {
		record := cli.Why(g, "node/"+medium.Status.NodeName)
		g.Expect(record).To(ContainSubstring("Kept, WouldNotFit"))
		g.Expect(record).To(ContainSubstring(note))
		claim := &v1alpha1.NodeClaim{}
		g.Expect(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&medium), claim)).To(Succeed())
		condition := meta.FindStatusCondition(claim.Status.Conditions, v1alpha1.ConditionConsolidatable)
		g.Expect(condition).NotTo(BeNil())
		g.Expect(condition.Reason).To(Equal(v1alpha1.ConsolidatableReasonPodsDoNotFit))
		g.Expect(condition.Message).To(Equal(note), "the condition says what the record says")
		g.Expect(harness.EventsOf(s.G, "NodeClaim", medium.Name)).To(ContainElement("Unconsolidatable: Consolidatable=False: "+note), "and so does the event")
		out, err := cli.Run("simulate", "--scale-down")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("node " + medium.Status.NodeName + " (claim " + medium.Name + ", pool " + s.Name + ", 0.4/h): stays, WouldNotFit\n  " + note))
		g.Expect(out).To(MatchRegexp(regexp.QuoteMeta("(claim "+large.Name+", pool "+s.Name+", ") + `[^)]*\): stays, not a candidate\n  ` +
			regexp.QuoteMeta("not initialized yet: room only for the pending pods it was made for")))
		t.Logf("kubectl claimscale why node/%s:\n%s", medium.Status.NodeName, record)
		t.Logf("kubectl claimscale simulate --scale-down:\n%s", out)
	}).WithTimeout(slowBoot / 2).Should(Succeed())
	expectItWaitedFor(s, w, medium.Name, large.Name, map[string]int{"small": 2, "big": 2})
}

// The same after a restart of the controller while the large claim
// boots: what is in flight is read back from the claims, and still no
// room for the medium node's pods.
func TestConsolidationWaitsForABootingNodeAfterARestart(t *testing.T) {
	stop := harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "booting-restart")
	defer s.Cleanup()
	medium := mediumNodeOfSmallPods(s)
	setBootDelay(s, slowBoot)
	w := watchBoot(s, medium.Name)
	defer w.Stop()
	s.CreateDeployment("big", 2, "2500m", nil)
	large := launchedClaimBesides(s, medium.Name)
	stop()
	harness.StartOperator(t, harness.OperatorOptions{})
	expectItWaitedFor(s, w, medium.Name, large.Name, map[string]int{"small": 2, "big": 2})
}

// Scaling a Deployment from 10 to 16 buys a large node with room to spare
// while it boots; the small node beside it, whose pods would fit there,
// stays until it is initialized.
func TestConsolidationWaitsForTheNodesOfAScaleUp(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "booting-scale-up")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "c4", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.4"},
			{Name: "c16", CPU: harness.Qty("16"), Memory: harness.Qty("64Gi"), Price: "1.6"},
		}
		pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmptyOrUnderutilized
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
	})
	// Ten pods of 1.5 cpu fill a c16 but for 1 cpu; two of 1.3 cpu fit
	// there neither, nor does one of 1.5 beside them on their c4.
	web := s.CreateDeployment("web", 10, "1500m", nil)
	s.G.Eventually(func() int { return s.RunningPods("web") }).Should(Equal(10))
	s.CreateDeployment("small", 2, "1300m", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(2))
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	var small v1alpha1.NodeClaim
	for _, claim := range s.Claims() {
		if claim.Spec.Shape.Name == "c4" {
			small = claim
		}
	}
	s.G.Expect(small.Name).NotTo(BeEmpty(), "the small pods have a c4 of their own: %v", s.Claims())

	setBootDelay(s, slowBoot)
	w := watchBoot(s, small.Name)
	defer w.Stop()
	s.Scale(web, 16)
	var bought string
	s.G.Eventually(func(g Gomega) {
		var booting []string
		for _, claim := range s.Claims() {
			if claim.Spec.Shape.Name == "c16" && !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
				booting = append(booting, claim.Name)
			}
		}
		g.Expect(booting).To(HaveLen(1), "one c16 bought for the six new pods")
		bought = booting[0]
	}).Should(Succeed())
	expectItWaitedFor(s, w, small.Name, bought, map[string]int{"web": 16, "small": 2})
}

// While a repair's replacement boots, the pods of the node it replaces
// are waiting for it: its room is theirs, not the pods of another node a
// consolidation would move there.
func TestConsolidationWaitsForARepairsReplacement(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "booting-repair")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "c4", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.4"},
			{Name: "c8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.8"},
		}
		pool.Spec.Repair = &v1alpha1.Repair{After: &metav1.Duration{Duration: 30 * time.Second}, MaxUnhealthy: "50%", Budget: "1"}
	})
	s.CreateDeployment("small", 2, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(2))
	s.CreateDeployment("fleet", 1, "5", nil)
	s.G.Eventually(func() int { return s.RunningPods("fleet") }).Should(Equal(1))
	s.G.Eventually(s.ReadyClaims).Should(Equal(2))
	var medium, broken v1alpha1.NodeClaim
	for _, claim := range s.Claims() {
		switch claim.Spec.Shape.Name {
		case "c4":
			medium = claim
		case "c8":
			broken = claim
		}
	}
	s.G.Expect(medium.Name).NotTo(BeEmpty())
	s.G.Expect(broken.Name).NotTo(BeEmpty())

	setBootDelay(s, slowBoot)
	w := watchBoot(s, medium.Name)
	defer w.Stop()
	s.KillKubelet(broken.Status.NodeName, time.Now().Add(-25*time.Second).Truncate(time.Second))
	var replacement string
	s.G.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(env.Client.Get(s.Ctx, client.ObjectKeyFromObject(&broken), &v1alpha1.NodeClaim{}))).To(BeTrue(), "the broken claim is gone")
		var booting []string
		for _, claim := range s.Claims() {
			if claim.Name != medium.Name {
				booting = append(booting, claim.Name)
			}
		}
		g.Expect(booting).To(HaveLen(1))
		replacement = booting[0]
	}).Should(Succeed())
	claim := &v1alpha1.NodeClaim{}
	s.G.Expect(env.Client.Get(s.Ctx, client.ObjectKey{Name: replacement}, claim)).To(Succeed())
	s.G.Expect(meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized)).To(BeFalse(), "the replacement still boots")
	// Only now may the medium node's pods move at all.
	s.SetConsolidationPolicy(v1alpha1.ConsolidationWhenEmptyOrUnderutilized)
	expectItWaitedFor(s, w, medium.Name, replacement, map[string]int{"small": 2, "fleet": 1})
}

// mediumNodeOfSmallPods makes the scenario's provider and a pool of c4
// (0.4/h) and c8 (0.8/h) that consolidates underused nodes after a
// second, and a medium node running two pods of 1 cpu: a node no cheaper
// one could replace, whose pods fit nowhere else yet.
func mediumNodeOfSmallPods(s *harness.Scenario) v1alpha1.NodeClaim {
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Shapes.Fixed = []v1alpha1.Shape{
			{Name: "c4", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.4"},
			{Name: "c8", CPU: harness.Qty("8"), Memory: harness.Qty("32Gi"), Price: "0.8"},
		}
		pool.Spec.Disruption.ConsolidationPolicy = v1alpha1.ConsolidationWhenEmptyOrUnderutilized
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
	})
	s.CreateDeployment("small", 2, "1", nil)
	s.G.Eventually(func() int { return s.RunningPods("small") }).Should(Equal(2))
	s.G.Eventually(s.ReadyClaims).Should(Equal(1))
	claims := s.Claims()
	s.G.Expect(claims).To(HaveLen(1))
	s.G.Expect(claims[0].Spec.Shape.Name).To(Equal("c4"))
	return claims[0]
}

// setBootDelay makes the machines the provider launches from now on take
// that long to register.
func setBootDelay(s *harness.Scenario, delay time.Duration) {
	s.G.Eventually(func() error {
		var nodeProvider v1alpha1.NodeProvider
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: s.Name}, &nodeProvider); err != nil {
			return err
		}
		nodeProvider.Spec.Simulated.BootDelay = &metav1.Duration{Duration: delay}
		return env.Client.Update(s.Ctx, &nodeProvider)
	}).Should(Succeed())
}

// launchedClaimBesides waits for the claim bought besides the one named,
// launched and not registered: in flight.
func launchedClaimBesides(s *harness.Scenario, name string) v1alpha1.NodeClaim {
	var found v1alpha1.NodeClaim
	s.G.Eventually(func(g Gomega) {
		claims := s.Claims()
		g.Expect(claims).To(HaveLen(2))
		for _, claim := range claims {
			if claim.Name != name {
				found = claim
			}
		}
		g.Expect(meta.IsStatusConditionTrue(found.Status.Conditions, v1alpha1.ConditionLaunched)).To(BeTrue())
	}).Should(Succeed())
	s.G.Expect(meta.IsStatusConditionTrue(found.Status.Conditions, v1alpha1.ConditionRegistered)).To(BeFalse(), "claim %s booting", found.Name)
	return found
}

// expectItWaitedFor waits until the booting claim is initialized, then
// until the node kept claim runs on is consolidated onto it and every
// app's pods run; and checks that the kept claim was chosen to go only
// after the booting one was initialized.
func expectItWaitedFor(s *harness.Scenario, w *bootWatch, kept, booting string, running map[string]int) {
	s.T.Helper()
	s.G.Eventually(func() bool { return w.initialized(booting) }).Should(BeTrue(), "claim %s initialized", booting)
	s.G.Expect(w.goneBeforeInitialized(booting)).To(BeEmpty())
	s.G.Eventually(func(g Gomega) {
		for _, claim := range s.Claims() {
			g.Expect(claim.Name).NotTo(Equal(kept), "claim %s consolidated onto %s once that is initialized", kept, booting)
		}
		for app, n := range running {
			g.Expect(s.RunningPods(app)).To(Equal(n), "pods of %s running", app)
		}
	}).Should(Succeed())
	s.G.Expect(w.goneBeforeInitialized(booting)).To(BeEmpty())
	s.T.Logf("claim %s initialized at %s; claim %s chosen to go at %s", booting, w.initializedAt(booting).Format(time.RFC3339Nano), kept, w.goneAt().Format(time.RFC3339Nano))
}

// bootWatch follows the pool's claims through a watch: when each was
// first seen Initialized, and when the kept claim was first chosen to go
// (marked Disrupting, or deleted).
type bootWatch struct {
	*harness.Watcher
	mu    sync.Mutex
	kept  string
	ready map[string]time.Time
	gone  time.Time
}

func watchBoot(s *harness.Scenario, kept string) *bootWatch {
	w := &bootWatch{kept: kept, ready: map[string]time.Time{}}
	w.Watcher = s.WatchClaims(func(event watch.EventType, claim *v1alpha1.NodeClaim) {
		w.mu.Lock()
		defer w.mu.Unlock()
		now := time.Now()
		if _, seen := w.ready[claim.Name]; !seen && meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionInitialized) {
			w.ready[claim.Name] = now
		}
		if claim.Name == kept && w.gone.IsZero() &&
			(event == watch.Deleted || !claim.DeletionTimestamp.IsZero() || meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionDisrupting)) {
			w.gone = now
		}
	})
	return w
}

func (w *bootWatch) initialized(name string) bool {
	return !w.initializedAt(name).IsZero()
}

func (w *bootWatch) initializedAt(name string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready[name]
}

func (w *bootWatch) goneAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

// goneBeforeInitialized says how the kept claim went before the named one
// was initialized, if it did.
func (w *bootWatch) goneBeforeInitialized(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ready, gone := w.ready[name], w.gone
	if gone.IsZero() || (!ready.IsZero() && !gone.Before(ready)) {
		return ""
	}
	if ready.IsZero() {
		return fmt.Sprintf("claim %s was chosen to go at %s, while claim %s was not initialized", w.kept, gone.Format(time.RFC3339Nano), name)
	}
	return fmt.Sprintf("claim %s was chosen to go at %s, %s before claim %s was initialized", w.kept, gone.Format(time.RFC3339Nano), ready.Sub(gone), name)
}

// kubectl get nodeclaims shows the zone a claim's requirements put its
// machine in, as the API server's table prints it.
func TestGetNodeClaimsShowsTheZone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	claim := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "zoned-claim"},
		Spec: v1alpha1.NodeClaimSpec{
			NodePoolRef: v1alpha1.NodePoolReference{Name: "zoned"},
			Shape:       v1alpha1.ClaimShape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi")},
			Requirements: v1alpha1.NodeClaimRequirements{NodeSelector: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"lpg1"}},
			}},
		},
	}
	// No controller runs: the claim is only stored and printed.
	g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
	defer func() { _ = env.Client.Delete(ctx, claim) }()
	clientset, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := clientset.RESTClient().Get().AbsPath("/apis/claimscale.io/v1alpha1/nodeclaims", claim.Name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var table metav1.Table
	g.Expect(json.Unmarshal(raw, &table)).To(Succeed())
	var columns []string
	for _, column := range table.ColumnDefinitions {
		columns = append(columns, column.Name)
	}
	g.Expect(columns).To(ContainElement("Zone"))
	g.Expect(table.Rows).To(HaveLen(1))
	for i, column := range columns {
		if column == "Zone" {
			g.Expect(table.Rows[0].Cells[i]).To(Equal("lpg1"))
		}
	}
	t.Logf("columns %v, row %v", columns, table.Rows[0].Cells)
}
