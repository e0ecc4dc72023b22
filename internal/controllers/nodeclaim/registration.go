package nodeclaim

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
	"github.com/claimscale/claimscale/internal/providerresolver"
)

// How often a claim whose machine has not joined yet looks again, besides
// being woken by Node events.
const registrationPoll = 10 * time.Second

// nominationWrites is how many of a node's pods are nominated at once.
const nominationWrites = 8

// registration waits for the machine's Node and takes it over: our labels,
// the claim's taints, the termination finalizer and an owner reference. A
// woken machine's Node is waited for and taken over the same way, found by
// providerID only, as a new one.
type registration struct{ *Controller }

func (r *registration) Reconcile(ctx context.Context, claim *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// A stopped machine has no Node to wait for until it is started.
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionLaunched) || machineStopped(claim) {
		return reconcile.Result{}, nil
	}
	node, err := r.nodeFor(ctx, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == nil {
		if meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
			// The node is gone after it had joined: garbage collection
			// decides whether the machine went with it.
			r.setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionFalse, v1alpha1.ReasonNodeNotFound,
				fmt.Sprintf("node %s registered earlier but no longer exists", claim.Status.NodeName))
			return reconcile.Result{RequeueAfter: registrationPoll}, nil
		}
		r.setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionFalse, v1alpha1.ReasonWaitingForNode,
			fmt.Sprintf("machine created, no node with providerID %s yet", claim.Status.ProviderID))
		return reconcile.Result{RequeueAfter: registrationPoll}, nil
	}
	if !node.DeletionTimestamp.IsZero() {
		// Deleting the node is a request to remove the claim: termination
		// drains and deprovisions, then lets the node go.
		log.FromContext(ctx).Info("node is being deleted, deleting its claim", "node", node.Name)
		if err := r.Kube.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting claim %s of deleted node %s: %w", claim.Name, node.Name, err)
		}
		return reconcile.Result{}, nil
	}
	// Nominated before adopt lets pods onto the node: what the scheduler
	// then binds there first is what the node was bought for.
	r.nominate(ctx, claim, node)
	if err := r.adopt(ctx, claim, node); err != nil {
		return reconcile.Result{}, err
	}
	claim.Status.NodeName = node.Name
	if len(node.Status.Allocatable) > 0 {
		claim.Status.Allocatable = node.Status.Allocatable
	}
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
		r.eventf(ctx, claim, node, corev1.EventTypeNormal, v1alpha1.ReasonRegistered, "Register", "node %s registered", node.Name)
		metrics.NodeClaimsRegistered.WithLabelValues(poolName(claim)).Inc()
	}
	r.setCondition(claim, v1alpha1.ConditionRegistered, metav1.ConditionTrue, v1alpha1.ReasonRegistered, "node "+node.Name+" registered")
	return reconcile.Result{}, nil
}

// nominate sets the nominated node (status.nominatedNodeName) of the
// pending pods the round that bought the node planned on it. kube-scheduler
// tries a pod's nominated node first and keeps the room of the pods
// nominated to a node from the other pods of no higher priority
// (KEP-5278, on by default since Kubernetes 1.35): the pods bind where the
// packer put them, whatever order the scheduler takes them in. A node that
// registered with the unregistered taint is seen by the scheduler only
// once adopt takes it off, after this. Best effort: a pod left without a
// nomination goes wherever the scheduler finds room, as without one.
func (r *registration) nominate(ctx context.Context, claim *v1alpha1.NodeClaim, node *corev1.Node) {
	planned := r.Nominations.Take(claim.Name)
	if len(planned) == 0 {
		return
	}
	logger := log.FromContext(ctx)
	// The node waits for these writes before the scheduler may use it:
	// they go out side by side, not one after another.
	var nominated atomic.Int32
	var writes errgroup.Group
	writes.SetLimit(nominationWrites)
	for _, key := range planned {
		writes.Go(func() error {
			var pod corev1.Pod
			if err := r.Kube.Get(ctx, key, &pod); err != nil {
				return nil
			}
			// A pod bound, going, or nominated by preemption keeps what it has.
			if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() || pod.Status.NominatedNodeName != "" {
				return nil
			}
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Status.NominatedNodeName = node.Name
			if err := r.Kube.Status().Patch(ctx, &pod, patch); err != nil {
				logger.V(1).Info("pod not nominated", "pod", key.String(), "node", node.Name, "error", err.Error())
				return nil
			}
			nominated.Add(1)
			return nil
		})
	}
	_ = writes.Wait()
	logger.V(1).Info("nominated the pods the node was bought for", "node", node.Name, "nominated", nominated.Load(), "planned", len(planned))
}

