// Package capacitybuffer serves autoscaling.x-k8s.io/v1beta1
// CapacityBuffers of the active-capacity strategy: it resolves each
// buffer's pod template (a PodTemplate, or the pod template of the
// Deployment, StatefulSet or ReplicaSet it names) and how many chunks it
// asks for (replicas, percentage, limits), writes that to the buffer's
// status, and keeps their room as headroom (Buffers) that provisioning and
// disruption simulate with the pools' own.
package capacitybuffer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1beta1 "github.com/claimscale/claimscale/api/autoscaling/v1beta1"
	"github.com/claimscale/claimscale/internal/clusterstate"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// Name of the controller in logs, metrics and events.
const Name = "capacitybuffer"

// DefaultRecheck is how often a buffer is resolved again without an event:
// the workload a scalableRef names is read, not watched.
const DefaultRecheck = 30 * time.Second

// Controller resolves CapacityBuffers and keeps their room.
type Controller struct {
	Kube client.Client
	// Workloads reads the Deployments, StatefulSets and ReplicaSets
	// buffers name (uncached: claimscale watches none of them).
	Workloads client.Reader
	// Pools resolves the pools as provisioning does, to tell a buffer
	// whether any can hold its pods.
	Pools   clusterstate.PoolUsability
	Buffers *Buffers
	Clock   clock.PassiveClock
	// Recheck is how soon a buffer is resolved again (default
	// DefaultRecheck).
	Recheck time.Duration
	// Changed is told when the room the buffers keep changed.
	Changed func()
	// DryRun keeps the buffers' room in the simulation but writes no
	// status: beside another autoscaler, that one writes it.
	DryRun bool
}

// SetupWithManager registers the controller on buffers and PodTemplates.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Recheck <= 0 {
		c.Recheck = DefaultRecheck
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&autoscalingv1beta1.CapacityBuffer{}).
		Watches(&corev1.PodTemplate{}, handler.EnqueueRequestsFromMapFunc(c.buffersOfTemplate)).
		Complete(c)
}

func (c *Controller) buffersOfTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	var list autoscalingv1beta1.CapacityBufferList
	if err := c.Kube.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing CapacityBuffers for a PodTemplate", "namespace", o.GetNamespace())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if ref := list.Items[i].Spec.PodTemplateRef; ref != nil && ref.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile resolves one buffer, keeps (or lets go) its room and writes
// its status.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var buffer autoscalingv1beta1.CapacityBuffer
	if err := c.Kube.Get(ctx, req.NamespacedName, &buffer); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if strategy := ptr.Deref(buffer.Spec.ProvisioningStrategy, autoscalingv1beta1.ActiveCapacity); strategy != autoscalingv1beta1.ActiveCapacity || !buffer.DeletionTimestamp.IsZero() {
		// Another strategy is another autoscaler's to serve.
		c.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	updated := buffer.DeepCopy()
	err := c.reconcile(ctx, updated)
	if !c.DryRun && !equality.Semantic.DeepEqual(buffer.Status, updated.Status) {
		if patchErr := c.Kube.Status().Patch(ctx, updated, client.MergeFromWithOptions(&buffer, client.MergeFromWithOptimisticLock{})); patchErr != nil {
			return reconcile.Result{}, errors.Join(err, fmt.Errorf("writing the status of CapacityBuffer %s: %w", req.NamespacedName, patchErr))
		}
	}
	return reconcile.Result{RequeueAfter: c.Recheck}, err
}

