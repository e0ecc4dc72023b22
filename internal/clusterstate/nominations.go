package clusterstate

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// nominationTTL bounds how long a plan waits for its claim's node: a
// machine that takes longer to register has its pods scheduled wherever
// the scheduler finds room, as before nominations.
const nominationTTL = time.Hour

// takenGrace is how long ClaimOf still names the claim of a plan that
// registration took: the nominations it wrote reach the cache a little
// after the claim's own writes may, and a round in between must not see
// the pods as pending with no plan.
const takenGrace = time.Minute

// Nominations remembers which pending pods a provisioning round planned
// on which claim, until the claim's node registers. Registration then
// nominates them there (the pods' status.nominatedNodeName, which
// kube-scheduler tries first and whose room it keeps from other pods of
// no higher priority, KEP-5278), before it lets pods onto the node. The
// packer plans constrained pods first and the scheduler binds in its own
// order: without the nominations, pods that share a spread's or an
// affinity's selector could fill the room planned for others, which then
// need another node.
//
// Kept in memory: a restarted controller nominates nothing for the claims
// of its predecessor, and their pods go where the scheduler puts them.
type Nominations struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	claimOf map[types.NamespacedName]string
	plans   map[string]*plan
	// taken are the claims whose plans registration took, and when: a
	// round that saw such a claim still booting may plan on it after.
	taken map[string]time.Time
}

type plan struct {
	pods    map[types.NamespacedName]bool
	planned time.Time
	// taken is when registration took the plan; zero until then.
	taken time.Time
}

// NewNominations returns an empty record.
func NewNominations(clk clock.PassiveClock) *Nominations {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Nominations{clock: clk, claimOf: map[types.NamespacedName]string{}, plans: map[string]*plan{}, taken: map[string]time.Time{}}
}

// Plan records pods as planned on the claim's node: a new claim, or a
// machine woken, whose node is to register. A pod planned earlier on
// another claim now waits for this one only.
func (n *Nominations) Plan(claim string, pods []*corev1.Pod) {
	if n == nil || len(pods) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.taken, claim)
	n.record(claim, pods)
}

// PlanOnBooting records pods a later round placed on a claim it saw still
// booting, as Plan does, unless the claim's node registered since (its
// plan taken): registration does not nominate on it again, and a pod
// moved onto it off the claim it was planned on would be nominated
// nowhere, and once pending again bought a node of its own. Its earlier
// plan stands instead.
func (n *Nominations) PlanOnBooting(claim string, pods []*corev1.Pod) {
	if n == nil || len(pods) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, registered := n.taken[claim]; registered {
		return
	}
	n.record(claim, pods)
}

func (n *Nominations) record(claim string, pods []*corev1.Pod) {
	now := n.clock.Now()
	n.expire(now)
	p := n.plans[claim]
	if p != nil && !p.taken.IsZero() {
		// A woken claim boots again: what it was bought for before is
		// long done.
		n.drop(claim, p)
		p = nil
	}
	if p == nil {
		p = &plan{pods: map[types.NamespacedName]bool{}}
		n.plans[claim] = p
	}
	p.planned = now
	for _, pod := range pods {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if previous, ok := n.claimOf[key]; ok && previous != claim {
			if other := n.plans[previous]; other != nil {
				delete(other.pods, key)
			}
		}
		n.claimOf[key] = claim
		p.pods[key] = true
	}
}

// Take returns the pods planned on the claim, once: registration
// nominates them. ClaimOf names the claim for them a little longer
// (takenGrace).
func (n *Nominations) Take(claim string) []types.NamespacedName {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	n.taken[claim] = now
	p := n.plans[claim]
	if p == nil || !p.taken.IsZero() {
		return nil
	}
	p.taken = now
	pods := make([]types.NamespacedName, 0, len(p.pods))
	for key := range p.pods {
		pods = append(pods, key)
	}
	return pods
}

// ClaimOf names the claim the pod is planned on, "" for none. A round
// counts a pending pod on the node of the claim it names while the claim
// boots, instead of packing it again: the plan stays as it was bought.
func (n *Nominations) ClaimOf(pod *corev1.Pod) string {
	if n == nil {
		return ""
	}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	n.mu.Lock()
	defer n.mu.Unlock()
	claim, ok := n.claimOf[key]
	if !ok {
		return ""
	}
	p := n.plans[claim]
	now := n.clock.Now()
	if p == nil || now.Sub(p.planned) >= nominationTTL || !p.taken.IsZero() && now.Sub(p.taken) >= takenGrace {
		return ""
	}
	return claim
}

// expire drops the plans older than nominationTTL, those taken longer
// ago than takenGrace, and the claims taken longer ago than
// nominationTTL: no round runs on a picture that old.
func (n *Nominations) expire(now time.Time) {
	for claim, at := range n.taken {
		if now.Sub(at) >= nominationTTL {
			delete(n.taken, claim)
		}
	}
	for claim, p := range n.plans {
		if now.Sub(p.planned) >= nominationTTL || !p.taken.IsZero() && now.Sub(p.taken) >= takenGrace {
			n.drop(claim, p)
		}
	}
}

// drop forgets a claim's plan.
func (n *Nominations) drop(claim string, p *plan) {
	for key := range p.pods {
		if n.claimOf[key] == claim {
			delete(n.claimOf, key)
		}
	}
	delete(n.plans, claim)
}
