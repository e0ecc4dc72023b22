package scheduling

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Snapshot is an in-memory view of a cluster's nodes and the pods on them,
// served to the scheduler framework's plugins through its SharedLister
// interface.
//
// Fork starts a layer of changes on top of the current state; Revert drops
// it and Commit folds it into the layer below. A layer holds only the nodes
// changed in it, each copied on its first change (the pattern of the
// cluster-autoscaler's delta snapshot), so forking is free and trying a
// placement costs one node copy, not a copy of the cluster.
//
// A Snapshot is not safe for concurrent use.
type Snapshot struct {
	layers []*layer
	// frozen layers at the bottom are shared with other snapshots (see
	// freeze): changes copy their nodes, and Revert and Commit stop above
	// them.
	frozen int

	// Caches of the lists plugins ask for, rebuilt on demand after a change.
	listValid     bool
	all           []fwk.NodeInfo
	affinityValid bool
	withAffinity  []fwk.NodeInfo
	withAnti      []fwk.NodeInfo
	withNonHost   []fwk.NodeInfo

	// changes counts changes to nodes and pods, so a reader can tell
	// whether what it derived is still current.
	changes int
	// changed logs the names of the nodes changed (or added, removed)
	// since epoch began, for readers that keep sums over nodes; Revert
	// and Commit start a new epoch.
	changed []string
	epoch   int

	// view, when set, is what List and the affinity lists return: the
	// packer narrows PreFilter to the nodes that can matter for a pod.
	view []fwk.NodeInfo

	// dra holds the devices and claims, for pods with ResourceClaims;
	// nil while no decision needs them.
	dra *draState
}

type layer struct {
	// nodes added or changed in this layer.
	nodes map[string]*framework.NodeInfo
	// removed hides nodes of lower layers.
	removed map[string]bool
	// names in the order nodes were added, for a stable List; may hold
	// names that were removed since.
	names []string
}

func newLayer() *layer {
	return &layer{nodes: map[string]*framework.NodeInfo{}, removed: map[string]bool{}}
}

var (
	_ fwk.SharedLister      = (*Snapshot)(nil)
	_ fwk.NodeInfoLister    = (*nodeInfoLister)(nil)
	_ fwk.StorageInfoLister = (*storageInfoLister)(nil)
)

// NewSnapshot returns an empty snapshot.
func NewSnapshot() *Snapshot {
	return &Snapshot{layers: []*layer{newLayer()}}
}

// Fork starts a new layer of changes.
func (s *Snapshot) Fork() {
	s.layers = append(s.layers, newLayer())
	if s.dra != nil {
		s.dra.fork()
	}
}

// withDRA gives the snapshot its DRA state, forked as deep as the
// snapshot is, so that it reverts with it.
func (s *Snapshot) withDRA(d *draState) *draState {
	for len(d.layers) < len(s.layers) {
		d.fork()
	}
	s.dra = d
	return d
}

// Revert drops every change since the last Fork. Without a fork it does
// nothing.
func (s *Snapshot) Revert() {
	if len(s.layers) <= s.frozen+1 {
		return
	}
	s.layers = s.layers[:len(s.layers)-1]
	if s.dra != nil {
		s.dra.revert()
	}
	s.invalidate()
	s.newEpoch()
}

func (s *Snapshot) newEpoch() {
	s.epoch++
	s.changed = s.changed[:0]
}

// Commit keeps the changes since the last Fork, folding them into the layer
// below. Without a fork it does nothing.
func (s *Snapshot) Commit() {
	if len(s.layers) <= s.frozen+1 {
		return
	}
	top, below := s.layers[len(s.layers)-1], s.layers[len(s.layers)-2]
	s.layers = s.layers[:len(s.layers)-1]
	if s.dra != nil {
		s.dra.commit()
	}
	for name := range top.removed {
		delete(below.nodes, name)
		if len(s.layers) > 1 {
			if ni, _ := s.lookupFrom(len(s.layers)-2, name); ni != nil {
				below.removed[name] = true
			}
		}
	}
	for name, ni := range top.nodes {
		below.nodes[name] = ni
		delete(below.removed, name)
	}
	below.names = append(below.names, top.names...)
	s.invalidate()
	s.newEpoch()
}

