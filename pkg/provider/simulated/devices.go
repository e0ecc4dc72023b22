package simulated

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelDriverNode marks the ResourceSlices a simulated machine's DRA
// driver published, with the machine's (and its Node's) name.
const LabelDriverNode = "claimscale.io/simulated-node"

// publishSlices publishes the machine's devices once its Node exists, as
// the kubelet plugin of a DRA driver does on a real node: a ResourceSlice
// per driver of its shape's template, local to the Node and owned by it,
// so that the slices go with the Node. A slice published before for this
// Node (an earlier pass) is left as it is; one of an earlier Node of the
// machine (it slept, and its Node was deleted) is handed to this one,
// before the garbage collector takes it with its old owner.
func publishSlices(ctx context.Context, kube client.Client, m *machine, node *corev1.Node) error {
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	for _, template := range m.slices {
		slice := template.ForNode(node.Name)
		slice.Labels = map[string]string{LabelDriverNode: labelValue(node.Name)}
		slice.OwnerReferences = owner
		err := kube.Create(ctx, slice)
		if apierrors.IsAlreadyExists(err) {
			err = adoptSlice(ctx, kube, slice.Name, owner)
		}
		if err != nil {
			return fmt.Errorf("publishing ResourceSlice %s of machine %s: %w", slice.Name, m.name, err)
		}
	}
	return nil
}

// adoptSlice makes a published slice the Node's, when an earlier Node of
// the machine owned it.
func adoptSlice(ctx context.Context, kube client.Client, name string, owner []metav1.OwnerReference) error {
	var existing resourcev1.ResourceSlice
	if err := kube.Get(ctx, client.ObjectKey{Name: name}, &existing); err != nil {
		return err
	}
	if len(existing.OwnerReferences) == 1 && existing.OwnerReferences[0].UID == owner[0].UID {
		return nil
	}
	patch := client.MergeFromWithOptions(existing.DeepCopy(), client.MergeFromWithOptimisticLock{})
	existing.OwnerReferences = owner
	return kube.Patch(ctx, &existing, patch)
}

// deleteMachineSlices deletes the ResourceSlices the machine's driver
// published: its devices go with its Node.
func deleteMachineSlices(ctx context.Context, kube client.Client, name string) error {
	err := kube.DeleteAllOf(ctx, &resourcev1.ResourceSlice{}, client.MatchingLabels{LabelDriverNode: labelValue(name)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the ResourceSlices of machine %s: %w", name, err)
	}
	return nil
}