func (c *Controller) reconcile(ctx context.Context, buffer *autoscalingv1beta1.CapacityBuffer) error {
	key := client.ObjectKeyFromObject(buffer)
	now := c.Clock.Now()
	buffer.Status.ProvisioningStrategy = ptr.To(autoscalingv1beta1.ActiveCapacity)
	template, templateRef, generation, scalableReplicas, reason, err := c.template(ctx, buffer)
	if err != nil && reason == "" {
		return err
	}
	var replicas int32
	if reason == "" {
		replicas, reason, err = chunks(buffer, template, scalableReplicas)
	}
	if reason != "" {
		// What the buffer names is gone or unreadable: its room goes
		// too, and it says why.
		c.forget(key)
		buffer.Status.PodTemplateRef, buffer.Status.PodTemplateGeneration, buffer.Status.Replicas = nil, nil, ptr.To[int32](0)
		setCondition(buffer, autoscalingv1beta1.ConditionReadyForProvisioning, metav1.ConditionFalse, reason, err.Error(), now)
		setCondition(buffer, autoscalingv1beta1.ConditionProvisioning, metav1.ConditionFalse, autoscalingv1beta1.ReasonNotReady, "no room is kept: "+err.Error(), now)
		return nil
	}
	buffer.Status.PodTemplateRef, buffer.Status.PodTemplateGeneration, buffer.Status.Replicas = templateRef, generation, ptr.To(replicas)
	setCondition(buffer, autoscalingv1beta1.ConditionReadyForProvisioning, metav1.ConditionTrue, autoscalingv1beta1.ReasonResolved,
		fmt.Sprintf("%d chunks of the pod template", replicas), now)
	if why, err := c.fitsNoPool(ctx, buffer, template); err != nil {
		return err
	} else if why != "" {
		c.forget(key)
		setCondition(buffer, autoscalingv1beta1.ConditionProvisioning, metav1.ConditionFalse, autoscalingv1beta1.ReasonNoPoolFits, why, now)
		return nil
	}
	if c.Buffers.keep(key, resolved{template: template, replicas: replicas}) {
		c.changed()
	}
	setCondition(buffer, autoscalingv1beta1.ConditionProvisioning, metav1.ConditionTrue, autoscalingv1beta1.ReasonKeptAsHeadroom,
		fmt.Sprintf("room for %d pods of the template is kept as headroom of the pools they can use", replicas), now)
	return nil
}

// unresolved is why a buffer cannot be resolved (its condition's
// message).
type unresolved struct{ message string }

func (u *unresolved) Error() string { return u.message }

// template resolves the pod template a buffer's chunks are made of: the
// PodTemplate it names, or the pod template of the workload it names
// (with that workload's replicas). reason is set, with err saying why,
// when neither can be read; an error with no reason is the API server's.
func (c *Controller) template(ctx context.Context, buffer *autoscalingv1beta1.CapacityBuffer) (template *corev1.PodTemplateSpec, ref *autoscalingv1beta1.LocalObjectRef, generation *int64, scalableReplicas int32, reason string, err error) {
	switch {
	case buffer.Spec.PodTemplateRef != nil:
		var podTemplate corev1.PodTemplate
		key := types.NamespacedName{Namespace: buffer.Namespace, Name: buffer.Spec.PodTemplateRef.Name}
		if err := c.Kube.Get(ctx, key, &podTemplate); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, nil, 0, autoscalingv1beta1.ReasonPodTemplateNotFound, &unresolved{fmt.Sprintf("PodTemplate %s does not exist", key)}
			}
			return nil, nil, nil, 0, "", fmt.Errorf("reading PodTemplate %s: %w", key, err)
		}
		return &podTemplate.Template, &autoscalingv1beta1.LocalObjectRef{Name: podTemplate.Name}, ptr.To(podTemplate.Generation), 0, "", nil
	case buffer.Spec.ScalableRef != nil:
		return c.scalable(ctx, buffer)
	}
	return nil, nil, nil, 0, autoscalingv1beta1.ReasonInvalid, &unresolved{"the buffer names neither a podTemplateRef nor a scalableRef"}
}

// scalable reads the pod template and replicas of the workload a
// buffer's scalableRef names.
func (c *Controller) scalable(ctx context.Context, buffer *autoscalingv1beta1.CapacityBuffer) (*corev1.PodTemplateSpec, *autoscalingv1beta1.LocalObjectRef, *int64, int32, string, error) {
	ref := buffer.Spec.ScalableRef
	key := types.NamespacedName{Namespace: buffer.Namespace, Name: ref.Name}
	var (
		object   client.Object
		template func() (*corev1.PodTemplateSpec, *int32)
	)
	switch {
	case ref.APIGroup == appsv1.GroupName && ref.Kind == "Deployment":
		deployment := &appsv1.Deployment{}
		object, template = deployment, func() (*corev1.PodTemplateSpec, *int32) { return &deployment.Spec.Template, deployment.Spec.Replicas }
	case ref.APIGroup == appsv1.GroupName && ref.Kind == "StatefulSet":
		set := &appsv1.StatefulSet{}
		object, template = set, func() (*corev1.PodTemplateSpec, *int32) { return &set.Spec.Template, set.Spec.Replicas }
	case ref.APIGroup == appsv1.GroupName && ref.Kind == "ReplicaSet":
		set := &appsv1.ReplicaSet{}
		object, template = set, func() (*corev1.PodTemplateSpec, *int32) { return &set.Spec.Template, set.Spec.Replicas }
	default:
		return nil, nil, nil, 0, autoscalingv1beta1.ReasonScalableNotSupported, &unresolved{fmt.Sprintf("scalableRef %s %s/%s: claimscale reads Deployments, StatefulSets and ReplicaSets (apiGroup apps)", ref.Kind, ref.APIGroup, ref.Name)}
	}
	if err := c.Workloads.Get(ctx, key, object); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil, 0, autoscalingv1beta1.ReasonScalableNotFound, &unresolved{fmt.Sprintf("%s %s does not exist", ref.Kind, key)}
		}
		return nil, nil, nil, 0, "", fmt.Errorf("reading %s %s: %w", ref.Kind, key, err)
	}
	spec, replicas := template()
	return spec, nil, nil, ptr.Deref(replicas, 1), "", nil
}

