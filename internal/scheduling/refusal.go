package scheduling

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	"github.com/claimscale/claimscale/api/v1alpha1"
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

func filterRefusal(p *poolState, st *fwk.Status, pod *corev1.Pod, node *corev1.Node, dra *draState) PoolRefusal {
	plugin := ""
	if st != nil {
		plugin = st.Plugin()
	}
	message := describe(st, pod, node)
	switch plugin {
	case names.NodeAffinity:
		if why := selectorMismatch(p, pod, node); why != "" {
			message += ": " + why
		}
	case names.InterPodAffinity, names.PodTopologySpread:
		if spreadsOverZones(pod) {
			message += ": " + zonesOffered(p)
		}
	case names.DynamicResources:
		// The plugin's words, unless they only say that allocation failed.
		said := ""
		if message != "cannot allocate all claims" {
			said = " (" + message + ")"
		}
		message = "no shape of the pool has the devices the pod's resource claims ask for: " + describeClaims(pod, dra) + said
		if offered := p.devicesOffered(); offered != "" {
			message += "; the pool's shapes have " + offered
		} else {
			message += "; the pool's shapes have no template resource slices"
		}
	}
	return PoolRefusal{Pool: p.name, Kind: RefusalFilter, Plugin: plugin, Message: message}
}

// nodeResource is the name a node limit goes by in a refusal's numbers.
const nodeResource corev1.ResourceName = "nodes"

// nodeLimitRefusal: one more node would pass the pool's node limit.
func nodeLimitRefusal(p *poolState) PoolRefusal {
	return PoolRefusal{
		Pool: p.name, Kind: RefusalLimit, Message: fmt.Sprintf("limit nodes=%d reached", p.limNodes),
		Limits: corev1.ResourceList{nodeResource: *resource.NewQuantity(p.limNodes, resource.DecimalSI)},
		InUse:  corev1.ResourceList{nodeResource: *resource.NewQuantity(p.used.nodes, resource.DecimalSI)},
	}
}

// atNodeLimit is the refusal of a pool that has reached its node limit.
// When the pool could not take the pod below its limit either (no shape
// is large enough, a filter refuses its nodes), that reason comes first,
// with the limit after it: raising the limit would not help.
func (r *round) atNodeLimit(cls *podClass, p *poolState) (PoolRefusal, error) {
	limit := nodeLimitRefusal(p)
	var own PoolRefusal
	for _, zone := range p.zones {
		_, why, err := r.option(cls, p, zone, -1, -1)
		if err != nil {
			return PoolRefusal{}, err
		}
		if !why.refused() {
			return limit, nil
		}
		if !own.refused() {
			own = why
		}
	}
	if !own.refused() {
		return limit, nil
	}
	own.Message += "; and " + limit.Message
	own.Limits, own.InUse = limit.Limits, limit.InUse
	return own, nil
}

// perNodeLabels differ from node to node of a pool: naming them as what a
// pool offers would mislead.
var perNodeLabels = map[string]bool{corev1.LabelHostname: true, v1alpha1.LabelNodeClaim: true}

// selectorMismatch names the first label of the pod's node selector, or
// of its required node affinity, that the pool's nodes lack or have with
// another value, and the labels they do have.
func selectorMismatch(p *poolState, pod *corev1.Pod, node *corev1.Node) string {
	if node == nil {
		return ""
	}
	var missing string
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for key := range pod.Spec.NodeSelector {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		want := pod.Spec.NodeSelector[key]
		have, ok := node.Labels[key]
		switch {
		case key == corev1.LabelTopologyZone && slices.Contains(p.zones, want):
			continue
		case !ok:
			missing = fmt.Sprintf("it selects %s=%s, and the pool's nodes have no label %s", key, want, key)
		case have != want && key != corev1.LabelTopologyZone:
			missing = fmt.Sprintf("it selects %s=%s, and the pool's nodes have %s=%s", key, want, key, have)
		case have != want:
			missing = fmt.Sprintf("it selects %s=%s, and the pool's zones are %s", key, want, strings.Join(p.zones, ", "))
		default:
			continue
		}
		break
	}
	if missing == "" {
		missing = affinityMismatch(pod, node)
	}
	if missing == "" {
		return ""
	}
	return missing + "; they have " + offeredLabels(p, node)
}

