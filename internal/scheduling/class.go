package scheduling

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// podClass is an equivalence class of pods: same namespace, same controller,
// same labels and the same scheduling-relevant spec. Every member gets the
// same verdict from every filter on the same node, so the class is
// evaluated once and its members share parsed affinity terms and computed
// requests.
type podClass struct {
	id  int
	rep *corev1.Pod
	// info is the representative's parsed PodInfo, whose terms and
	// resources every member shares.
	info *framework.PodInfo
	res  fwk.PodResource
	req  vec
	// ext are the extended resources the pod asks for (nvidia.com/gpu),
	// nil for none.
	ext      *scalars
	priority int32
	dominant float64

	// scalar is set when the pod asks for an extended resource (or
	// another scalar resource): the snapshot then counts its pods one by
	// one, as NodeInfo sums those in a map.
	scalar bool
	// hardSpread holds the DoNotSchedule topology spread constraints.
	hardSpread []corev1.TopologySpreadConstraint
	spreadSel  []labels.Selector
	// perNode is set when the static verdict can differ between nodes of
	// one template (the pod selects on hostname or on node fields).
	perNode bool
	// shapeBlind is set when no static verdict of the class depends on a
	// node's shape: it selects neither on instance type nor per node.
	shapeBlind bool
	// simple classes depend only on static filters and resources, so they
	// skip the full framework and fill a node in one step.
	simple bool
	// counted classes are decided by counts kept per spread
	// selector and domain instead of the full framework (see counted.go).
	counted bool
	// exclusive classes have a required anti-affinity term over hostnames
	// that selects their own pods: each pod needs a node of its own.
	exclusive bool
	// dra classes have ResourceClaims: DynamicResources decides them, per
	// pod (each has claims of its own), and templates by their devices.
	dra bool
	// deviceState and devicePre are DynamicResources's PreFilter of the
	// representative, for its verdicts on templates.
	deviceState fwk.CycleState
	devicePre   *fwk.Status
	deviceAt    int

	// where lists the nodes the class's pods are placed on in the current
	// round (for pods already bound, see Simulator.boundWhere).
	where   []string
	whereOn map[string]bool

	// Per-Solve caches; statics may be shared with static twins.
	statics      *staticCache
	staticByNode map[string]*fwk.Status
	staticState  fwk.CycleState
	staticPre    *fwk.PreFilterResult
	staticErr    *fwk.Status
}

// vec is the part of a request packing does arithmetic on. Extended
// resources (devices) are kept beside it, as *scalars, where a class, a
// shape or a node has some: a vec's arithmetic stays three numbers, small
// enough to inline, for every pool and pod without devices.
type vec struct{ cpu, mem, eph int64 }

func (a vec) add(b vec) vec   { return vec{a.cpu + b.cpu, a.mem + b.mem, a.eph + b.eph} }
func (a vec) sub(b vec) vec   { return vec{a.cpu - b.cpu, a.mem - b.mem, a.eph - b.eph} }
func (a vec) scale(n int) vec { k := int64(n); return vec{a.cpu * k, a.mem * k, a.eph * k} }

// le reports whether a fits in b.
func (a vec) le(b vec) bool { return a.cpu <= b.cpu && a.mem <= b.mem && a.eph <= b.eph }

func vecOf(r fwk.Resource) vec {
	return vec{r.GetMilliCPU(), r.GetMemory(), r.GetEphemeralStorage()}
}

func vecOfList(rl corev1.ResourceList) vec {
	return vec{
		cpu: rl.Cpu().MilliValue(),
		mem: rl.Memory().Value(),
		eph: rl.StorageEphemeral().Value(),
	}
}