// chunks works out how many chunks a buffer asks for: the larger of its
// replicas and its percentage of the workload's replicas (rounded up),
// capped by its limits; with neither, as many as its limits hold.
func chunks(buffer *autoscalingv1beta1.CapacityBuffer, template *corev1.PodTemplateSpec, scalableReplicas int32) (int32, string, error) {
	spec := buffer.Spec
	var (
		wanted int64
		asked  bool
	)
	if spec.Replicas != nil {
		wanted, asked = int64(*spec.Replicas), true
	}
	if spec.Percentage != nil && spec.ScalableRef != nil {
		wanted, asked = max(wanted, int64(math.Ceil(float64(*spec.Percentage)*float64(scalableReplicas)/100))), true
	}
	if spec.Limits == nil {
		if !asked {
			return 0, autoscalingv1beta1.ReasonInvalid, &unresolved{"the buffer sets none of replicas, percentage and limits"}
		}
		return int32(min(wanted, math.MaxInt32)), "", nil
	}
	requests := resourcehelper.PodRequests(&corev1.Pod{Spec: template.Spec}, resourcehelper.PodResourcesOptions{})
	fit := int64(math.MaxInt32)
	for name, limit := range *spec.Limits {
		request, ok := requests[corev1.ResourceName(name)]
		if !ok || request.IsZero() {
			continue
		}
		fit = min(fit, limit.MilliValue()/request.MilliValue())
	}
	if !asked {
		if fit == math.MaxInt32 {
			return 0, autoscalingv1beta1.ReasonInvalid, &unresolved{"the buffer's limits name no resource its pods request"}
		}
		return int32(fit), "", nil
	}
	return int32(min(wanted, fit)), "", nil
}

// fitsNoPool says why none of the buffer's pods could be held by any
// pool, even an empty one with every shape available; "" when one could.
func (c *Controller) fitsNoPool(ctx context.Context, buffer *autoscalingv1beta1.CapacityBuffer, template *corev1.PodTemplateSpec) (string, error) {
	picture, err := (&clusterstate.Cluster{Kube: c.Kube}).Picture(ctx, c.Pools)
	if err != nil {
		return "", fmt.Errorf("reading the pools: %w", err)
	}
	empty := scheduling.Input{Cluster: scheduling.Cluster{DaemonSets: picture.DaemonSets, Namespaces: picture.Namespaces}}
	for _, pool := range picture.Input.Pools {
		pool.InUse = scheduling.Usage{}
		// Every shape open, an inventory's servers all off.
		pool.Unavailable, pool.UnavailableIn, pool.NoneFree, pool.Free = nil, nil, nil, nil
		empty.Pools = append(empty.Pools, pool)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: buffer.Name, Namespace: buffer.Namespace, UID: types.UID("capacitybuffer/" + string(buffer.UID)), Labels: template.Labels},
		Spec:       *template.Spec.DeepCopy(),
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	empty.Pending = []*corev1.Pod{pod}
	result, err := scheduling.Solve(ctx, empty)
	if err != nil {
		return "", fmt.Errorf("simulating a pod of CapacityBuffer %s: %w", buffer.Name, err)
	}
	if len(result.Unschedulable) > 0 {
		return "no pool can hold a pod of the buffer: " + result.Unschedulable[0].Reason, nil
	}
	return "", nil
}

func (c *Controller) forget(key types.NamespacedName) {
	if c.Buffers.forget(key) {
		c.changed()
	}
}

func (c *Controller) changed() {
	if c.Changed != nil {
		c.Changed()
	}
}

func setCondition(buffer *autoscalingv1beta1.CapacityBuffer, conditionType string, status metav1.ConditionStatus, reason, message string, now time.Time) {
	existing := meta.FindStatusCondition(buffer.Status.Conditions, conditionType)
	condition := metav1.Condition{
		Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: buffer.Generation, LastTransitionTime: metav1.NewTime(now),
	}
	if existing != nil && existing.Status == status {
		condition.LastTransitionTime = existing.LastTransitionTime
	}
	meta.SetStatusCondition(&buffer.Status.Conditions, condition)
}