func (s *Snapshot) invalidate() {
	s.changes++
	s.listValid = false
	s.affinityValid = false
}

// lookupFrom finds a node looking down from layer i; it returns the layer it
// was found in.
func (s *Snapshot) lookupFrom(i int, name string) (*framework.NodeInfo, int) {
	for ; i >= 0; i-- {
		l := s.layers[i]
		if ni, ok := l.nodes[name]; ok {
			return ni, i
		}
		if l.removed[name] {
			return nil, -1
		}
	}
	return nil, -1
}

func (s *Snapshot) lookup(name string) *framework.NodeInfo {
	ni, _ := s.lookupFrom(len(s.layers)-1, name)
	return ni
}

// mutable returns the node's NodeInfo for changing, copying it into the top
// layer first if it lives below.
func (s *Snapshot) mutable(name string) (*framework.NodeInfo, error) {
	top := len(s.layers) - 1
	ni, at := s.lookupFrom(top, name)
	if ni == nil {
		return nil, fmt.Errorf("node %s not in snapshot", name)
	}
	// Every caller changes the node.
	s.changes++
	s.changed = append(s.changed, name)
	if at == top {
		return ni, nil
	}
	c := ni.SnapshotConcrete()
	s.layers[top].nodes[name] = c
	s.replaceListed(ni, c)
	return c, nil
}

// AddNode adds a node with the pods bound to it.
func (s *Snapshot) AddNode(node *corev1.Node, pods ...*corev1.Pod) error {
	infos := make([]fwk.PodInfo, 0, len(pods))
	for _, p := range pods {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		infos = append(infos, pi)
	}
	return s.addNode(node, infos)
}

func (s *Snapshot) addNode(node *corev1.Node, pods []fwk.PodInfo) error {
	return s.addNodeInfo(nodeInfoOf(node, pods))
}

// nodeInfoOf is a new NodeInfo of the node and pods.
func nodeInfoOf[P fwk.PodInfo](node *corev1.Node, pods []P) *framework.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	for _, p := range pods {
		ni.AddPodInfo(p)
	}
	return ni
}

// addNodeInfo adds a node as a NodeInfo built elsewhere, which the snapshot
// takes as its own.
func (s *Snapshot) addNodeInfo(ni *framework.NodeInfo) error {
	name := ni.Node().Name
	if s.lookup(name) != nil {
		return fmt.Errorf("node %s already in snapshot", name)
	}
	s.changes++
	s.changed = append(s.changed, name)
	top := s.layers[len(s.layers)-1]
	if !top.removed[name] {
		top.names = append(top.names, name)
		// A new name comes last in the list as it would when rebuilt:
		// no rebuild, which costs a pass over every node per class that
		// tries a node out.
		if s.listValid {
			s.all = append(s.all, ni)
			s.affinityValid = false
		}
	} else {
		s.invalidate()
	}
	delete(top.removed, name)
	top.nodes[name] = ni
	return nil
}

// replaceListed puts a node's copy where the node was in the list.
func (s *Snapshot) replaceListed(old, c *framework.NodeInfo) {
	s.affinityValid = false
	if !s.listValid {
		return
	}
	for i := len(s.all) - 1; i >= 0; i-- {
		if s.all[i] == old {
			s.all[i] = c
			return
		}
	}
	s.listValid = false
}

// unlist takes a removed node out of the list, keeping the order.
func (s *Snapshot) unlist(ni *framework.NodeInfo) {
	s.affinityValid = false
	if !s.listValid {
		return
	}
	for i := len(s.all) - 1; i >= 0; i-- {
		if s.all[i] == ni {
			s.all = slices.Delete(s.all, i, i+1)
			return
		}
	}
	s.listValid = false
}

// freeze makes every layer so far one that is never written to again, nor
// reverted or committed: its NodeInfos may be shared with other
// snapshots. Changes from then on go to a layer above, copying a node on
// its first change as for a fork.
func (s *Snapshot) freeze() {
	s.Fork()
	s.frozen = len(s.layers) - 1
}

