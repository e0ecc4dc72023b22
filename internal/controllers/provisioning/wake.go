package provisioning

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// asleepClaims indexes the picture's asleep claims by name: the claims a
// round may wake, as it saw them.
func asleepClaims(claims []v1alpha1.NodeClaim) map[string]*v1alpha1.NodeClaim {
	asleep := map[string]*v1alpha1.NodeClaim{}
	for i := range claims {
		if claims[i].Asleep() {
			asleep[claims[i].Name] = &claims[i]
		}
	}
	return asleep
}

// wakeFor wakes the sleeping claim a new node is, for the node's pods, and
// tells them; in dry-run it only records and tells. It reports false when
// the claim is gone (deleted since the picture, or never seen), so the
// pods get a new machine this round instead. A claim that changed since
// the picture (the patch conflicts) is not woken and gets no replacement:
// the conflict is returned, as is a wake that failed otherwise, so that
// the round is run again soon (on the controller's backoff) on what the
// claim is then. Nothing else would run it soon: a claim's
// writes (the conditions disruption keeps, the lifecycle's "asleep") do
// not start a round, and the pods, already pending, may not change again.
func (p *Provisioner) wakeFor(ctx context.Context, pool *v1alpha1.NodePool, claim *v1alpha1.NodeClaim, newNode scheduling.NewNode, workload []*corev1.Pod, events *int) (bool, error) {
	logger := log.FromContext(ctx)
	if claim == nil {
		logger.Info("sleeping claim to wake is not in the picture; making a new one", "nodeClaim", newNode.Wake, "nodePool", pool.Name)
		return false, nil
	}
	note := wokenNote(claim.Name)
	if p.DryRun {
		for _, pod := range workload {
			p.recordWoken(pod, pool, newNode)
			if *events++; *events > maxPodEvents {
				continue
			}
			p.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "WouldNominate", "Provision", "%s",
				decisions.EventNote(true, fmt.Sprintf("pod would schedule on a woken node (%s, pool %s, shape %s); no claim was woken", note, pool.Name, newNode.Shape.Name)))
		}
		return true, nil
	}
	woken, err := p.wake(ctx, claim)
	switch {
	case apierrors.IsNotFound(err):
		logger.Info("sleeping claim is gone; making a new one", "nodeClaim", claim.Name, "nodePool", pool.Name)
		return false, nil
	case apierrors.IsConflict(err):
		logger.V(1).Info("sleeping claim changed since the round read it; deciding again", "nodeClaim", claim.Name, "nodePool", pool.Name)
		return true, err
	case err != nil:
		logger.Error(err, "waking sleeping claim", "nodeClaim", claim.Name, "nodePool", pool.Name)
		p.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, "WakeFailed", "Wake", "%s", err.Error())
		return true, err
	}
	p.Nominations.Plan(woken.Name, workload)
	logger.Info("woke sleeping claim", "nodeClaim", woken.Name, "nodePool", pool.Name, "shape", newNode.Shape.Name, "zone", newNode.Zone, "pods", len(workload))
	p.Recorder.Eventf(woken, nil, corev1.EventTypeNormal, "Woken", "Wake", "%s (pool %s, shape %s) for pending pods: %d", note, pool.Name, newNode.Shape.Name, len(workload))
	for _, pod := range workload {
		if *events++; *events > maxPodEvents {
			break
		}
		p.Recorder.Eventf(pod, woken, corev1.EventTypeNormal, "Nominated", "Provision",
			"pod should schedule on the node of claim %s: %s (pool %s, shape %s)", woken.Name, note, pool.Name, newNode.Shape.Name)
	}
	for _, pod := range workload {
		p.recordWoken(pod, pool, newNode)
		p.PodLatency.Provisioned(pod, pool.Name)
	}
	return true, nil
}

// wake removes the claim's suspend annotation, locked to the version the
// round decided on, and records the write so the next round counts the
// claim in flight before the cache shows it. The lifecycle starts the
// machine.
func (p *Provisioner) wake(ctx context.Context, asleep *v1alpha1.NodeClaim) (*v1alpha1.NodeClaim, error) {
	// A copy: the picture's claim is the cache's.
	claim := asleep.DeepCopy()
	patch := client.MergeFromWithOptions(asleep, client.MergeFromWithOptimisticLock{})
	delete(claim.Annotations, v1alpha1.AnnotationSuspend)
	if err := p.Kube.Patch(ctx, claim, patch); err != nil {
		return nil, fmt.Errorf("waking sleeping claim %s: %w", asleep.Name, err)
	}
	p.Writes.Woken(claim)
	return claim, nil
}

// recordWoken records that the pod's node is the sleeping claim woken
// (or, in dry-run, that would be) for it.
func (p *Provisioner) recordWoken(pod *corev1.Pod, pool *v1alpha1.NodePool, newNode scheduling.NewNode) {
	p.Decisions.RecordPod(decisions.PodRecord{
		Namespace: pod.Namespace, Name: pod.Name, Time: p.now(), Outcome: decisions.PodWoken,
		Pool: pool.Name, Shape: newNode.Shape.Name, Zone: newNode.Zone, NodeClaim: newNode.Wake,
		Reason: wokenNote(newNode.Wake),
	})
}

// wokenNote is how events and decisions say a sleeping machine was woken.
func wokenNote(claim string) string { return decisions.WokenReason(claim) }
