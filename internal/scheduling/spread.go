package scheduling

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
)

// Hard topology spread is the constraint bare pods most often carry, and
// through the framework it costs a pass over every pod of the cluster per
// pod placed: PodTopologySpread's PreFilter counts the matching pods of
// every node, and its state cannot be kept current as pods are added (it
// tracks only the two smallest domains). A class whose only constraint
// beyond resources and static filters is hard spread (in the default
// inclusion policies) is decided here instead, with the plugin's own
// arithmetic (matching pods in the domain + 1 if the pod matches itself −
// the smallest domain ≤ maxSkew) over counts kept per selector and node:
// a node's count is taken again only when the node changed.

// spreadTally counts, per node, the pods of a namespace a selector matches.
type spreadTally struct {
	ns  string
	sel labels.Selector
	// nodes holds each node's count with the NodeInfo generation it was
	// taken at.
	nodes map[string]talliedNode
	// byClass memoises whether the selector matches a class's pods.
	byClass map[*podClass]bool
}

type talliedNode struct {
	gen   int64
	count int
}

type tallyKey struct {
	ns, sel string
}

func (t *spreadTally) count(ni fwk.NodeInfo) int {
	name := ni.Node().Name
	gen := ni.GetGeneration()
	if e, ok := t.nodes[name]; ok && e.gen == gen {
		return e.count
	}
	n := 0
	for _, pi := range ni.GetPods() {
		if t.matches(pi) {
			n++
		}
	}
	t.nodes[name] = talliedNode{gen: gen, count: n}
	return n
}

func (t *spreadTally) matches(pi fwk.PodInfo) bool {
	p := pi.GetPod()
	if p.DeletionTimestamp != nil || p.Namespace != t.ns {
		return false
	}
	if own, ok := pi.(*podInfo); ok {
		m, known := t.byClass[own.cls]
		if !known {
			m = t.sel.Matches(labels.Set(p.Labels))
			t.byClass[own.cls] = m
		}
		return m
	}
	return t.sel.Matches(labels.Set(p.Labels))
}

// spreadRun is the spread state of one class run: per constraint, the
// matching pods per domain and the smallest domain, as of a snapshot
// change count.
type spreadRun struct {
	tallies []*spreadTally
	self    []bool
	at      int
	valid   bool
	domains []map[string]int
	least   []int
	// required is the class's node affinity: only nodes it admits are
	// domains (NodeAffinityPolicy Honor).
	required    nodeaffinity.RequiredNodeAffinity
	hasRequired bool
}

// countsSpread reports whether a class can be decided by spreadRun: hard
// spread constraints in the default inclusion policies, no other
// constraint that looks at pods, and no other pod's anti-affinity that
// selects it.
func (c *podClass) countsSpread(selected bool) bool {
	if len(c.hardSpread) == 0 || selected || c.perNode || c.scalar || len(c.rep.Spec.ResourceClaims) > 0 || hasHostPorts(c.rep) {
		return false
	}
	if len(c.info.GetRequiredAffinityTerms()) > 0 || len(c.info.GetRequiredAntiAffinityTerms()) > 0 {
		return false
	}
	for _, v := range c.rep.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return false
		}
	}
	for _, sc := range c.hardSpread {
		if sc.LabelSelector == nil || len(sc.MatchLabelKeys) > 0 || sc.MinDomains != nil && *sc.MinDomains > 1 ||
			sc.NodeAffinityPolicy != nil && *sc.NodeAffinityPolicy != corev1.NodeInclusionPolicyHonor ||
			sc.NodeTaintsPolicy != nil && *sc.NodeTaintsPolicy != corev1.NodeInclusionPolicyIgnore {
			return false
		}
		if _, err := metav1.LabelSelectorAsSelector(sc.LabelSelector); err != nil {
			return false
		}
	}
	return true
}

func (r *round) newSpreadRun(cls *podClass) *spreadRun {
	if r.tallies == nil {
		r.tallies = map[tallyKey]*spreadTally{}
	}
	sr := &spreadRun{required: nodeaffinity.GetRequiredNodeAffinity(cls.rep)}
	a := cls.rep.Spec.Affinity
	sr.hasRequired = len(cls.rep.Spec.NodeSelector) > 0 ||
		a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
	for _, sel := range cls.spreadSel {
		key := tallyKey{cls.rep.Namespace, sel.String()}
		t := r.tallies[key]
		if t == nil {
			t = &spreadTally{ns: cls.rep.Namespace, sel: sel, nodes: map[string]talliedNode{}, byClass: map[*podClass]bool{}}
			r.tallies[key] = t
		}
		sr.tallies = append(sr.tallies, t)
		sr.self = append(sr.self, sel.Matches(labels.Set(cls.rep.Labels)))
	}
	return sr
}

