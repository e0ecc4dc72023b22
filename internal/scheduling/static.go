package scheduling

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
)

// nodeSignature is everything the static plugins read of a node except its
// hostname: nodes with equal signatures get equal verdicts for pods that do
// not select on node identity.
func nodeSignature(n *corev1.Node) string {
	var b strings.Builder
	keys := make([]string, 0, len(n.Labels))
	for k := range n.Labels {
		if k != corev1.LabelHostname {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(n.Labels[k])
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, t := range n.Spec.Taints {
		fmt.Fprintf(&b, "%s=%s:%s\x00", t.Key, t.Value, t.Effect)
	}
	if n.Spec.Unschedulable {
		b.WriteString("\x01unschedulable")
	}
	return b.String()
}

func (s *Simulator) staticID(sig string) int {
	if id, ok := s.staticIDs[sig]; ok {
		return id
	}
	id := len(s.staticIDs)
	s.staticIDs[sig] = id
	return id
}

// staticVerdict runs the static plugins for a class on a node, caching by
// the node's signature (or name, for classes that select on node identity).
func (s *Simulator) staticVerdict(ctx context.Context, cls *podClass, n *simNode, ni fwk.NodeInfo) (*fwk.Status, error) {
	if cls.perNode {
		if st, ok := cls.staticByNode[n.name]; ok {
			return st, nil
		}
	} else if st, ok := cls.cachedVerdict(n.staticID); ok {
		return st, nil
	}
	st, err := s.runStatic(ctx, cls, ni)
	if err != nil {
		return nil, err
	}
	if cls.perNode {
		cls.staticByNode[n.name] = st
	} else {
		cls.cacheVerdict(n.staticID, st)
	}
	return st, nil
}

// templateVerdict is staticVerdict for a template: once per class and
// template, or once per class, pool and zone when the class does not look
// at instance types. For a class with ResourceClaims it says too whether
// a fresh node of the template has the devices they ask for.
func (s *Simulator) templateVerdict(ctx context.Context, cls *podClass, t *template) (*fwk.Status, error) {
	id := t.staticID
	if cls.shapeBlind {
		id = t.shapeBlindID
	}
	if st, ok := cls.cachedVerdict(id); ok {
		return st, nil
	}
	st, err := s.runStatic(ctx, cls, t.info)
	if err != nil {
		return nil, err
	}
	if cls.dra && st.IsSuccess() {
		if st, err = s.deviceVerdict(ctx, cls, t); err != nil {
			return nil, err
		}
	}
	if cls.perNode {
		// PreFilter named nodes: the verdict is per template after all.
		cls.shapeBlind = false
		id = t.staticID
	}
	cls.cacheVerdict(id, st)
	return st, nil
}

func (s *Simulator) runStatic(ctx context.Context, cls *podClass, ni fwk.NodeInfo) (*fwk.Status, error) {
	if cls.staticState == nil {
		cls.staticState = framework.NewCycleState()
		res, status, _ := s.fw.static.RunPreFilterPlugins(ctx, cls.staticState, cls.rep)
		if !status.IsSuccess() && !status.IsRejected() {
			return nil, fmt.Errorf("pre-filtering pod %s/%s: %w", cls.rep.Namespace, cls.rep.Name, status.AsError())
		}
		cls.staticErr = status
		cls.staticPre = res
		if res != nil && !res.AllNodes() {
			// Only named nodes qualify: the verdict is per node.
			cls.perNode = true
		}
	}
	if cls.staticErr != nil {
		return cls.staticErr, nil
	}
	if cls.staticPre != nil && !cls.staticPre.AllNodes() && !cls.staticPre.NodeNames.Has(ni.Node().Name) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't satisfy plugin "+names.NodeAffinity).WithPlugin(names.NodeAffinity), nil
	}
	st := s.fw.static.RunFilterPlugins(ctx, cls.staticState, cls.rep, ni)
	if !st.IsSuccess() && !st.IsRejected() {
		return nil, fmt.Errorf("filtering pod %s/%s: %w", cls.rep.Namespace, cls.rep.Name, st.AsError())
	}
	return st, nil
}

// describe turns a filter verdict into the reason given for a pool,
// naming the taint where a taint was not tolerated.
func describe(st *fwk.Status, pod *corev1.Pod, node *corev1.Node) string {
	if st.Plugin() == names.TaintToleration && node != nil {
		t, ok := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
			func(t *corev1.Taint) bool {
				return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
			}, false)
		if ok {
			return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	return st.Message()
}

// verdict is a cached static verdict; a nil status is a success.
type verdict struct {
	st    *fwk.Status
	known bool
}

// cachedVerdict looks a verdict up by the node signature's dense id: a
// slice, since packing asks for it on every try.
func (c *podClass) cachedVerdict(id int) (*fwk.Status, bool) {
	v := c.statics.v
	if id < len(v) && v[id].known {
		return v[id].st, true
	}
	return nil, false
}

func (c *podClass) cacheVerdict(id int, st *fwk.Status) {
	for len(c.statics.v) <= id {
		c.statics.v = append(c.statics.v, verdict{})
	}
	c.statics.v[id] = verdict{st: st, known: true}
}

// staticCache holds the static verdicts of the classes that read the same
// of a pod's spec (static twins): bare pods of random labels and sizes are
// each a class of their own, and would each run the static plugins over
// every template of every pool.
type staticCache struct {
	v []verdict
}

// staticKey is what the static plugins read of a pod: its node selector,
// node affinity and tolerations.
func staticKey(p *corev1.Pod) string {
	var b strings.Builder
	keys := make([]string, 0, len(p.Spec.NodeSelector))
	for k := range p.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\x00", k, p.Spec.NodeSelector[k])
	}
	b.WriteByte(1)
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		b.WriteString(a.NodeAffinity.String())
	}
	b.WriteByte(1)
	for _, t := range p.Spec.Tolerations {
		b.WriteString(t.String())
		b.WriteByte(0)
	}
	return b.String()
}
