package autoscaling

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// With a budget of one node, emptied nodes go one at a time: checked on
// every change the API server reports, not just at the end.
func TestEmptyNodesGoOneAtATimeUnderABudgetOfOne(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "budget")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(func(pool *v1alpha1.NodePool) {
		pool.Spec.Disruption.ConsolidateAfter.Duration = time.Second
		pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
	})
	deployment := s.CreateDeployment("spread", 4, "3", nil)
	s.G.Eventually(func() int { return s.RunningPods("spread") }).Should(Equal(4))
	s.G.Eventually(s.Claims).Should(HaveLen(4), "one 3-cpu pod per 4-cpu node")

	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	s.G.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := watcher.Watch(ctx, &v1alpha1.NodeClaimList{}, client.MatchingLabels{v1alpha1.LabelNodePool: s.Name})
	s.G.Expect(err).NotTo(HaveOccurred())
	defer events.Stop()

	var mu sync.Mutex
	most := 0
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		deleting := map[string]bool{}
		for event := range events.ResultChan() {
			claim, ok := event.Object.(*v1alpha1.NodeClaim)
			if !ok {
				continue
			}
			switch {
			case event.Type == watch.Deleted:
				delete(deleting, claim.Name)
			case !claim.DeletionTimestamp.IsZero():
				deleting[claim.Name] = true
			}
			mu.Lock()
			most = max(most, len(deleting))
			mu.Unlock()
		}
	}()

	s.Scale(deployment, 0)
	s.G.Eventually(func() int { return len(s.Claims()) }).Should(BeZero())
	cancel()
	<-observed
	mu.Lock()
	defer mu.Unlock()
	s.G.Expect(most).To(Equal(1), "claims being deleted at once")
}
