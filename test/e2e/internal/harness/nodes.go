package harness

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/internal/testenv"
)

// Machine is what a stand-in kubelet needs to register a Node for a VM.
type Machine struct{ Name, ProviderID string }

// RunKubelets registers a Node for every running machine the fake API
// reports, as the machine's kubelet would when it boots: named as the
// machine, with its providerID (as a cloud controller would set it), and
// annotated for kwok, which then keeps it Ready and runs its pods.
func RunKubelets(ctx context.Context, t *testing.T, running func() []Machine) {
	go func() {
		ticker := time.NewTicker(200 * time.Millisecond)
		defer ticker.Stop()
		for {
			for _, m := range running() {
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{
						Name:        m.Name,
						Annotations: map[string]string{testenv.KwokNodeAnnotation: "fake"},
						Labels:      map[string]string{corev1.LabelHostname: m.Name, "type": "kwok"},
					},
					Spec: corev1.NodeSpec{ProviderID: m.ProviderID},
					Status: corev1.NodeStatus{
						Capacity: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
							corev1.ResourcePods: resource.MustParse("110"),
						},
						Allocatable: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
							corev1.ResourcePods: resource.MustParse("110"),
						},
					},
				}
				if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
					t.Logf("registering node %s: %v", m.Name, err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

// KillKubelet makes a node look like one whose kubelet died: kwok stops
// running it (it manages only nodes with its annotation; while it does, it
// sets Ready back to True) and its Ready condition turns Unknown, as the
// node lifecycle controller would write it, since the given time.
func (s *Scenario) KillKubelet(name string, since time.Time) {
	s.T.Helper()
	s.G.Eventually(func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		patch := client.MergeFrom(node.DeepCopy())
		delete(node.Annotations, testenv.KwokNodeAnnotation)
		return env.Client.Patch(s.Ctx, node, patch)
	}).Should(Succeed())
	s.G.Eventually(func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(s.Ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == corev1.NodeReady {
				node.Status.Conditions[i] = corev1.NodeCondition{
					Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
					Message:           "Kubelet stopped posting node status.",
					LastHeartbeatTime: metav1.NewTime(since), LastTransitionTime: metav1.NewTime(since),
				}
			}
		}
		return env.Client.Status().Update(s.Ctx, node)
	}).Should(Succeed())
	// kwok no longer sets it back.
	s.G.Consistently(func() corev1.ConditionStatus {
		node := &corev1.Node{}
		_ = env.Client.Get(s.Ctx, client.ObjectKey{Name: name}, node)
		for _, condition := range node.Status.Conditions {
			if condition.Type == corev1.NodeReady {
				return condition.Status
			}
		}
		return ""
	}, time.Second, 100*time.Millisecond).Should(Equal(corev1.ConditionUnknown))
}