// list is the vector as a ResourceList; ephemeral storage only when asked
// for.
func (a vec) list() corev1.ResourceList {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(a.cpu, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(a.mem, resource.BinarySI),
	}
	if a.eph > 0 {
		rl[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(a.eph, resource.BinarySI)
	}
	return rl
}

// fitCount is how many pods of request req fit in free with slots pod
// slots left: the arithmetic of NodeResourcesFit, where a resource the pod
// does not ask for never blocks it. Devices are counted apart
// (scalarFitCount).
func fitCount(free vec, slots int64, req vec) int {
	n := slots
	for _, r := range [][2]int64{{free.cpu, req.cpu}, {free.mem, req.mem}, {free.eph, req.eph}} {
		if r[1] > 0 {
			n = min(n, r[0]/r[1])
		}
	}
	if n < 0 {
		return 0
	}
	return int(n)
}

// podInfo is a pending pod as the plugins see it, sharing its class's
// parsed terms and computed resources.
type podInfo struct {
	pod *corev1.Pod
	cls *podClass
}

var _ fwk.PodInfo = (*podInfo)(nil)

func (p *podInfo) GetPod() *corev1.Pod { return p.pod }
func (p *podInfo) GetRequiredAffinityTerms() []fwk.AffinityTerm {
	return p.cls.info.GetRequiredAffinityTerms()
}
func (p *podInfo) GetRequiredAntiAffinityTerms() []fwk.AffinityTerm {
	return p.cls.info.GetRequiredAntiAffinityTerms()
}
func (p *podInfo) GetPreferredAffinityTerms() []fwk.WeightedAffinityTerm {
	return p.cls.info.GetPreferredAffinityTerms()
}
func (p *podInfo) GetPreferredAntiAffinityTerms() []fwk.WeightedAffinityTerm {
	return p.cls.info.GetPreferredAntiAffinityTerms()
}
func (p *podInfo) CalculateResource() fwk.PodResource { return p.cls.res }

// classifier sorts pods into equivalence classes. A cheap fingerprint finds
// the candidates; a field-by-field comparison decides.
type classifier struct {
	buckets map[uint64][]*podClass
	classes []*podClass
	// next numbers the classes: densely, as long as none is forgotten.
	next int
}

func newClassifier() *classifier {
	return &classifier{buckets: map[uint64][]*podClass{}}
}

func (c *classifier) classify(p *corev1.Pod) (*podClass, error) {
	return c.classifyPrinted(p, fingerprint(p))
}

// classifyAll classifies pods, returning each one's class. Pods of one
// Deployment often come in a row: a pod equal to the one before it takes
// its class without a fingerprint. Fingerprints, and the comparison of
// each other pod with the first pod of its fingerprint, are independent
// per pod and run on every core; classes are made in pod order, so the
// answer does not depend on how many cores there are.
func (c *classifier) classifyAll(pods []*corev1.Pod) ([]*podClass, error) {
	asPrev := make([]bool, len(pods))
	fps := make([]uint64, len(pods))
	parallelize(len(pods), func(i int) {
		if asPrev[i] = i > 0 && sameClass(pods[i-1], pods[i]); !asPrev[i] {
			fps[i] = fingerprint(pods[i])
		}
	})
	first := make(map[uint64]int, 16)
	for i, fp := range fps {
		if asPrev[i] {
			continue
		}
		if _, ok := first[fp]; !ok {
			first[fp] = i
		}
	}
	same := make([]bool, len(pods))
	parallelize(len(pods), func(i int) {
		if asPrev[i] {
			return
		}
		j := first[fps[i]]
		same[i] = j == i || sameClass(pods[j], pods[i])
	})
	// Building classes is most of the work when nearly every pod is a
	// class of its own (bare pods of random sizes and labels): the first
	// pod of each fingerprint new to the classifier has its class built
	// here in parallel, and numbered in order below.
	built := make([]*podClass, len(pods))
	buildErrs := make([]error, len(pods))
	parallelize(len(pods), func(i int) {
		if !asPrev[i] && first[fps[i]] == i && c.lookup(pods[i], fps[i]) == nil {
			built[i], buildErrs[i] = newPodClass(0, pods[i])
		}
	})
	out := make([]*podClass, len(pods))
	for i, p := range pods {
		if asPrev[i] {
			out[i] = out[i-1]
			continue
		}
		if j := first[fps[i]]; same[i] && j < i && out[j] != nil {
			out[i] = out[j]
			continue
		}
		if buildErrs[i] != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, buildErrs[i])
		}
		if built[i] != nil {
			// No pod before it in this batch has its fingerprint, and no
			// class before the batch is its: the class is new.
			out[i] = c.add(built[i], fps[i])
			continue
		}
		cls, err := c.classifyPrinted(p, fps[i])
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		out[i] = cls
	}
	return out, nil
}

