package garbagecollection

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv/expect"
	"github.com/claimscale/claimscale/pkg/provider"
)

// sleeping puts a listed machine to sleep, as the provider lists it.
func (p *machineStore) sleeping(providerID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.machines[providerID].State = provider.InstanceSuspended
}

func TestASleepingMachineWhoseClaimIsGoneIsDeletedLikeAnyOrphan(t *testing.T) {
	s := newScenario(t)
	s.store.add("test://slept", "slept", s.clock.Now().Add(-time.Hour))
	s.store.sleeping("test://slept")
	s.claim("sleeping-owned", true, "")
	s.store.add("test://sleeping-owned", "sleeping-owned", s.clock.Now().Add(-time.Hour))
	s.store.sleeping("test://sleeping-owned")

	s.pass()
	s.g.Expect(s.store.deletes()).To(Equal([]string{"test://slept"}), "a sleeping machine with a claim is the claim's")
}

func TestASleepingMachineWithoutOurClusterTagIsNeverDeleted(t *testing.T) {
	s := newScenario(t)
	// A provider that listed more than it should: the machine names a
	// claim, but not our cluster.
	s.store.add("test://foreign", "foreign", s.clock.Now().Add(-time.Hour))
	s.store.sleeping("test://foreign")
	delete(s.store.machines["test://foreign"].Tags, v1alpha1.TagCluster)

	s.pass()
	s.g.Expect(s.store.deletes()).To(BeEmpty())
}

func TestAnAsleepClaimWhoseMachineVanishedIsRemoved(t *testing.T) {
	s := newScenario(t)
	recorder := events.NewFakeRecorder(10)
	s.c.Recorder = recorder
	claim := s.claim("asleep-vanished", true, "")
	patch := client.MergeFrom(claim.DeepCopy())
	claim.Annotations = map[string]string{v1alpha1.AnnotationSuspend: string(v1alpha1.DisruptionReasonEmpty)}
	s.g.Expect(env.Client.Patch(s.ctx, claim, patch)).To(Succeed())
	claim.SetCondition(v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended, "machine stopped", s.clock.Now())
	s.g.Expect(env.Client.Status().Update(s.ctx, claim)).To(Succeed())
	s.claim("asleep-present", true, "")
	s.store.add("test://asleep-present", "asleep-present", s.clock.Now())
	s.store.sleeping("test://asleep-present")

	s.pass()
	s.g.Expect(s.deleting("asleep-vanished")).To(BeTrue())
	s.g.Expect(s.deleting("asleep-present")).To(BeFalse())
	gone := &v1alpha1.NodeClaim{}
	s.g.Expect(env.Client.Get(s.ctx, client.ObjectKey{Name: "asleep-vanished"}, gone)).To(Succeed())
	s.g.Expect(meta.FindStatusCondition(gone.Status.Conditions, v1alpha1.ConditionDisrupting)).To(HaveField("Message", ContainSubstring("slept and no longer exists")))
	s.g.Expect(expect.Events(recorder)).To(ContainElement(ContainSubstring("slept and no longer exists")))
}
