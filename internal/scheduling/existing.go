package scheduling

import (
	"cmp"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Existing keeps the cluster's nodes and the pods bound to them the way
// the scheduler framework sees them (a NodeInfo per node, each pod sorted
// into its class), told of every change by the informers' handlers. A
// decision then starts from what is there instead of building it again
// from every pod of the cluster: a node is built anew, at the next
// decision, only when it or one of its pods changed. At a thousand nodes
// that building was most of a provisioning round.
//
// What a decision gets is never changed afterwards: a changed node gets a
// new NodeInfo, so decisions running while handlers write see the cluster
// as it was when they started. It is safe for concurrent use.
type Existing struct {
	mu     sync.Mutex
	synced func() bool
	nodes  map[string]*keptNode
	// podNode is the node each counted pod is kept on.
	podNode map[types.UID]string
	classes *classifier
	members map[*podClass]*membership
	// builds counts the NodeInfos built, for tests.
	builds int
}

// keptNode is a node and its pods. The node is nil while only pods bound
// to it are known (their handler ran before the node's).
type keptNode struct {
	node *corev1.Node
	// sig is the node's static signature (see nodeSignature).
	sig  string
	pods map[types.UID]*corev1.Pod
	// infos are the pods as classified for info, kept so that a pod that
	// did not change keeps its class without a comparison.
	infos []*podInfo
	// info is nil when the node or its pods changed since it was built.
	info *framework.NodeInfo
}

// membership counts the kept pods of a class, which is forgotten with its
// last pod.
type membership struct {
	pods        int
	fingerprint uint64
}

// NewExisting returns an Existing that knows of nothing yet.
func NewExisting() *Existing {
	return &Existing{
		nodes:   map[string]*keptNode{},
		podNode: map[types.UID]string{},
		classes: newClassifier(),
		members: map[*podClass]*membership{},
	}
}

// SetSynced tells the Existing how to know that it has been told of every
// object the informers had when they started (their handlers'
// registrations' HasSynced). Until then decisions build their nodes from
// the pods they are given.
func (e *Existing) SetSynced(synced func() bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.synced = synced
}

func (e *Existing) usable() bool {
	e.mu.Lock()
	synced := e.synced
	e.mu.Unlock()
	return synced != nil && synced()
}

// SetNode adds or updates a node.
func (e *Existing) SetNode(node *corev1.Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := e.keep(node.Name)
	if kept.node == node {
		return
	}
	kept.node, kept.sig, kept.info = node, nodeSignature(node), nil
}

// DeleteNode forgets a node. Pods still bound to it stay counted on it
// until they are deleted, and count again if it comes back.
func (e *Existing) DeleteNode(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept, ok := e.nodes[name]
	if !ok {
		return
	}
	kept.node, kept.sig, kept.info = nil, "", nil
	e.release(kept.infos)
	kept.infos = nil
	e.dropIfEmpty(name, kept)
}

// SetPod adds or updates a pod. A pod counts on the node CountedOn names.
func (e *Existing) SetPod(pod *corev1.Pod) {
	pod = withUID(pod)
	e.mu.Lock()
	defer e.mu.Unlock()
	at := CountedOn(pod)
	if name, ok := e.podNode[pod.UID]; ok && name != at {
		e.unbind(pod.UID, name)
	}
	if at == "" {
		return
	}
	kept := e.keep(at)
	if kept.pods[pod.UID] == pod {
		return
	}
	kept.pods[pod.UID] = pod
	kept.info = nil
	e.podNode[pod.UID] = at
}

// DeletePod forgets a pod.
func (e *Existing) DeletePod(pod *corev1.Pod) {
	pod = withUID(pod)
	e.mu.Lock()
	defer e.mu.Unlock()
	if name, ok := e.podNode[pod.UID]; ok {
		e.unbind(pod.UID, name)
	}
}

func (e *Existing) keep(name string) *keptNode {
	kept, ok := e.nodes[name]
	if !ok {
		kept = &keptNode{pods: map[types.UID]*corev1.Pod{}}
		e.nodes[name] = kept
	}
	return kept
}

func (e *Existing) unbind(uid types.UID, name string) {
	delete(e.podNode, uid)
	kept, ok := e.nodes[name]
	if !ok {
		return
	}
	delete(kept.pods, uid)
	kept.info = nil
	e.dropIfEmpty(name, kept)
}

func (e *Existing) dropIfEmpty(name string, kept *keptNode) {
	if kept.node == nil && len(kept.pods) == 0 {
		e.release(kept.infos)
		delete(e.nodes, name)
	}
}

// release counts pods out of their classes, forgetting a class with its
// last pod.
func (e *Existing) release(infos []*podInfo) {
	for _, info := range infos {
		m, ok := e.members[info.cls]
		if !ok {
			continue // not counted: nothing to take back
		}
		if m.pods--; m.pods == 0 {
			delete(e.members, info.cls)
			e.classes.forget(info.cls, m.fingerprint)
		}
	}
}

// keptView is what a decision starts from: the NodeInfo of each node it
// asked for and the classes of every kept pod.
type keptView struct {
	infos   []*framework.NodeInfo
	sigs    []string
	classes []*podClass
}

// view returns the NodeInfos of nodes, building those that changed. A
// node object other than the one kept (a copy the caller changed, or a
// newer one whose handler has not run yet) gets a copy of the kept
// NodeInfo with that node in it.
func (e *Existing) view(nodes []*corev1.Node) (keptView, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := keptView{infos: make([]*framework.NodeInfo, len(nodes)), sigs: make([]string, len(nodes))}
	for i, node := range nodes {
		kept, ok := e.nodes[node.Name]
		switch {
		case !ok:
			ni := framework.NewNodeInfo()
			ni.SetNode(node)
			v.infos[i], v.sigs[i] = ni, nodeSignature(node)
			continue
		case kept.node == nil:
			// Its pods are known, the node not yet: built for this
			// decision alone.
			if err := e.classify(kept); err != nil {
				return keptView{}, err
			}
			v.infos[i], v.sigs[i] = nodeInfoOf(node, kept.infos), nodeSignature(node)
			continue
		case kept.info == nil:
			if err := e.classify(kept); err != nil {
				return keptView{}, err
			}
			kept.info = nodeInfoOf(kept.node, kept.infos)
			e.builds++
		}
		if node == kept.node {
			v.infos[i], v.sigs[i] = kept.info, kept.sig
			continue
		}
		ni := kept.info.SnapshotConcrete()
		ni.SetNode(node)
		v.infos[i], v.sigs[i] = ni, nodeSignature(node)
	}
	v.classes = make([]*podClass, 0, len(e.members))
	for cls := range e.members {
		v.classes = append(v.classes, cls)
	}
	slices.SortFunc(v.classes, func(a, b *podClass) int { return cmp.Compare(a.id, b.id) })
	return v, nil
}

// classify sorts a node's pods into classes (kept.infos), by namespace
// and name so a node is always built the same way. A pod that did not
// change keeps its class; the classes of the new list are counted in
// before the old one is counted out, so a class shared by both is not
// forgotten in between.
func (e *Existing) classify(kept *keptNode) error {
	byPod := make(map[*corev1.Pod]*podInfo, len(kept.infos))
	for _, info := range kept.infos {
		byPod[info.pod] = info
	}
	pods := make([]*corev1.Pod, 0, len(kept.pods))
	for _, pod := range kept.pods {
		pods = append(pods, pod)
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	infos := make([]*podInfo, len(pods))
	for i, pod := range pods {
		if info, ok := byPod[pod]; ok {
			infos[i] = info
		} else {
			fp := fingerprint(pod)
			cls, err := e.classes.classifyPrinted(pod, fp)
			if err != nil {
				e.release(infos[:i])
				return err
			}
			infos[i] = &podInfo{pod: pod, cls: cls}
			if _, ok := e.members[cls]; !ok {
				e.members[cls] = &membership{fingerprint: fp}
			}
		}
		e.members[infos[i].cls].pods++
	}
	e.release(kept.infos)
	kept.infos = infos
	return nil
}
