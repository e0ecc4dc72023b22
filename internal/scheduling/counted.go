package scheduling

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
)

// Hard topology spread and pod (anti-)affinity are the constraints bare
// pods most often carry, and through the framework they cost a pass over
// every pod of the cluster per pod placed: PodTopologySpread's and
// InterPodAffinity's PreFilter count the matching pods of every node, and
// the spread state cannot be kept current as pods are added (it tracks
// only the two smallest domains). A class whose constraints beyond
// resources and static filters are of the plain kinds (see countable) is
// decided here instead, with the plugins' own arithmetic (spread: the
// matching pods in the domain, + 1 if the pod matches itself, − the
// smallest domain ≤ maxSkew; affinity: a matching pod in the domain, or
// none anywhere and the pod matches its own term; anti-affinity: no
// matching pod in the domain) over counts kept per selector or term and
// node, summed per domain from the snapshot's log of changed nodes.

// tally counts, per node, the pods a spread selector (in a namespace) or
// a pod affinity term matches.
type tally struct {
	// match says whether the tally counts a pod.
	match func(*corev1.Pod) bool
	// nodes holds each node's count with the NodeInfo generation it was
	// taken at.
	nodes map[string]talliedNode
	// placed, the round's, logs per node the pods placed on it (see
	// placedSince).
	placed map[string][]addedPods
	// byClass memoises whether the selector matches a class's pods.
	byClass map[*podClass]bool

	// Sums per topology key over every node that has the key, kept
	// current from the snapshot's log of changed nodes: a class reads
	// them instead of passing over every node.
	keys     []string
	sums     []*keySums
	summed   map[string]summedNode
	cursor   int
	epoch    int
	inSync   bool
	snapshot *Snapshot
}

// keySums is what a tally counts per domain of one key. Over hostnames
// every node is a domain: only how many nodes have each count is kept.
type keySums struct {
	host    bool
	domains map[string]int
	nodes   map[string]int
	perNode map[int]int
	total   int
}

// summedNode is what a node added to the sums, to take it out again.
type summedNode struct {
	count int
	vals  []string
	has   []bool
}

// sumsOf returns the tally's sums over key, current as of now.
func (t *tally) sumsOf(snap *Snapshot, key string) *keySums {
	idx := -1
	for i, k := range t.keys {
		if k == key {
			idx = i
		}
	}
	if idx < 0 {
		t.keys = append(t.keys, key)
		t.sums = append(t.sums, nil)
		idx = len(t.keys) - 1
		t.inSync = false
	}
	t.sync(snap)
	return t.sums[idx]
}

// summing reports whether the tally keeps sums over key for the snapshot
// as it is now, so that sumsOf costs only the nodes changed since.
func (t *tally) summing(snap *Snapshot, key string) bool {
	if !t.inSync || t.snapshot != snap || t.epoch != snap.epoch || t.cursor > len(snap.changed) {
		return false
	}
	return slices.Contains(t.keys, key)
}

func (t *tally) sync(snap *Snapshot) {
	if t.inSync && t.snapshot == snap && t.epoch == snap.epoch && t.cursor <= len(snap.changed) {
		for _, name := range snap.changed[t.cursor:] {
			t.unsum(name)
			if ni := snap.lookup(name); ni != nil {
				t.sum(ni)
			}
		}
		t.cursor = len(snap.changed)
		return
	}
	for i, k := range t.keys {
		t.sums[i] = &keySums{host: k == corev1.LabelHostname, domains: map[string]int{}, nodes: map[string]int{}, perNode: map[int]int{}}
	}
	t.summed = map[string]summedNode{}
	for _, ni := range snap.list() {
		t.sum(ni)
	}
	t.inSync, t.snapshot, t.epoch, t.cursor = true, snap, snap.epoch, len(snap.changed)
}

func (t *tally) sum(ni fwk.NodeInfo) {
	node := ni.Node()
	c := t.count(ni)
	e := summedNode{count: c, vals: make([]string, len(t.keys)), has: make([]bool, len(t.keys))}
	for i, k := range t.keys {
		v, ok := node.Labels[k]
		if !ok {
			continue
		}
		e.vals[i], e.has[i] = v, true
		s := t.sums[i]
		if s.host {
			s.perNode[c]++
		} else {
			s.domains[v] += c
			s.nodes[v]++
		}
		s.total += c
	}
	t.summed[node.Name] = e
}

