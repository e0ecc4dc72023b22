package scheduling

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// DefaultMaxPods is the kubelet's default, used when a pool sets none.
const DefaultMaxPods = 110

// DefaultDiskSize is the root disk a shape is assumed to have when neither the
// pool nor the provider says.
var DefaultDiskSize = resource.MustParse("100Gi")

// defaultEvictionHard is the kubelet's own default, which is what a node runs
// with when the pool sets no evictionHard at all.
var defaultEvictionHard = map[string]v1alpha1.EvictionThreshold{
	"memory.available": "100Mi",
	"nodefs.available": "10%",
}

// TemplateNode builds the Node a machine of this pool and shape in zone (""
// for none) would register as, named name (also its kubernetes.io/hostname).
// Provisioning simulates on it and the externalgrpc shim serves it as
// NodeGroupTemplateNodeInfo, so both see the same node.
//
// Capacity is the shape's cpu and memory, its disk (DefaultDiskSize unless
// the shape says), its extended resources (devices, as a device plugin
// advertises them) and the pool's maxPods (DefaultMaxPods unless set).
// Allocatable is capacity − kubeReserved − systemReserved − evictionHard
// (memory.available and nodefs.available, each a quantity or a percentage;
// the kubelet's defaults when the pool sets none). It carries the pool's
// labels and taints and is Ready. Startup taints are left off: they are
// expected to go away, so they must not keep pods from the pool.
func TemplateNode(pool *v1alpha1.NodePool, shape Shape, zone, name string) (*corev1.Node, error) {
	capacity := shapeCapacity(pool, shape)
	allocatable, err := allocatableOf(pool, capacity)
	if err != nil {
		return nil, err
	}
	labels := make(map[string]string, len(pool.Spec.Template.Labels)+6)
	for k, v := range pool.Spec.Template.Labels {
		labels[k] = v
	}
	labels[v1alpha1.LabelNodePool] = pool.Name
	labels[corev1.LabelInstanceTypeStable] = shape.Name
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelArchStable] = "amd64"
	labels[corev1.LabelHostname] = name
	if zone != "" {
		labels[corev1.LabelTopologyZone] = zone
	}
	if gpu := v1alpha1.GPUType(shape.Name, shape.ExtendedResources); gpu != "" {
		labels[v1alpha1.LabelGPU] = gpu
	}
	var taints []corev1.Taint
	if len(pool.Spec.Template.Taints) > 0 {
		taints = append(taints, pool.Spec.Template.Taints...)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Conditions: []corev1.NodeCondition{{
				Type:   corev1.NodeReady,
				Status: corev1.ConditionTrue,
				Reason: "KubeletReady",
			}},
		},
	}, nil
}

func maxPods(pool *v1alpha1.NodePool) int64 {
	if mp := pool.Spec.Template.Kubelet.MaxPods; mp != nil && *mp > 0 {
		return int64(*mp)
	}
	return DefaultMaxPods
}

func shapeCapacity(pool *v1alpha1.NodePool, shape Shape) corev1.ResourceList {
	disk := shape.EphemeralStorage
	if disk.IsZero() {
		disk = DefaultDiskSize
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              shape.CPU.DeepCopy(),
		corev1.ResourceMemory:           shape.Memory.DeepCopy(),
		corev1.ResourceEphemeralStorage: disk.DeepCopy(),
		corev1.ResourcePods:             *resource.NewQuantity(maxPods(pool), resource.DecimalSI),
	}
	for name, q := range shape.ExtendedResources {
		capacity[name] = q.DeepCopy()
	}
	return capacity
}

// allocatableOf subtracts the kubelet's reservations from capacity the way
// the kubelet does, never going below zero.
func allocatableOf(pool *v1alpha1.NodePool, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	kubelet := pool.Spec.Template.Kubelet
	out := corev1.ResourceList{}
	for name, q := range capacity {
		q = q.DeepCopy()
		if name != corev1.ResourcePods {
			if r, ok := kubelet.KubeReserved[name]; ok {
				q.Sub(r)
			}
			if r, ok := kubelet.SystemReserved[name]; ok {
				q.Sub(r)
			}
		}
		out[name] = q
	}
	eviction := kubelet.EvictionHard
	if len(eviction) == 0 {
		eviction = defaultEvictionHard
	}
	for signal, res := range map[string]corev1.ResourceName{
		"memory.available": corev1.ResourceMemory,
		"nodefs.available": corev1.ResourceEphemeralStorage,
	} {
		v, ok := eviction[signal]
		if !ok {
			continue
		}
		threshold, err := evictionThreshold(string(v), capacity[res])
		if err != nil {
			return nil, fmt.Errorf("evictionHard %s of pool %s: %w", signal, pool.Name, err)
		}
		q := out[res]
		q.Sub(threshold)
		out[res] = q
	}
	for name, q := range out {
		if q.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, q.Format)
		}
	}
	return out, nil
}

