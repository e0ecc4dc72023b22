package clusterstate

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestNominationsFollowTheLatestPlan(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	n := NewNominations(clk)
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}}
	}
	names := func(keys []types.NamespacedName) []string {
		var out []string
		for _, key := range keys {
			out = append(out, key.Name)
		}
		slices.Sort(out)
		return out
	}

	n.Plan("claim-a", []*corev1.Pod{pod("web-1"), pod("web-2")})
	n.Plan("claim-b", []*corev1.Pod{pod("db-1")})
	// A later round moved web-2 onto claim-b, still booting.
	n.Plan("claim-b", []*corev1.Pod{pod("web-2")})

	if got := n.ClaimOf(pod("web-2")); got != "claim-b" {
		t.Errorf("web-2 is planned on %q, want claim-b", got)
	}
	if got := names(n.Take("claim-a")); !slices.Equal(got, []string{"web-1"}) {
		t.Errorf("claim-a nominates %v, want [web-1]: web-2 was planned on claim-b since", got)
	}
	if got := n.Take("claim-a"); len(got) != 0 {
		t.Errorf("claim-a nominates %v a second time", got)
	}
	if got := n.ClaimOf(pod("web-1")); got != "claim-a" {
		t.Errorf("web-1 is planned on %q just after registration took it, want claim-a until its nomination shows", got)
	}
	if got := names(n.Take("claim-b")); !slices.Equal(got, []string{"db-1", "web-2"}) {
		t.Errorf("claim-b nominates %v, want [db-1 web-2]", got)
	}

	// A round that read the cluster while claim-b booted plans on it after
	// its node registered: the plan is dropped, and web-3 keeps claim-f.
	n.Plan("claim-f", []*corev1.Pod{pod("web-3")})
	n.PlanOnBooting("claim-b", []*corev1.Pod{pod("web-3")})
	if got := names(n.Take("claim-f")); !slices.Equal(got, []string{"web-3"}) {
		t.Errorf("claim-f nominates %v, want [web-3]: the later plan was on a claim already registered", got)
	}
	// Woken, claim-b boots again: plans on it count until it registers.
	n.Plan("claim-b", []*corev1.Pod{pod("cache-1")})
	n.PlanOnBooting("claim-b", []*corev1.Pod{pod("cache-2")})
	if got := names(n.Take("claim-b")); !slices.Equal(got, []string{"cache-1", "cache-2"}) {
		t.Errorf("the woken claim-b nominates %v, want [cache-1 cache-2]", got)
	}

	// A plan whose node never came is dropped an hour on, at the next plan.
	n.Plan("claim-c", []*corev1.Pod{pod("batch-1")})
	clk.SetTime(clk.Now().Add(nominationTTL))
	n.Plan("claim-d", []*corev1.Pod{pod("batch-2")})
	if got := n.Take("claim-c"); len(got) != 0 {
		t.Errorf("claim-c nominates %v after its plan expired", got)
	}
	if len(n.claimOf) != 1 {
		t.Errorf("%d pods remembered, want 1 (batch-2): an expired plan leaves nothing behind", len(n.claimOf))
	}
	if len(n.taken) != 1 {
		t.Errorf("%d registered claims remembered, want 1 (claim-c, taken just now): older ones are forgotten", len(n.taken))
	}

	if got := n.ClaimOf(pod("web-1")); got != "" {
		t.Errorf("web-1 is planned on %q long after registration took it", got)
	}

	var none *Nominations
	none.Plan("claim-e", []*corev1.Pod{pod("x")})
	if got := none.Take("claim-e"); got != nil {
		t.Errorf("a nil record nominates %v", got)
	}
}