// parallelize runs f for 0..n-1 on GOMAXPROCS workers, in chunks.
func parallelize(n int, f func(int)) {
	const chunk = 512
	workers := min(runtime.GOMAXPROCS(0), (n+chunk-1)/chunk)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	workqueue.ParallelizeUntil(context.Background(), workers, (n+chunk-1)/chunk, func(piece int) {
		for i := piece * chunk; i < min(n, (piece+1)*chunk); i++ {
			f(i)
		}
	})
}

func (c *classifier) classifyPrinted(p *corev1.Pod, fp uint64) (*podClass, error) {
	if cls := c.lookup(p, fp); cls != nil {
		return cls, nil
	}
	cls, err := newPodClass(0, p)
	if err != nil {
		return nil, err
	}
	return c.add(cls, fp), nil
}

// lookup is the known class of a pod with fingerprint fp, or nil.
func (c *classifier) lookup(p *corev1.Pod, fp uint64) *podClass {
	for _, cls := range c.buckets[fp] {
		if sameClass(cls.rep, p) {
			return cls
		}
	}
	return nil
}

// add numbers a new class and files it under its fingerprint.
func (c *classifier) add(cls *podClass, fp uint64) *podClass {
	cls.id = c.next
	c.next++
	c.buckets[fp] = append(c.buckets[fp], cls)
	c.classes = append(c.classes, cls)
	return cls
}

// forget drops a class that has no pods left; fp is its fingerprint.
func (c *classifier) forget(cls *podClass, fp uint64) {
	if bucket := slices.DeleteFunc(c.buckets[fp], func(other *podClass) bool { return other == cls }); len(bucket) > 0 {
		c.buckets[fp] = bucket
	} else {
		delete(c.buckets, fp)
	}
	c.classes = slices.DeleteFunc(c.classes, func(other *podClass) bool { return other == cls })
}

func newPodClass(id int, p *corev1.Pod) (*podClass, error) {
	info, err := framework.NewPodInfo(p)
	if err != nil {
		return nil, err
	}
	res := info.CalculateResource()
	cls := &podClass{
		id:           id,
		rep:          p,
		info:         info,
		res:          res,
		req:          vecOf(res.Resource),
		ext:          scalarsOfMap(res.Resource.GetScalarResources()),
		priority:     corev1helpers.PodPriority(p),
		scalar:       len(res.Resource.GetScalarResources()) > 0,
		staticByNode: map[string]*fwk.Status{},
		whereOn:      map[string]bool{},
		statics:      &staticCache{},
	}
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			cls.hardSpread = append(cls.hardSpread, c)
			sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
			if err != nil {
				// An invalid selector matches everything here, so the
				// class sees every pod; the plugin reports the error.
				sel = labels.Everything()
			}
			cls.spreadSel = append(cls.spreadSel, sel)
		}
	}
	cls.perNode = selectsOnNodeIdentity(p)
	cls.dra = len(p.Spec.ResourceClaims) > 0
	// A class with claims looks at each shape's devices.
	cls.shapeBlind = !cls.perNode && !cls.dra && !selectsOnLabel(p, corev1.LabelInstanceTypeStable, corev1.LabelInstanceType)
	return cls, nil
}

// selectsOnNodeIdentity reports whether the pod's required node affinity
// looks at the hostname label or node fields, which differ per node.
func selectsOnNodeIdentity(p *corev1.Pod) bool {
	if _, ok := p.Spec.NodeSelector[corev1.LabelHostname]; ok {
		return true
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(t.MatchFields) > 0 {
			return true
		}
		for _, r := range t.MatchExpressions {
			if r.Key == corev1.LabelHostname {
				return true
			}
		}
	}
	return false
}

// selectsOnLabel reports whether the pod's node selector or required node
// affinity names any of keys.
func selectsOnLabel(p *corev1.Pod, keys ...string) bool {
	for _, k := range keys {
		if _, ok := p.Spec.NodeSelector[k]; ok {
			return true
		}
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range t.MatchExpressions {
			for _, k := range keys {
				if r.Key == k {
					return true
				}
			}
		}
	}
	return false
}