// evictionThreshold reads a hard eviction threshold: a quantity, or a
// percentage of capacity.
func evictionThreshold(v string, capacity resource.Quantity) (resource.Quantity, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		pct, err := strconv.ParseFloat(p, 64)
		// Written so that NaN, which compares false both ways, is refused
		// too; it would read as -2^63 bytes.
		if err != nil || !(pct >= 0 && pct <= 100) {
			return resource.Quantity{}, fmt.Errorf("invalid percentage %q", v)
		}
		return *resource.NewQuantity(int64(float64(capacity.Value())*pct/100), resource.BinarySI), nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("invalid quantity %q: %w", v, err)
	}
	return q, nil
}

// addTemplateNode puts a node built from t into the snapshot under n's
// name, with its own copies of t's DaemonSet pods.
func (s *Simulator) addTemplateNode(n *simNode, t *template) error {
	node := t.named(n.name)
	n.labels = node.Labels
	if dra := s.snap.dra; dra != nil && len(t.shape.shape.ResourceSlices) > 0 {
		dra.setNodeSlices(n.name, templateSlices(t.shape.shape.ResourceSlices, n.name))
	}
	n.ds = instantiate(t.ds, n.name)
	infos := make([]fwk.PodInfo, 0, len(n.ds))
	for _, p := range n.ds {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			return err
		}
		infos = append(infos, pi)
	}
	return s.snap.addNode(node, infos)
}

// template returns (building once) the template of a pool, shape and zone:
// its node, the DaemonSet pods that would run on it, and their requests.
func (s *Simulator) template(ctx context.Context, p *poolState, si *shapeInfo, zone string) (*template, error) {
	byShape := p.templates[zone]
	if si.idx < len(byShape) && byShape[si.idx] != nil {
		return byShape[si.idx], nil
	}
	name := "template-" + p.name + "-" + si.shape.Name
	if zone != "" {
		name += "-" + zone
	}
	node, err := TemplateNode(p.pool, si.shape, zone, name)
	if err != nil {
		return nil, err
	}
	ds, err := daemonSetPods(ctx, s.fw.static, node, s.daemonSets)
	if err != nil {
		return nil, err
	}
	t := &template{pool: p, shape: si, zone: zone, node: node, ds: ds, dsCount: int64(len(ds))}
	for _, d := range ds {
		pi, err := framework.NewPodInfo(d)
		if err != nil {
			return nil, err
		}
		res := pi.CalculateResource().Resource
		t.dsReq = t.dsReq.add(vecOf(res))
		if ext := scalarsOfMap(res.GetScalarResources()); ext != nil {
			t.dsExt = combine(t.dsExt, ext, 1)
		}
	}
	t.info = framework.NewNodeInfo()
	t.info.SetNode(node)
	if dra := s.snap.dra; dra != nil && len(si.shape.ResourceSlices) > 0 {
		// The template's own devices, for the verdicts on it.
		dra.setBaseSlices(name, templateSlices(si.shape.ResourceSlices, name))
	}
	t.staticID = s.staticID("\x02template\x00" + p.name + "\x00" + si.shape.Name + "\x00" + zone)
	t.shapeBlindID = s.staticID("\x03template\x00" + p.name + "\x00" + zone)
	for len(byShape) <= si.idx {
		byShape = append(byShape, nil)
	}
	byShape[si.idx] = t
	p.templates[zone] = byShape
	return t, nil
}

// named is the template's node as a node named name: TemplateNode's
// answer, without working the resources out again. The resource lists
// and conditions are the template's own, which nothing changes.
func (t *template) named(name string) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: make(map[string]string, len(t.node.Labels))},
		Spec:       t.node.Spec,
		Status:     t.node.Status,
	}
	for k, v := range t.node.Labels {
		node.Labels[k] = v
	}
	node.Labels[corev1.LabelHostname] = name
	return node
}

// template is a pool's node for one shape and zone, before it has a name.
type template struct {
	pool  *poolState
	shape *shapeInfo
	zone  string
	node  *corev1.Node
	info  *framework.NodeInfo
	ds    []*corev1.Pod
	dsReq vec
	// dsExt are the devices the DaemonSet pods take, nil for none.
	dsExt   *scalars
	dsCount int64
	// staticID is shared by every node made from the template.
	staticID int
	// shapeBlindID is shared by the templates of every shape of the pool
	// in the zone: they differ only in the instance-type label and
	// resources, which static filters read only for a pod that selects on
	// instance type.
	shapeBlindID int
}