// RemoveNode removes a node and its pods.
func (s *Snapshot) RemoveNode(name string) error {
	top := len(s.layers) - 1
	ni, at := s.lookupFrom(top, name)
	if ni == nil {
		return fmt.Errorf("node %s not in snapshot", name)
	}
	l := s.layers[top]
	delete(l.nodes, name)
	if at < top || (top > 0 && s.hasBelow(top, name)) {
		l.removed[name] = true
	}
	s.changes++
	s.changed = append(s.changed, name)
	s.unlist(ni)
	if s.dra != nil && s.dra.nodeSlices(name) != nil {
		s.dra.setNodeSlices(name, nil)
	}
	return nil
}

func (s *Snapshot) hasBelow(top int, name string) bool {
	ni, _ := s.lookupFrom(top-1, name)
	return ni != nil
}

// setNode replaces a node object, keeping its pods.
func (s *Snapshot) setNode(node *corev1.Node) error {
	ni, err := s.mutable(node.Name)
	if err != nil {
		return err
	}
	ni.SetNode(node)
	return nil
}

// AddPod binds a pod to a node of the snapshot.
func (s *Snapshot) AddPod(pod *corev1.Pod, nodeName string) error {
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = s.addPodInfo(pi, nodeName)
	return err
}

func (s *Snapshot) addPodInfo(pi fwk.PodInfo, nodeName string) (*framework.NodeInfo, error) {
	ni, err := s.mutable(nodeName)
	if err != nil {
		return nil, err
	}
	ni.AddPodInfo(pi)
	if hasAffinity(pi.GetPod()) {
		s.affinityValid = false
	}
	return ni, nil
}

// addPodInfos binds pending pods of one class to a node.
func (s *Snapshot) addPodInfos(infos []podInfo, nodeName string) error {
	ni, err := s.mutable(nodeName)
	if err != nil {
		return err
	}
	if len(infos) == 0 {
		return nil
	}
	cls := infos[0].cls
	if hasAffinity(infos[0].pod) || !cls.simple || cls.scalar {
		for i := range infos {
			ni.AddPodInfo(&infos[i])
		}
		if hasAffinity(infos[0].pod) {
			s.affinityValid = false
		}
		return nil
	}
	// Pods of a simple class use no host ports or volumes, have no pod
	// affinity and (checked above) ask for no scalar resource: adding
	// one changes only the pod list and the requested sums. All but the last are added in one
	// step; AddPodInfo adds the last, which also moves the node's
	// generation on.
	k := int64(len(infos) - 1)
	ni.Pods = slices.Grow(ni.Pods, len(infos))
	for i := range infos[:k] {
		ni.Pods = append(ni.Pods, &infos[i])
	}
	r := cls.res.Resource
	ni.Requested.MilliCPU += k * r.GetMilliCPU()
	ni.Requested.Memory += k * r.GetMemory()
	ni.Requested.EphemeralStorage += k * r.GetEphemeralStorage()
	ni.NonZeroRequested.MilliCPU += k * cls.res.Non0CPU
	ni.NonZeroRequested.Memory += k * cls.res.Non0Mem
	ni.AddPodInfo(&infos[k])
	return nil
}

// RemovePod takes a pod off a node of the snapshot.
func (s *Snapshot) RemovePod(pod *corev1.Pod, nodeName string) error {
	ni, err := s.mutable(nodeName)
	if err != nil {
		return err
	}
	if err := ni.RemovePod(klog.Background(), pod); err != nil {
		return err
	}
	if hasAffinity(pod) {
		s.affinityValid = false
	}
	return nil
}

func hasAffinity(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	return a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil)
}

func (s *Snapshot) list() []fwk.NodeInfo {
	if s.listValid {
		return s.all
	}
	s.all = s.all[:0]
	seen := make(map[string]bool)
	for _, l := range s.layers {
		for _, name := range l.names {
			if seen[name] {
				continue
			}
			seen[name] = true
			if ni := s.lookup(name); ni != nil {
				s.all = append(s.all, ni)
			}
		}
	}
	s.listValid = true
	s.affinityValid = false
	return s.all
}

