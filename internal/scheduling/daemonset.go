package scheduling

import (
	"context"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	daemonutil "k8s.io/kubernetes/pkg/controller/daemon/util"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
)

// instantiate copies DaemonSet pods made for a template onto a node.
func instantiate(protos []*corev1.Pod, node string) []*corev1.Pod {
	out := make([]*corev1.Pod, len(protos))
	for i, p := range protos {
		c := *p
		c.Name = p.Labels[dsNameLabel] + "-" + node
		c.UID = types.UID(string(p.UID) + "/" + node)
		c.Spec.NodeName = node
		out[i] = &c
	}
	return out
}

// dsNameLabel carries a DaemonSet pod's DaemonSet name, to name its copies.
const dsNameLabel = "claimscale.io/simulated-daemonset"

// DaemonSetPods returns the pods the DaemonSets would run on node: those
// whose node affinity, tolerations (including the ones the DaemonSet
// controller adds) and resources admit them, decided by the kube-scheduler's
// own plugins. The externalgrpc shim serves them with the template node.
func DaemonSetPods(ctx context.Context, node *corev1.Node, daemonSets []*appsv1.DaemonSet) ([]*corev1.Pod, error) {
	if len(daemonSets) == 0 {
		return nil, nil
	}
	f, err := newFramework(ctx, NewSnapshot(), objectStore{}, profile{name: "claimscale", filters: staticPlugins})
	if err != nil {
		return nil, err
	}
	return daemonSetPods(ctx, f, node, daemonSets)
}

func daemonSetPods(ctx context.Context, static framework.Framework, node *corev1.Node, daemonSets []*appsv1.DaemonSet) ([]*corev1.Pod, error) {
	sorted := append([]*appsv1.DaemonSet(nil), daemonSets...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Namespace != sorted[j].Namespace {
			return sorted[i].Namespace < sorted[j].Namespace
		}
		return sorted[i].Name < sorted[j].Name
	})
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	var out []*corev1.Pod
	for _, ds := range sorted {
		pod := daemonPod(ds, node.Name)
		state := framework.NewCycleState()
		res, status, _ := static.RunPreFilterPlugins(ctx, state, pod)
		if !status.IsSuccess() {
			if status.IsRejected() {
				continue
			}
			return nil, fmt.Errorf("pre-filtering DaemonSet %s/%s: %w", ds.Namespace, ds.Name, status.AsError())
		}
		if res != nil && !res.AllNodes() && !res.NodeNames.Has(node.Name) {
			continue
		}
		if status := static.RunFilterPlugins(ctx, state, pod, ni); !status.IsSuccess() {
			if status.IsRejected() {
				continue
			}
			return nil, fmt.Errorf("filtering DaemonSet %s/%s: %w", ds.Namespace, ds.Name, status.AsError())
		}
		// A DaemonSet pod that does not fit stays pending; it takes nothing.
		if len(noderesources.Fits(pod, ni, nil, noderesources.ResourceRequestsOptions{})) > 0 {
			continue
		}
		pi, err := framework.NewPodInfo(pod)
		if err != nil {
			return nil, err
		}
		ni.AddPodInfo(pi)
		pod.Spec.NodeName = node.Name
		out = append(out, pod)
	}
	return out, nil
}

// daemonPod is the pod the DaemonSet controller would make for a node: its
// template, the tolerations the controller adds, and node affinity pinning
// it to the node.
func daemonPod(ds *appsv1.DaemonSet, nodeName string) *corev1.Pod {
	tmpl := ds.Spec.Template.DeepCopy()
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace = ds.Namespace
	pod.Name = ds.Name + "-" + nodeName
	pod.UID = types.UID("claimscale-sim/daemonset/" + ds.Namespace + "/" + ds.Name)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[dsNameLabel] = ds.Name
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
	daemonutil.AddOrUpdateDaemonPodTolerations(&pod.Spec)
	pod.Spec.Affinity = daemonutil.ReplaceDaemonSetPodNodeNameNodeAffinity(pod.Spec.Affinity, nodeName)
	return pod
}

// BelongsToNode reports whether a pod comes and goes with its node: a
// DaemonSet's pod or the mirror of a static pod. Such a pod is never
// provisioned for, never drained and never counts as work a node holds.
func BelongsToNode(p *corev1.Pod) bool { return isDaemonSetPod(p) || isMirrorPod(p) }

// isDaemonSetPod reports whether a DaemonSet controls p.
func isDaemonSetPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.Kind == "DaemonSet"
}

// isMirrorPod reports whether p is the API's mirror of a static pod.
func isMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}