// needsFullFramework reports whether a pod's verdict on a node can depend on
// other pods (affinity, spread, ports, volumes) or on resources the
// arithmetic does not cover.
func (c *podClass) needsFullFramework() bool {
	p := c.rep
	if len(c.info.GetRequiredAffinityTerms()) > 0 || len(c.info.GetRequiredAntiAffinityTerms()) > 0 {
		return true
	}
	if len(c.hardSpread) > 0 || len(p.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return true
		}
	}
	return hasHostPorts(p)
}

// excludesItself reports whether a required anti-affinity term of the
// class keeps two of its pods off one node.
func (c *podClass) excludesItself(nsLabels labels.Set) bool {
	terms := c.info.GetRequiredAntiAffinityTerms()
	for i := range terms {
		if terms[i].TopologyKey == corev1.LabelHostname && terms[i].Matches(c.rep, nsLabels) {
			return true
		}
	}
	return false
}

func (c *podClass) on(node string) {
	if !c.whereOn[node] {
		c.whereOn[node] = true
		c.where = append(c.where, node)
	}
}

func hasHostPorts(p *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, port := range c.Ports {
				if port.HostPort > 0 {
					return true
				}
			}
		}
	}
	return false
}

// matchesAny reports whether any of terms selects the pod.
func matchesAny(terms []fwk.AffinityTerm, p *corev1.Pod, nsLabels labels.Set) bool {
	for i := range terms {
		if terms[i].Matches(p, nsLabels) {
			return true
		}
	}
	return false
}

// interacts reports whether pod p (with its required anti-affinity terms
// anti) can change what the class's PreFilter state says: p is counted by
// one of the class's spread selectors or required (anti-)affinity terms, or
// p's own anti-affinity selects the class. It errs towards yes.
func (c *podClass) interacts(p *corev1.Pod, anti []fwk.AffinityTerm, nsLabels map[string]labels.Set) bool {
	if p.Namespace == c.rep.Namespace {
		for _, sel := range c.spreadSel {
			if sel.Matches(labels.Set(p.Labels)) {
				return true
			}
		}
	}
	ns := nsLabels[p.Namespace]
	if matchesAny(c.info.GetRequiredAffinityTerms(), p, ns) || matchesAny(c.info.GetRequiredAntiAffinityTerms(), p, ns) {
		return true
	}
	return len(anti) > 0 && matchesAny(anti, c.rep, nsLabels[c.rep.Namespace])
}

func controllerUID(p *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		return ref.UID
	}
	return ""
}

// fingerprint hashes what most often tells pods apart (namespace, owner,
// labels, node-name affinity of DaemonSet pods, container requests)
// without allocating: it runs once per pending pod.
func fingerprint(p *corev1.Pod) uint64 {
	h := fnvString(fnvOffset, p.Namespace)
	h = fnvString(h, string(controllerUID(p)))
	// Labels in any order: a sum of per-label hashes needs no sorting.
	var labels uint64
	for k, v := range p.Labels {
		labels += fnvString(fnvString(fnvOffset, k), v)
	}
	h = fnvUint(h, labels)
	// DaemonSet pods differ only in the node their affinity names.
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range t.MatchFields {
				h = fnvString(h, r.Key)
				for _, v := range r.Values {
					h = fnvString(h, v)
				}
			}
		}
	}
	for i := range p.Spec.Containers {
		req := p.Spec.Containers[i].Resources.Requests
		h = fnvUint(h, uint64(req.Cpu().MilliValue()))
		h = fnvUint(h, uint64(req.Memory().Value()))
	}
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvString is FNV-1a over s and a terminating zero byte.
func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	h *= fnvPrime
	return h
}