// adopt syncs the claim's labels, taints, finalizer and owner reference
// onto the node, and takes the unregistered taint off. Taints are added
// only at first registration: afterwards something else (a CNI removing a
// startup taint) owns them.
func (r *registration) adopt(ctx context.Context, claim *v1alpha1.NodeClaim, node *corev1.Node) error {
	// A strategic merge patch adds taints, finalizers and owner references
	// as entries keyed by key, value and uid, so it needs no lock against
	// the kubelet's and others' concurrent writes to the Node.
	original := node.DeepCopy()
	patch := client.StrategicMergeFrom(original)
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for key, value := range claim.Labels {
		if key == providerresolver.LabelNodeProvider {
			continue
		}
		node.Labels[key] = value
	}
	node.Labels[v1alpha1.LabelNodePool] = poolName(claim)
	node.Labels[v1alpha1.LabelNodeClaim] = claim.Name
	for key, value := range simulatedLabels(claim) {
		if _, set := node.Labels[key]; !set {
			node.Labels[key] = value
		}
	}
	if !meta.IsStatusConditionTrue(claim.Status.Conditions, v1alpha1.ConditionRegistered) {
		for _, taint := range append(append([]corev1.Taint{}, claim.Spec.Taints...), claim.Spec.StartupTaints...) {
			if !hasTaint(node.Spec.Taints, taint) {
				node.Spec.Taints = append(node.Spec.Taints, taint)
			}
		}
	}
	// Every time, not only at first registration: a woken machine's
	// kubelet registers its Node anew, with the taint.
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == v1alpha1.TaintUnregistered })
	controllerutil.AddFinalizer(node, v1alpha1.TerminationFinalizer)
	if !hasOwner(node, claim) {
		node.OwnerReferences = append(node.OwnerReferences, metav1.OwnerReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeClaim",
			Name: claim.Name, UID: claim.UID, BlockOwnerDeletion: ptr(true),
		})
	}
	if adopted(original, node) {
		// Every reconcile of a live claim comes here, and disruption's
		// condition writes reconcile each claim again: at a thousand nodes
		// the empty patches were a sixth of the requests waiting on the
		// API server during a scale-down.
		return nil
	}
	if err := r.Kube.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("adopting node %s: %w", node.Name, err)
	}
	return nil
}

// adopted says whether the node already carries what adopt syncs onto it.
func adopted(original, node *corev1.Node) bool {
	return equality.Semantic.DeepEqual(original.Labels, node.Labels) &&
		equality.Semantic.DeepEqual(original.Spec.Taints, node.Spec.Taints) &&
		equality.Semantic.DeepEqual(original.Finalizers, node.Finalizers) &&
		equality.Semantic.DeepEqual(original.OwnerReferences, node.OwnerReferences)
}

// simulatedLabels are the well-known labels the claim's template node was
// simulated with that a kubelet sets only when told (--node-labels) and
// a cloud controller otherwise: the shape as instance type, and the zone
// provisioning chose. Without them pods that select on either would not
// fit the node bought for them, and another would be bought. A value the
// node already carries (a cloud controller's) is the machine's own and is
// kept.
func simulatedLabels(claim *v1alpha1.NodeClaim) map[string]string {
	labels := map[string]string{}
	if claim.Spec.Shape.Name != "" {
		labels[corev1.LabelInstanceTypeStable] = claim.Spec.Shape.Name
	}
	for _, requirement := range claim.Spec.Requirements.NodeSelector {
		if requirement.Key == corev1.LabelTopologyZone && requirement.Operator == corev1.NodeSelectorOpIn && len(requirement.Values) == 1 {
			labels[corev1.LabelTopologyZone] = requirement.Values[0]
		}
	}
	return labels
}

func hasTaint(taints []corev1.Taint, want corev1.Taint) bool {
	for _, taint := range taints {
		if taint.Key == want.Key && taint.Effect == want.Effect {
			return true
		}
	}
	return false
}

func hasOwner(node *corev1.Node, claim *v1alpha1.NodeClaim) bool {
	for _, owner := range node.OwnerReferences {
		if owner.UID == claim.UID {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
