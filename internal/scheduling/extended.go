package scheduling

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// scalars are extended resources (nvidia.com/gpu, and the other scalar
// resources the scheduler counts: hugepages, attachable volumes), sorted
// by name, none zero: what a class asks for, a shape has, a new node's
// pods or a template's DaemonSet pods take. A value is never changed once
// made, so it is shared. Nil is none, as for every pod and shape of a
// cluster without devices, and the packer then never looks further.
type scalars struct {
	names  []corev1.ResourceName
	counts []int64
}

// get is the count of name, zero when absent.
func (s *scalars) get(name corev1.ResourceName) int64 {
	if s == nil {
		return 0
	}
	if i, ok := slices.BinarySearch(s.names, name); ok {
		return s.counts[i]
	}
	return 0
}

func (s *scalars) len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// combine is a + k·b, nil when nothing is left.
func combine(a, b *scalars, k int64) *scalars {
	out := &scalars{
		names:  make([]corev1.ResourceName, 0, a.len()+b.len()),
		counts: make([]int64, 0, a.len()+b.len()),
	}
	put := func(name corev1.ResourceName, n int64) {
		if n != 0 {
			out.names = append(out.names, name)
			out.counts = append(out.counts, n)
		}
	}
	i, j := 0, 0
	for i < a.len() || j < b.len() {
		switch {
		case j == b.len() || i < a.len() && a.names[i] < b.names[j]:
			put(a.names[i], a.counts[i])
			i++
		case i == a.len() || b.names[j] < a.names[i]:
			put(b.names[j], k*b.counts[j])
			j++
		default:
			put(a.names[i], a.counts[i]+k*b.counts[j])
			i++
			j++
		}
	}
	if len(out.names) == 0 {
		return nil
	}
	return out
}

// scaled is k·s.
func (s *scalars) scaled(k int64) *scalars {
	if s == nil || k == 1 {
		return s
	}
	if k == 0 {
		return nil
	}
	out := &scalars{names: s.names, counts: make([]int64, len(s.counts))}
	for i, n := range s.counts {
		out.counts[i] = k * n
	}
	return out
}

// within reports whether every positive count of s is at most b's.
func (s *scalars) within(b *scalars) bool {
	if s == nil {
		return true
	}
	for i, name := range s.names {
		if n := s.counts[i]; n > 0 && n > b.get(name) {
			return false
		}
	}
	return true
}

// equal reports whether s and b hold the same counts.
func (s *scalars) equal(b *scalars) bool {
	if s == b {
		return true
	}
	return slices.Equal(s.namesOrNil(), b.namesOrNil()) && slices.Equal(s.countsOrNil(), b.countsOrNil())
}

func (s *scalars) namesOrNil() []corev1.ResourceName {
	if s == nil {
		return nil
	}
	return s.names
}

func (s *scalars) countsOrNil() []int64 {
	if s == nil {
		return nil
	}
	return s.counts
}

// maxOf is the larger count of a and b per name.
func maxScalars(a, b *scalars) *scalars {
	if b == nil {
		return a
	}
	if a == nil {
		return b
	}
	out := &scalars{}
	i, j := 0, 0
	for i < a.len() || j < b.len() {
		switch {
		case j == b.len() || i < a.len() && a.names[i] < b.names[j]:
			out.names, out.counts = append(out.names, a.names[i]), append(out.counts, max(a.counts[i], 0))
			i++
		case i == a.len() || b.names[j] < a.names[i]:
			out.names, out.counts = append(out.names, b.names[j]), append(out.counts, max(b.counts[j], 0))
			j++
		default:
			out.names, out.counts = append(out.names, a.names[i]), append(out.counts, max(a.counts[i], b.counts[j]))
			i++
			j++
		}
	}
	return out
}

// scalarsOfMap makes scalars of the scheduler's map of scalar resources,
// leaving out zero counts (a node reports hugepages-2Mi: 0).
func scalarsOfMap(m map[corev1.ResourceName]int64) *scalars {
	n := 0
	for _, v := range m {
		if v != 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	s := &scalars{names: make([]corev1.ResourceName, 0, n), counts: make([]int64, 0, n)}
	for name, v := range m {
		if v != 0 {
			s.names = append(s.names, name)
		}
	}
	sort.Slice(s.names, func(i, j int) bool { return s.names[i] < s.names[j] })
	for _, name := range s.names {
		s.counts = append(s.counts, m[name])
	}
	return s
}

// isScalar says whether a resource is one the scheduler counts as a scalar
// resource: anything but cpu, memory, ephemeral storage and pods.
func isScalar(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods:
		return false
	}
	return true
}

// scalarsOfList takes the scalar resources of a resource list, in whole
// units as the scheduler counts them.
func scalarsOfList(rl corev1.ResourceList) *scalars {
	var m map[corev1.ResourceName]int64
	for name, q := range rl {
		if isScalar(name) {
			if m == nil {
				m = map[corev1.ResourceName]int64{}
			}
			m[name] = q.Value()
		}
	}
	return scalarsOfMap(m)
}

// addTo writes the counts into a resource list.
func (s *scalars) addTo(rl corev1.ResourceList) {
	if s == nil {
		return
	}
	for i, name := range s.names {
		rl[name] = *resource.NewQuantity(s.counts[i], resource.DecimalSI)
	}
}

// scalarFit is how many pods asking want fit in what a node's NodeInfo
// has left of each scalar resource, at most n.
func scalarFit(alloc, requested fwk.Resource, want *scalars, n int64) int64 {
	if want == nil {
		return n
	}
	have, used := alloc.GetScalarResources(), requested.GetScalarResources()
	for i, name := range want.names {
		if w := want.counts[i]; w > 0 {
			n = min(n, (have[name]-used[name])/w)
		}
	}
	return n
}

// short names the scalar resources of need that exceed have.
func (s *scalars) short(have *scalars) []string {
	var out []string
	for i, name := range s.namesOrNil() {
		if s.counts[i] > have.get(name) {
			out = append(out, string(name))
		}
	}
	return out
}

// offers reports whether any shape of the pool has some of a scalar
// resource.
func (p *poolState) offers(name corev1.ResourceName) bool {
	for _, si := range p.shapes {
		if si.ext.get(name) > 0 {
			return true
		}
	}
	return false
}

// scalarFitCount is how many times want fits in free, at most n.
func scalarFitCount(free, want *scalars, n int64) int64 {
	for i, name := range want.namesOrNil() {
		if w := want.counts[i]; w > 0 {
			n = min(n, free.get(name)/w)
		}
	}
	return n
}

// extFits reports whether what a and b ask for together fits in have.
func extFits(a, b, have *scalars) bool {
	switch {
	case a == nil && b == nil:
		return true
	case b == nil:
		return a.within(have)
	case a == nil:
		return b.within(have)
	}
	return combine(a, b, 1).within(have)
}

// extRoom is how many more pods asking want fit in have, less what used
// and ds take, at most n.
func extRoom(have, used, ds, want *scalars, n int) int {
	free := combine(combine(have, used, -1), ds, -1)
	return max(int(scalarFitCount(free, want, int64(n))), 0)
}