// refreshSpread counts the domains again if the snapshot changed since
// they were counted (spreadPlaced keeps them current as the class's own
// pods are placed). Over hostnames every node is a domain of its own: its
// count is the tally's, and only the smallest is kept.
func (r *round) refreshSpread(cls *podClass, sr *spreadRun) {
	if sr.valid && sr.at == r.s.snap.changes {
		return
	}
	sr.valid, sr.at = true, r.s.snap.changes
	if sr.domains == nil {
		sr.domains = make([]map[string]int, len(cls.hardSpread))
		sr.least = make([]int, len(cls.hardSpread))
	}
	for i, c := range cls.hardSpread {
		sr.least[i] = -1
		if c.TopologyKey == corev1.LabelHostname {
			continue
		}
		if sr.domains[i] == nil {
			sr.domains[i] = map[string]int{}
		} else {
			clear(sr.domains[i])
		}
	}
	for _, ni := range r.s.snap.list() {
		if !sr.eligible(cls, ni.Node()) {
			continue
		}
		for i, c := range cls.hardSpread {
			n := sr.tallies[i].count(ni)
			if c.TopologyKey == corev1.LabelHostname {
				if sr.least[i] < 0 || n < sr.least[i] {
					sr.least[i] = n
				}
				continue
			}
			sr.domains[i][ni.Node().Labels[c.TopologyKey]] += n
		}
	}
	for i, c := range cls.hardSpread {
		if c.TopologyKey != corev1.LabelHostname {
			sr.least[i] = leastOf(sr.domains[i])
		}
		// No domain: the plugin takes the smallest as 0 (fewer domains
		// than minDomains, which defaults to one).
		sr.least[i] = max(sr.least[i], 0)
	}
}

// eligible reports whether a node is a domain for the class: it passes
// the class's node affinity and has every key of its constraints.
func (sr *spreadRun) eligible(cls *podClass, node *corev1.Node) bool {
	if sr.hasRequired {
		if ok, _ := sr.required.Match(node); !ok {
			return false
		}
	}
	for _, c := range cls.hardSpread {
		if _, ok := node.Labels[c.TopologyKey]; !ok {
			return false
		}
	}
	return true
}

func leastOf(domains map[string]int) int {
	least, first := 0, true
	for _, n := range domains {
		if first || n < least {
			least, first = n, false
		}
	}
	if first {
		return -1
	}
	return least
}

// spreadPlaced brings the counts up to date after pods of the class were
// placed on node n: only n's counts changed, and only upwards (its
// DaemonSet pods may have changed with its shape: n is counted again).
func (r *round) spreadPlaced(cls *podClass, sr *spreadRun, n *simNode) {
	if !sr.valid {
		return
	}
	ni := r.s.snap.lookup(n.name)
	node := ni.Node()
	old := make([]int, len(cls.hardSpread))
	for i := range cls.hardSpread {
		e, ok := sr.tallies[i].nodes[n.name]
		if !ok {
			sr.valid = false
			return
		}
		old[i] = e.count
	}
	for i, c := range cls.hardSpread {
		now := sr.tallies[i].count(ni)
		if c.TopologyKey == corev1.LabelHostname {
			if old[i] == sr.least[i] && now != old[i] {
				sr.least[i] = r.leastNode(cls, sr, i, old[i])
			}
			continue
		}
		sr.domains[i][node.Labels[c.TopologyKey]] += now - old[i]
		sr.least[i] = max(leastOf(sr.domains[i]), 0)
	}
	sr.at = r.s.snap.changes
}

// leastNode is the smallest count of constraint i over the eligible nodes,
// none of which is below floor: the scan ends at the first node at floor.
// New and empty nodes come last in the list, so it starts there.
func (r *round) leastNode(cls *podClass, sr *spreadRun, i, floor int) int {
	all := r.s.snap.list()
	least := -1
	for j := len(all) - 1; j >= 0; j-- {
		if !sr.eligible(cls, all[j].Node()) {
			continue
		}
		n := sr.tallies[i].count(all[j])
		if least < 0 || n < least {
			least = n
			if n <= floor {
				break
			}
		}
	}
	return max(least, 0)
}

// spreadFilter is PodTopologySpread's Filter over the run's counts.
func (r *round) spreadFilter(cls *podClass, sr *spreadRun, n *simNode) *fwk.Status {
	r.refreshSpread(cls, sr)
	ni := r.s.snap.lookup(n.name)
	labels := ni.Node().Labels
	for i, c := range cls.hardSpread {
		v, ok := labels[c.TopologyKey]
		if !ok {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, podtopologyspread.ErrReasonNodeLabelNotMatch).WithPlugin(names.PodTopologySpread)
		}
		self := 0
		if sr.self[i] {
			self = 1
		}
		var count int
		if c.TopologyKey == corev1.LabelHostname {
			count = sr.tallies[i].count(ni)
		} else {
			count = sr.domains[i][v]
		}
		if count+self-sr.least[i] > int(c.MaxSkew) {
			return fwk.NewStatus(fwk.Unschedulable, podtopologyspread.ErrReasonConstraintsNotMatch).WithPlugin(names.PodTopologySpread)
		}
	}
	return nil
}