func fnvUint(h, v uint64) uint64 {
	for i := 0; i < 8; i++ {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

// sameClass compares what any filter plugin or the resource arithmetic
// reads of a pod.
func sameClass(a, b *corev1.Pod) bool {
	if a.Namespace != b.Namespace || controllerUID(a) != controllerUID(b) {
		return false
	}
	if !mapsEqual(a.Labels, b.Labels) {
		return false
	}
	sa, sb := &a.Spec, &b.Spec
	if !mapsEqual(sa.NodeSelector, sb.NodeSelector) ||
		corev1helpers.PodPriority(a) != corev1helpers.PodPriority(b) ||
		sa.HostNetwork != sb.HostNetwork ||
		!(sa.Affinity == sb.Affinity || reflect.DeepEqual(sa.Affinity, sb.Affinity)) ||
		!(sameSlice(sa.Tolerations, sb.Tolerations) || reflect.DeepEqual(sa.Tolerations, sb.Tolerations)) ||
		!(sameSlice(sa.TopologySpreadConstraints, sb.TopologySpreadConstraints) ||
			reflect.DeepEqual(sa.TopologySpreadConstraints, sb.TopologySpreadConstraints)) ||
		!(len(sa.ResourceClaims) == 0 && len(sb.ResourceClaims) == 0 || reflect.DeepEqual(sa.ResourceClaims, sb.ResourceClaims)) ||
		!resourceListsEqual(sa.Overhead, sb.Overhead) {
		return false
	}
	if (sa.Resources == nil) != (sb.Resources == nil) ||
		sa.Resources != nil && !requirementsEqual(*sa.Resources, *sb.Resources) {
		return false
	}
	if !containersEqual(sa.Containers, sb.Containers) || !containersEqual(sa.InitContainers, sb.InitContainers) {
		return false
	}
	return volumesEqual(sa.Volumes, sb.Volumes) && statusResourcesEqual(a, b)
}

// sameSlice says whether two slices are one: empty both, or the same
// elements. The informer's cache lets the pods of one ReplicaSet share
// their containers, tolerations and labels, so comparing two of them is
// mostly comparing pointers.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sameMap says whether two maps are one (or both empty).
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer())
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	if sameMap(a, b) {
		return true
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// commonResources are the resources most lists hold: looked up directly,
// they spare a range over the map, whose random start is costly when
// every pending pod is compared.
var commonResources = [...]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

func resourceListsEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	if sameMap(a, b) {
		return true
	}
	found := 0
	for _, k := range commonResources {
		v, ok := a[k]
		if !ok {
			continue
		}
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
		found++
	}
	if found == len(a) {
		return true
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func requirementsEqual(a, b corev1.ResourceRequirements) bool {
	return resourceListsEqual(a.Requests, b.Requests) && resourceListsEqual(a.Limits, b.Limits)
}

func containersEqual(a, b []corev1.Container) bool {
	if len(a) != len(b) {
		return false
	}
	if sameSlice(a, b) {
		return true
	}
	for i := range a {
		ca, cb := &a[i], &b[i]
		if !requirementsEqual(ca.Resources, cb.Resources) ||
			(ca.RestartPolicy == nil) != (cb.RestartPolicy == nil) || ca.RestartPolicy != nil && *ca.RestartPolicy != *cb.RestartPolicy {
			return false
		}
		if len(ca.Ports) != len(cb.Ports) {
			return false
		}
		for j := range ca.Ports {
			pa, pb := ca.Ports[j], cb.Ports[j]
			if pa.HostPort != pb.HostPort || pa.HostIP != pb.HostIP || pa.Protocol != pb.Protocol {
				return false
			}
		}
	}
	return true
}

// volumesEqual compares the volumes the volume plugins read: claims,
// generic ephemeral and inline CSI volumes.
func volumesEqual(a, b []corev1.Volume) bool {
	pick := func(vs []corev1.Volume) []corev1.VolumeSource {
		var out []corev1.VolumeSource
		for _, v := range vs {
			if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
				out = append(out, corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim, Ephemeral: v.Ephemeral, CSI: v.CSI})
			}
		}
		return out
	}
	va, vb := pick(a), pick(b)
	if len(va) == 0 && len(vb) == 0 {
		return true
	}
	return reflect.DeepEqual(va, vb)
}

// statusResourcesEqual compares resources the kubelet reports for running
// containers, which the scheduler counts after an in-place resize.
func statusResourcesEqual(a, b *corev1.Pod) bool {
	if len(a.Status.ContainerStatuses) == 0 && len(b.Status.ContainerStatuses) == 0 {
		return true
	}
	if len(a.Status.ContainerStatuses) != len(b.Status.ContainerStatuses) {
		return false
	}
	for i := range a.Status.ContainerStatuses {
		ra, rb := a.Status.ContainerStatuses[i].Resources, b.Status.ContainerStatuses[i].Resources
		if (ra == nil) != (rb == nil) || ra != nil && !requirementsEqual(*ra, *rb) {
			return false
		}
	}
	return true
}