func (s *Snapshot) affinityLists() {
	if s.affinityValid && s.listValid {
		return
	}
	all := s.list()
	s.withAffinity, s.withAnti, s.withNonHost = s.withAffinity[:0], s.withAnti[:0], s.withNonHost[:0]
	for _, ni := range all {
		if len(ni.GetPodsWithAffinity()) > 0 {
			s.withAffinity = append(s.withAffinity, ni)
		}
		if len(ni.GetPodsWithRequiredAntiAffinity()) > 0 {
			s.withAnti = append(s.withAnti, ni)
		}
		if len(ni.GetPodsWithRequiredNonHostScopedAntiAffinity()) > 0 {
			s.withNonHost = append(s.withNonHost, ni)
		}
	}
	s.affinityValid = true
}

// NodeInfos implements fwk.SharedLister.
func (s *Snapshot) NodeInfos() fwk.NodeInfoLister { return (*nodeInfoLister)(s) }

// StorageInfos implements fwk.SharedLister.
func (s *Snapshot) StorageInfos() fwk.StorageInfoLister { return (*storageInfoLister)(s) }

// PodGroupStates implements fwk.SharedLister; pod groups are not simulated.
func (s *Snapshot) PodGroupStates() fwk.PodGroupStateLister { return noPodGroupStates{} }

// PodGroups implements fwk.SharedLister; pod groups are not simulated.
func (s *Snapshot) PodGroups() fwk.PodGroupLister { return noPodGroups{} }

// CompositePodGroupStates implements fwk.SharedLister; not simulated.
func (s *Snapshot) CompositePodGroupStates() fwk.CompositePodGroupStateLister {
	return noCompositePodGroupStates{}
}

// CompositePodGroups implements fwk.SharedLister; not simulated.
func (s *Snapshot) CompositePodGroups() fwk.CompositePodGroupLister {
	return noCompositePodGroups{}
}

type nodeInfoLister Snapshot

func (l *nodeInfoLister) List() ([]fwk.NodeInfo, error) {
	s := (*Snapshot)(l)
	if s.view != nil {
		return s.view, nil
	}
	return s.list(), nil
}

func (l *nodeInfoLister) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) {
	s := (*Snapshot)(l)
	if s.view != nil {
		return filterView(s.view, fwk.NodeInfo.GetPodsWithAffinity), nil
	}
	s.affinityLists()
	return s.withAffinity, nil
}

func (l *nodeInfoLister) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	s := (*Snapshot)(l)
	if s.view != nil {
		return filterView(s.view, fwk.NodeInfo.GetPodsWithRequiredAntiAffinity), nil
	}
	s.affinityLists()
	return s.withAnti, nil
}

func (l *nodeInfoLister) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	s := (*Snapshot)(l)
	if s.view != nil {
		return filterView(s.view, fwk.NodeInfo.GetPodsWithRequiredNonHostScopedAntiAffinity), nil
	}
	s.affinityLists()
	return s.withNonHost, nil
}

func filterView(view []fwk.NodeInfo, pods func(fwk.NodeInfo) []fwk.PodInfo) []fwk.NodeInfo {
	var out []fwk.NodeInfo
	for _, ni := range view {
		if len(pods(ni)) > 0 {
			out = append(out, ni)
		}
	}
	return out
}

func (l *nodeInfoLister) Get(name string) (fwk.NodeInfo, error) {
	if ni := (*Snapshot)(l).lookup(name); ni != nil {
		return ni, nil
	}
	return nil, fmt.Errorf("node %s not in snapshot", name)
}

type storageInfoLister Snapshot

func (l *storageInfoLister) IsPVCUsedByPods(key string) bool {
	for _, ni := range (*Snapshot)(l).list() {
		if ni.GetPVCRefCounts()[key] > 0 {
			return true
		}
	}
	return false
}

var errNoPodGroups = errors.New("pod groups are not simulated")

type noPodGroupStates struct{}

func (noPodGroupStates) Get(string, string) (fwk.PodGroupState, error) { return nil, errNoPodGroups }

type noPodGroups struct{}

func (noPodGroups) Get(string, string) (*schedulingv1beta1.PodGroup, error) {
	return nil, errNoPodGroups
}

type noCompositePodGroupStates struct{}

func (noCompositePodGroupStates) Get(string, string) (fwk.CompositePodGroupState, error) {
	return nil, errNoPodGroups
}

type noCompositePodGroups struct{}

func (noCompositePodGroups) Get(string, string) (*schedulingv1alpha3.CompositePodGroup, error) {
	return nil, errNoPodGroups
}