// affinityMismatch names the first requirement of the pod's first
// required node affinity term that the node does not meet.
func affinityMismatch(pod *corev1.Pod, node *corev1.Node) string {
	affinity := pod.Spec.Affinity
	if affinity == nil || affinity.NodeAffinity == nil || affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, req := range term.MatchExpressions {
			have, ok := node.Labels[req.Key]
			met := false
			switch req.Operator {
			case corev1.NodeSelectorOpIn:
				met = ok && slices.Contains(req.Values, have)
			case corev1.NodeSelectorOpNotIn:
				met = !ok || !slices.Contains(req.Values, have)
			case corev1.NodeSelectorOpExists:
				met = ok
			case corev1.NodeSelectorOpDoesNotExist:
				met = !ok
			default:
				met = true
			}
			if met {
				continue
			}
			requirement := fmt.Sprintf("%s %s", req.Key, req.Operator)
			if len(req.Values) > 0 {
				requirement += " [" + strings.Join(req.Values, ", ") + "]"
			}
			if !ok {
				return fmt.Sprintf("its node affinity requires %s, and the pool's nodes have no label %s", requirement, req.Key)
			}
			return fmt.Sprintf("its node affinity requires %s, and the pool's nodes have %s=%s", requirement, req.Key, have)
		}
		// Terms are alternatives: the first one names the mismatch.
		break
	}
	return ""
}

// offeredLabels lists the labels of a pool's nodes, with the zones and
// shapes it offers in place of the one template's.
func offeredLabels(p *poolState, node *corev1.Node) string {
	var labels []string
	for key, value := range node.Labels {
		switch {
		case perNodeLabels[key]:
		case key == corev1.LabelTopologyZone:
			labels = append(labels, fmt.Sprintf("%s in [%s]", key, strings.Join(p.zones, ", ")))
		case key == corev1.LabelInstanceTypeStable && len(p.shapes) > 1:
			var shapes []string
			for _, si := range p.shapes {
				shapes = append(shapes, si.shape.Name)
			}
			labels = append(labels, fmt.Sprintf("%s in [%s]", key, strings.Join(shapes, ", ")))
		default:
			labels = append(labels, key+"="+value)
		}
	}
	sort.Strings(labels)
	return strings.Join(labels, ", ")
}

// spreadsOverZones reports whether the pod's anti-affinity or a hard
// topology spread constraint is over zones.
func spreadsOverZones(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.TopologyKey == corev1.LabelTopologyZone && c.WhenUnsatisfiable == corev1.DoNotSchedule {
			return true
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if term.TopologyKey == corev1.LabelTopologyZone {
				return true
			}
		}
	}
	return false
}

// zonesOffered says how many zones a pool has, for a pod that spreads
// over zones.
func zonesOffered(p *poolState) string {
	zones := slices.DeleteFunc(slices.Clone(p.zones), func(z string) bool { return z == "" })
	switch len(zones) {
	case 0:
		return fmt.Sprintf("the pod spreads over zones, and pool %s's nodes are in no zone (no %s label)", p.name, corev1.LabelTopologyZone)
	case 1:
		return fmt.Sprintf("the pod spreads over zones, and pool %s has 1 zone: %s", p.name, zones[0])
	}
	return fmt.Sprintf("the pod spreads over zones, and pool %s has %d zones: %s", p.name, len(zones), strings.Join(zones, ", "))
}

// DescribeNewNodes names the new nodes of a decision and the pods each
// was opened for, e.g. `c4 of pool general in zone a for shop/web-0,
// shop/web-1; c4 of pool general in zone b for shop/db-0`: what "its pods
// would need 2 new nodes" means.
func DescribeNewNodes(nodes []NewNode) string {
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		part := fmt.Sprintf("%s of pool %s", n.Shape.Name, n.Pool)
		if n.Zone != "" {
			part += " in zone " + n.Zone
		}
		var pods []string
		for i, pod := range n.Pods {
			if i == 3 {
				pods = append(pods, fmt.Sprintf("and %d more", len(n.Pods)-3))
				break
			}
			pods = append(pods, pod.Namespace+"/"+pod.Name)
		}
		if len(pods) > 0 {
			part += " for " + strings.Join(pods, ", ")
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

func backoffRefusal(p *poolState) PoolRefusal {
	message := "every shape is in capacity backoff"
	switch {
	case len(p.noneFree) > 0 && len(p.noneFree) >= len(p.pool.Spec.Shapes.Fixed):
		message = fmt.Sprintf("no machine of shapes %s is free: every server is on, or the NodeProvider is at its cap on servers powered on", strings.Join(p.noneFree, ", "))
		if len(p.noneFreeWhy) > 0 {
			message += " (" + strings.Join(p.noneFreeWhy, "; ") + ")"
		}
	case len(p.noneFree) > 0:
		message = fmt.Sprintf("every shape is in capacity backoff or has no machine free (none free: %s)", strings.Join(p.noneFree, ", "))
	}
	return PoolRefusal{Pool: p.name, Kind: RefusalBackoff, Message: message}
}

// takenRefusal says that the shapes that would hold the pod are servers
// of an inventory the round has already given to other nodes.
func takenRefusal(p *poolState) PoolRefusal {
	var names []string
	for si, free := range p.free {
		names = append(names, fmt.Sprintf("%s (%d free)", si.shape.Name, free))
	}
	sort.Strings(names)
	return PoolRefusal{Pool: p.name, Kind: RefusalBackoff,
		Message: fmt.Sprintf("every free machine of the shapes that fit is taken by other new nodes of this round: %s", strings.Join(names, ", "))}
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
