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
// so that the slices go with the Node. Slices published before (an
// earlier pass, or a machine woken again) are left as they are.
func publishSlices(ctx context.Context, kube client.Client, m *machine, node *corev1.Node) error {
	for _, template := range m.slices {
		slice := template.ForNode(node.Name)
		slice.Labels = map[string]string{LabelDriverNode: labelValue(node.Name)}
		slice.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		err := kube.Create(ctx, slice)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("publishing ResourceSlice %s of machine %s: %w", slice.Name, m.name, err)
		}
	}
	return nil
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
