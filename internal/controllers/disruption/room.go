package disruption

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/claimscale/claimscale/internal/scheduling"
)

// room is cpu (milli) and memory (bytes): what pods request, or what nodes
// have free.
type room struct{ cpu, memory int64 }

func (r room) plus(o room) room  { return room{r.cpu + o.cpu, r.memory + o.memory} }
func (r room) minus(o room) room { return room{r.cpu - o.cpu, r.memory - o.memory} }

// holds says whether every dimension of need is within r.
func (r room) holds(need room) bool { return need.cpu <= r.cpu && need.memory <= r.memory }

// requestsOf is what a pod requests. A pod of plain containers (no init
// containers, overhead or pod-level resources) requests their sum, which is
// added up here without the maps the general rule builds: freeRoom adds
// up every pod in the cluster each round.
func requestsOf(pod *corev1.Pod) room {
	if len(pod.Spec.InitContainers) == 0 && pod.Spec.Overhead == nil && pod.Spec.Resources == nil {
		var sum room
		for i := range pod.Spec.Containers {
			requests := pod.Spec.Containers[i].Resources.Requests
			if cpu, ok := requests[corev1.ResourceCPU]; ok {
				sum.cpu += cpu.MilliValue()
			}
			if memory, ok := requests[corev1.ResourceMemory]; ok {
				sum.memory += memory.Value()
			}
		}
		return sum
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return room{requests.Cpu().MilliValue(), requests.Memory().Value()}
}

// freeRoom is every node's allocatable less the requests of the pods that
// hold room on it, and each in-flight claim's whole shape; computed once a
// round. It errs only towards more room than the simulator finds (a node
// the simulator leaves out, a pod it counts that this does not), so room
// it says is missing is missing.
func (s whatIf) freeRoom() (map[string]room, room) {
	if s.free != nil {
		return s.free, s.freeTotal
	}
	requested := map[string]room{}
	for _, pod := range s.input.Pods {
		if scheduling.Terminated(pod) || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		at := scheduling.CountedOn(pod)
		requested[at] = requested[at].plus(requestsOf(pod))
	}
	s.free = map[string]room{}
	for _, node := range s.input.Nodes {
		allocatable := room{node.Status.Allocatable.Cpu().MilliValue(), node.Status.Allocatable.Memory().Value()}
		free := allocatable.minus(requested[node.Name])
		free.cpu, free.memory = max(free.cpu, 0), max(free.memory, 0)
		s.free[node.Name] = free
	}
	for _, claim := range s.input.InFlight {
		if _, registered := s.free[claim.Name]; !registered {
			s.free[claim.Name] = room{claim.Shape.CPU.MilliValue(), claim.Shape.Memory.Value()}
		}
	}
	for _, free := range s.free {
		s.freeTotal = s.freeTotal.plus(free)
	}
	return s.free, s.freeTotal
}

// outgrows says, without a simulation, that the pods the candidates (and
// the nodes already going) displace, with the pending pods given, cannot
// all find a place on the remaining nodes and extra room besides: they
// request more than all of it together. False says nothing: a simulation
// must tell. At a thousand full nodes this spares each of them a
// simulation that could only say no.
func (s whatIf) outgrows(candidates []*candidate, pending []*corev1.Pod, extra room) bool {
	free, total := s.freeRoom()
	available := total.plus(extra)
	var need room
	for _, name := range s.removed(candidates) {
		available = available.minus(free[name])
		for _, pod := range s.podsByNode[name] {
			if isWorkload(pod) {
				need = need.plus(requestsOf(pod))
			}
		}
	}
	for _, pod := range pending {
		need = need.plus(requestsOf(pod))
	}
	return !available.holds(need)
}

// largestNewNode is at least the room of any node a pool could make now:
// the most cpu and the most memory of any shape, not necessarily of the
// same one.
func (s whatIf) largestNewNode() (room, bool) {
	var largest room
	found := false
	for _, pool := range s.pools {
		if pool.sched == nil {
			continue
		}
		shapes := pool.sched.Shapes
		for _, shape := range shapes.Fixed {
			largest.cpu, largest.memory = max(largest.cpu, shape.CPU.MilliValue()), max(largest.memory, shape.Memory.Value())
			found = true
		}
		if flexible := shapes.Flexible; flexible != nil {
			largest.cpu, largest.memory = max(largest.cpu, flexible.MaxCPU.MilliValue()), max(largest.memory, flexible.MaxMemory.Value())
			found = true
		}
	}
	return largest, found
}