func (t *tally) unsum(name string) {
	e, ok := t.summed[name]
	if !ok {
		return
	}
	delete(t.summed, name)
	for i := range t.keys {
		if !e.has[i] {
			continue
		}
		s := t.sums[i]
		if s.host {
			if s.perNode[e.count]--; s.perNode[e.count] == 0 {
				delete(s.perNode, e.count)
			}
		} else {
			s.domains[e.vals[i]] -= e.count
			if s.nodes[e.vals[i]]--; s.nodes[e.vals[i]] == 0 {
				delete(s.nodes, e.vals[i])
				delete(s.domains, e.vals[i])
			}
		}
		s.total -= e.count
	}
}

// least is the smallest domain, -1 without any.
func (s *keySums) least() int {
	least := -1
	if s.host {
		for c := range s.perNode {
			if least < 0 || c < least {
				least = c
			}
		}
		return least
	}
	for _, c := range s.domains {
		if least < 0 || c < least {
			least = c
		}
	}
	return least
}

type talliedNode struct {
	gen   int64
	count int
}

// tallyKey names what a tally counts: a spread selector in a namespace,
// or a pod affinity term.
type tallyKey struct {
	ns, sel, term string
}

func (t *tally) count(ni fwk.NodeInfo) int {
	name := ni.Node().Name
	gen := ni.GetGeneration()
	e, ok := t.nodes[name]
	if ok && e.gen == gen {
		return e.count
	}
	if ok {
		if n, current := t.placedSince(name, e, gen); current {
			t.nodes[name] = talliedNode{gen: gen, count: n}
			return n
		}
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

// placedSince brings a node's count taken at e.gen up to generation gen
// from the log of pods placed on the node, when those placements are all
// that changed it since: a node of a hundred pods is not counted again by
// every tally after each placement.
func (t *tally) placedSince(name string, e talliedNode, gen int64) (int, bool) {
	log := t.placed[name]
	i, found := slices.BinarySearchFunc(log, e.gen, func(a addedPods, gen int64) int { return cmp.Compare(a.before, gen) })
	if !found {
		return 0, false
	}
	n, at := e.count, e.gen
	for ; i < len(log) && log[i].before == at; i++ {
		if t.matchesClass(log[i].cls) {
			n += log[i].k
		}
		at = log[i].after
		if at == gen {
			return n, true
		}
	}
	return 0, false
}

func (t *tally) matchesPod(p *corev1.Pod) bool { return t.match(p) }

// matchesClass reports whether the tally counts the class's pods.
func (t *tally) matchesClass(cls *podClass) bool {
	m, known := t.byClass[cls]
	if !known {
		m = t.match(cls.rep)
		t.byClass[cls] = m
	}
	return m
}

func (t *tally) matches(pi fwk.PodInfo) bool {
	if own, ok := pi.(*podInfo); ok {
		m, known := t.byClass[own.cls]
		if !known {
			m = t.match(own.pod)
			t.byClass[own.cls] = m
		}
		return m
	}
	return t.match(pi.GetPod())
}

func (r *round) tally(key tallyKey, match func(*corev1.Pod) bool) *tally {
	if r.tallies == nil {
		r.tallies = map[tallyKey]*tally{}
	}
	t := r.tallies[key]
	if t == nil {
		if r.placed == nil {
			r.placed = map[string][]addedPods{}
		}
		t = &tally{match: match, nodes: map[string]talliedNode{}, byClass: map[*podClass]bool{}, placed: r.placed}
		r.tallies[key] = t
	}
	return t
}

// countedRun is the spread state of one class run: per constraint, the
// matching pods per domain and the smallest domain, as of a snapshot
// change count.
type countedRun struct {
	tallies []*tally
	self    []bool
	at      int
	valid   bool
	domains []map[string]int
	least   []int
	// required is the class's node affinity: only nodes it admits are
	// domains (NodeAffinityPolicy Honor).
	required    nodeaffinity.RequiredNodeAffinity
	hasRequired bool
	// empty are the templates of the nodes the class could open, each a
	// domain with its DaemonSet pods only.
	empty []*template
	// affinity is the class's one required pod affinity term, if any,
	// and affSelfMatch whether its pods match it; anti its required
	// anti-affinity terms.
	affinity     *termCount
	affSelfMatch bool
	anti         []*termCount
	// summed is set for one spread constraint and no node affinity: the
	// tally's sums over the key are the domains (sums), with what the
	// empty domains add in domains[0].
	summed bool
	sums   *keySums
}

// termCount is the pods matching a pod affinity term per domain of its
// key and in all, over every node that has the key (the plugin counts
// over all nodes, whatever the pod's node affinity).
type termCount struct {
	term  fwk.AffinityTerm
	tally *tally
	sums  *keySums
}

func (r *round) termCount(term fwk.AffinityTerm) *termCount {
	// The term's namespaces are a set (no namespace selector, see
	// countable): it matches without namespace labels, as the plugin
	// matches the incoming pod's terms.
	key := tallyKey{term: fmt.Sprintf("%v|%s", sets.List(term.Namespaces), term.Selector)}
	return &termCount{term: term, tally: r.tally(key, func(p *corev1.Pod) bool { return term.Matches(p, nil) })}
}

// in is the count in the node's domain, and whether the node has the key.
func (tc *termCount) in(ni fwk.NodeInfo) (int, bool) {
	v, ok := ni.Node().Labels[tc.term.TopologyKey]
	if !ok {
		return 0, false
	}
	if tc.term.TopologyKey == corev1.LabelHostname {
		return tc.tally.count(ni), true
	}
	return tc.sums.domains[v], true
}

// emptyCount is what a node of template t would count for constraint i:
// its DaemonSet pods the selector matches.
func (sr *countedRun) emptyCount(t *template, i int) int {
	n := 0
	for _, p := range t.ds {
		if sr.tallies[i].matchesPod(p) {
			n++
		}
	}
	return n
}

// countable reports whether a class can be decided by countedRun: hard
// spread constraints in the default inclusion policies, at most one
// required pod affinity term, required anti-affinity terms, all without
// namespace selectors or label keys, no ports, volumes or resource
// claims, and no anti-affinity of another class or of a bound pod
// that selects it (its own selects only pods its own terms see).
func (c *podClass) countable(selectedByOthers bool) bool {
	affinity := c.info.GetRequiredAffinityTerms()
	anti := c.info.GetRequiredAntiAffinityTerms()
	if len(c.hardSpread) == 0 && len(affinity) == 0 && len(anti) == 0 || selectedByOthers || c.perNode || len(c.rep.Spec.ResourceClaims) > 0 || hasHostPorts(c.rep) {
		return false
	}
	if len(affinity) > 1 {
		return false
	}
	if a := c.rep.Spec.Affinity; a != nil {
		var terms []corev1.PodAffinityTerm
		if a.PodAffinity != nil {
			terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		}
		if a.PodAntiAffinity != nil {
			terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		}
		for _, t := range terms {
			if t.NamespaceSelector != nil || len(t.MatchLabelKeys) > 0 || len(t.MismatchLabelKeys) > 0 {
				return false
			}
		}
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

// keepsAwayFrom reports whether the class's own anti-affinity keeps it out
// of every domain where other's terms (those that select the class) would
// keep it out: then counting the class's own terms decides both ways.
// other nil is a bound pod's class, which is never taken as covered.
func (c *podClass) keepsAwayFrom(other *podClass, terms []fwk.AffinityTerm, nsLabels map[string]labels.Set) bool {
	if other == nil {
		return false
	}
	own := c.info.GetRequiredAntiAffinityTerms()
	for i := range terms {
		if !terms[i].Matches(c.rep, nsLabels[c.rep.Namespace]) {
			continue
		}
		covered := false
		for j := range own {
			if own[j].TopologyKey == terms[i].TopologyKey && own[j].Matches(other.rep, nsLabels[other.rep.Namespace]) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

func (r *round) newCountedRun(cls *podClass) *countedRun {
	sr := &countedRun{required: nodeaffinity.GetRequiredNodeAffinity(cls.rep)}
	a := cls.rep.Spec.Affinity
	sr.hasRequired = len(cls.rep.Spec.NodeSelector) > 0 ||
		a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
	for _, sel := range cls.spreadSel {
		ns, sel := cls.rep.Namespace, sel
		sr.tallies = append(sr.tallies, r.tally(tallyKey{ns: ns, sel: sel.String()}, func(p *corev1.Pod) bool {
			return p.DeletionTimestamp == nil && p.Namespace == ns && sel.Matches(labels.Set(p.Labels))
		}))
		sr.self = append(sr.self, sel.Matches(labels.Set(cls.rep.Labels)))
	}
	sr.summed = len(cls.hardSpread) == 1 && !sr.hasRequired
	if terms := cls.info.GetRequiredAffinityTerms(); len(terms) == 1 {
		sr.affinity = r.termCount(terms[0])
		sr.affSelfMatch = terms[0].Matches(cls.rep, nil)
	}
	for _, term := range cls.info.GetRequiredAntiAffinityTerms() {
		sr.anti = append(sr.anti, r.termCount(term))
	}
	return sr
}

// refreshCounts brings the run's counts up to date if the snapshot
// changed since. The terms, and a single spread constraint of a class
// without node affinity, read the tallies' sums, which follow the
// snapshot's log of changed nodes. Other spread classes count their
// domains over the eligible nodes (countedPlaced keeps them current as the
// class's own pods are placed). Over hostnames every node is a domain of
// its own: its count is the tally's, and only the smallest is kept.
func (r *round) refreshCounts(cls *podClass, sr *countedRun) {
	if sr.valid && sr.at == r.s.snap.changes {
		return
	}
	sr.valid, sr.at = true, r.s.snap.changes
	snap := r.s.snap
	if sr.affinity != nil {
		sr.affinity.sums = sr.affinity.tally.sumsOf(snap, sr.affinity.term.TopologyKey)
	}
	for _, tc := range sr.anti {
		tc.sums = tc.tally.sumsOf(snap, tc.term.TopologyKey)
	}
	if len(cls.hardSpread) == 0 {
		return
	}
	if sr.domains == nil {
		sr.domains = make([]map[string]int, len(cls.hardSpread))
		sr.least = make([]int, len(cls.hardSpread))
	}
	if sr.summed {
		c := cls.hardSpread[0]
		sums := sr.tallies[0].sumsOf(snap, c.TopologyKey)
		sr.sums = sums
		least := sums.least()
		if sr.domains[0] == nil {
			sr.domains[0] = map[string]int{}
		} else {
			clear(sr.domains[0])
		}
		// The nodes the class could open are domains too, with what their
		// DaemonSet pods add.
		for _, t := range sr.empty {
			v, ok := t.node.Labels[c.TopologyKey]
			if !ok {
				continue
			}
			n := sr.emptyCount(t, 0)
			if sums.host {
				if least < 0 || n < least {
					least = n
				}
				continue
			}
			sr.domains[0][v] += n
		}
		if !sums.host {
			least = -1
			for v, n := range sums.domains {
				if total := n + sr.domains[0][v]; least < 0 || total < least {
					least = total
				}
			}
			for v, n := range sr.domains[0] {
				if _, ok := sums.domains[v]; !ok && (least < 0 || n < least) {
					least = n
				}
			}
		}
		sr.least[0] = max(least, 0)
		return
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
	for _, ni := range snap.list() {
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
	for _, t := range sr.empty {
		if !sr.eligible(cls, t.node) {
			continue
		}
		for i, c := range cls.hardSpread {
			n := sr.emptyCount(t, i)
			if c.TopologyKey == corev1.LabelHostname {
				if sr.least[i] < 0 || n < sr.least[i] {
					sr.least[i] = n
				}
				continue
			}
			sr.domains[i][t.node.Labels[c.TopologyKey]] += n
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

// termsFilter is InterPodAffinity's Filter for the class's terms: with an
// affinity term, the node's domain holds a matching pod, or no node does
// and the pod matches its own term; no anti-affinity term has a matching
// pod in the node's domain.
func (sr *countedRun) termsFilter(ni fwk.NodeInfo) *fwk.Status {
	if tc := sr.affinity; tc != nil {
		n, has := tc.in(ni)
		if !has || n == 0 && (tc.sums.total > 0 || !sr.affSelfMatch) {
			return failAffinity
		}
	}
	for _, tc := range sr.anti {
		if n, _ := tc.in(ni); n > 0 {
			return failAntiAffinity
		}
	}
	return nil
}

// eligible reports whether a node is a domain for the class: it passes
// the class's node affinity and has every key of its constraints.
func (sr *countedRun) eligible(cls *podClass, node *corev1.Node) bool {
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

// countedPlaced brings the counts up to date after pods of the class were
// placed on node n: only n's counts changed, and only upwards (its
// DaemonSet pods may have changed with its shape: n is counted again).
func (r *round) countedPlaced(cls *podClass, sr *countedRun, n *simNode) {
	if !sr.valid || sr.summed || len(cls.hardSpread) == 0 {
		// The sums follow the snapshot's log by themselves.
		sr.valid = false
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
	// The terms' sums are read again from the log.
	for _, tc := range append([]*termCount{sr.affinity}, sr.anti...) {
		if tc != nil {
			tc.sums = tc.tally.sumsOf(r.s.snap, tc.term.TopologyKey)
		}
	}
	sr.at = r.s.snap.changes
}

// leastNode is the smallest count of constraint i over the eligible nodes,
// none of which is below floor: the scan ends at the first node at floor.
// New and empty nodes come last in the list, so it starts there.
func (r *round) leastNode(cls *podClass, sr *countedRun, i, floor int) int {
	least := -1
	for _, t := range sr.empty {
		if !sr.eligible(cls, t.node) {
			continue
		}
		if n := sr.emptyCount(t, i); least < 0 || n < least {
			least = n
			if n <= floor {
				return n
			}
		}
	}
	all := r.s.snap.list()
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

// The failures the counted filters and try answer with, built once: a scan
// fails on most of the nodes it checks, and the statuses are only read.
var (
	failAffinity     = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, interpodaffinity.ErrReasonAffinityRulesNotMatch).WithPlugin(names.InterPodAffinity)
	failAntiAffinity = fwk.NewStatus(fwk.Unschedulable, interpodaffinity.ErrReasonAntiAffinityRulesNotMatch).WithPlugin(names.InterPodAffinity)
	failSpreadLabel  = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, podtopologyspread.ErrReasonNodeLabelNotMatch).WithPlugin(names.PodTopologySpread)
	failSpreadSkew   = fwk.NewStatus(fwk.Unschedulable, podtopologyspread.ErrReasonConstraintsNotMatch).WithPlugin(names.PodTopologySpread)
	failStatic       = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't match the pod's node affinity, selector or tolerations").WithPlugin(names.NodeAffinity)
	failPreFilter    = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't satisfy PreFilter").WithPlugin(names.NodeAffinity)
	failResources    = fwk.NewStatus(fwk.Unschedulable, "node(s) had insufficient resources").WithPlugin(names.NodeResourcesFit)
)

// countedFilter is PodTopologySpread's Filter over the run's counts.
func (r *round) countedFilter(cls *podClass, sr *countedRun, n *simNode) *fwk.Status {
	r.refreshCounts(cls, sr)
	ni := r.s.snap.lookup(n.name)
	if st := sr.termsFilter(ni); st != nil {
		return st
	}
	labels := ni.Node().Labels
	for i, c := range cls.hardSpread {
		v, ok := labels[c.TopologyKey]
		if !ok {
			return failSpreadLabel
		}
		self := 0
		if sr.self[i] {
			self = 1
		}
		var count int
		switch {
		case c.TopologyKey == corev1.LabelHostname:
			count = sr.tallies[i].count(ni)
		case sr.summed:
			count = sr.sums.domains[v] + sr.domains[0][v]
		default:
			count = sr.domains[i][v]
		}
		if count+self-sr.least[i] > int(c.MaxSkew) {
			return failSpreadSkew
		}
	}
	return nil
}
