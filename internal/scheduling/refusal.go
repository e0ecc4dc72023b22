package scheduling

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// RefusalKind classifies why a pool cannot take a pod, for decision records
// and metrics: a small closed set, so it can be a metric label.
type RefusalKind string

const (
	// RefusalFilter: a scheduler Filter plugin refused the pool's template
	// node (taint, node selector, affinity, topology, ports, volumes).
	RefusalFilter RefusalKind = "Filter"
	// RefusalTooSmall: even the pool's largest shape cannot hold the pod
	// with the DaemonSet pods that would run beside it.
	RefusalTooSmall RefusalKind = "TooSmall"
	// RefusalLimit: a new node would take the pool over its limits.
	RefusalLimit RefusalKind = "Limit"
	// RefusalBackoff: every shape of the pool is in capacity backoff.
	RefusalBackoff RefusalKind = "Backoff"
)

// PoolRefusal says why one pool cannot open a node for a pod.
type PoolRefusal struct {
	Pool string
	Kind RefusalKind
	// Plugin is the Filter plugin that refused, for RefusalFilter.
	Plugin string
	// Message is the reason in words, as on the pod's event.
	Message string
	// Shape is the largest shape that was tried, for RefusalTooSmall.
	Shape string
	// Requested is what the pod and its node's DaemonSet pods need, and
	// Available what Shape allocates, for RefusalTooSmall.
	Requested, Available corev1.ResourceList
	// Limits the pool's limits and InUse what counts against them, for
	// RefusalLimit.
	Limits, InUse corev1.ResourceList
}

func (p PoolRefusal) refused() bool { return p.Message != "" }

// String is the refusal as it reads in a joined reason.
func (p PoolRefusal) String() string { return fmt.Sprintf("pool %q: %s", p.Pool, p.Message) }

func filterRefusal(p *poolState, st *fwk.Status, pod *corev1.Pod, node *corev1.Node) PoolRefusal {
	plugin := ""
	if st != nil {
		plugin = st.Plugin()
	}
	return PoolRefusal{Pool: p.name, Kind: RefusalFilter, Plugin: plugin, Message: describe(st, pod, node)}
}

func backoffRefusal(p *poolState) PoolRefusal {
	return PoolRefusal{Pool: p.name, Kind: RefusalBackoff, Message: "every shape is in capacity backoff"}
}

// resourcesOf turns a vec and a pod count into a ResourceList, for the
// numbers of a refusal.
func resourcesOf(v vec, pods int64) corev1.ResourceList {
	list := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(v.cpu, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(v.mem, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
	}
	if v.eph > 0 {
		list[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(v.eph, resource.BinarySI)
	}
	return list
}

// joinRefusals is the reason of an unschedulable pod: each pool's refusal
// in pool order.
func joinRefusals(refusals []PoolRefusal) string {
	parts := make([]string, 0, len(refusals))
	for _, r := range refusals {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, "; ")
}
