package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// witnessAtDelete wraps the recording provider: when a machine is deleted
// it reads the machine's claim from the API server and records its Failed
// condition as it stood at that moment.
type witnessAtDelete struct {
	*recordingProvider
	mu   sync.Mutex
	seen []string
}

func (p *witnessAtDelete) Delete(ctx context.Context, providerID string) error {
	claim := &v1alpha1.NodeClaim{}
	seen := "claim unreadable"
	if err := env.Client.Get(ctx, client.ObjectKey{Name: strings.TrimPrefix(providerID, "test://")}, claim); err == nil {
		seen = "Failed absent"
		if failedCondition := condition(claim, v1alpha1.ConditionFailed); failedCondition != nil {
			seen = fmt.Sprintf("Failed=%s %s", failedCondition.Status, failedCondition.Reason)
		}
	}
	p.mu.Lock()
	p.seen = append(p.seen, seen)
	p.mu.Unlock()
	return p.recordingProvider.Delete(ctx, providerID)
}

func (p *witnessAtDelete) witnessed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// keptFailures is a scenario in the mode where cluster-autoscaler decides,
// with a claim launched whose node will never register within 10m.
func keptFailures(t *testing.T, name string) (*scenario, *witnessAtDelete) {
	s := newScenario(t, name, func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	s.c.KeepFailedClaims = true
	witness := &witnessAtDelete{recordingProvider: s.provider}
	s.resolver.wrapped = witness
	s.newClaim(name + "-a")
	s.clock.SetTime(s.claim(name + "-a").CreationTimestamp.Time)
	s.mustReconcile(name + "-a")
	s.g.Expect(condition(s.claim(name+"-a"), v1alpha1.ConditionLaunched)).To(HaveField("Status", metav1.ConditionTrue))
	s.clock.Step(10*time.Minute + time.Second)
	return s, witness
}

func (s *scenario) machineExists(providerID string) bool {
	_, err := s.provider.Get(s.ctx, providerID)
	return err == nil
}

// Garbage collection deletes a Launched claim whose machine is gone unless
// the claim is Failed; so the claim must be Failed on the API server, not
// just in the reconcile's memory, by the time its machine is deleted.
func TestAKeptClaimIsFailedOnTheAPIServerBeforeItsMachineIsDeleted(t *testing.T) {
	s, witness := keptFailures(t, "failfirst")

	s.mustReconcile("failfirst-a")
	s.g.Expect(witness.witnessed()).To(Equal([]string{"Failed=True " + v1alpha1.ReasonRegistrationTimeout}))
	s.g.Expect(s.machineExists("test://failfirst-a")).To(BeFalse())
	claim := s.claim("failfirst-a")
	s.g.Expect(claim.DeletionTimestamp).To(BeNil(), "kept for cluster-autoscaler")
	s.g.Expect(condition(claim, v1alpha1.ConditionFailed)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonRegistrationTimeout),
		HaveField("Message", And(ContainSubstring("10m0s"), HaveSuffix(machineDeletedNote)))))
	s.g.Expect(s.recorded()).To(ContainElement(And(HavePrefix("Warning Failed"), ContainSubstring("kept for cluster-autoscaler to see"))))

	s.mustReconcile("failfirst-a")
	s.g.Expect(witness.witnessed()).To(HaveLen(1), "a deleted machine is not deleted again")
}

// A machine whose deletion failed after its claim was marked Failed is
// deleted on a later reconcile: a Failed claim must not keep a machine
// running, and billed, until cluster-autoscaler deletes the claim.
func TestAFailedClaimWhoseMachineDeletionFailedDeletesItLater(t *testing.T) {
	s, witness := keptFailures(t, "failretry")
	s.provider.failNext("delete", provider.NewRetryable(errors.New("API rate limited"), 0))

	result := s.mustReconcile("failretry-a")
	s.g.Expect(result.RequeueAfter).To(BeNumerically(">", 0), "the deletion is retried")
	s.g.Expect(s.machineExists("test://failretry-a")).To(BeTrue())
	s.g.Expect(condition(s.claim("failretry-a"), v1alpha1.ConditionFailed)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Message", HaveSuffix(deletingMachineNote))))

	s.mustReconcile("failretry-a")
	s.g.Expect(s.machineExists("test://failretry-a")).To(BeFalse(), "the Failed claim's machine is deleted on retry")
	s.g.Expect(witness.witnessed()).To(HaveExactElements(HavePrefix("Failed=True"), HavePrefix("Failed=True")))
	s.g.Expect(condition(s.claim("failretry-a"), v1alpha1.ConditionFailed)).To(And(
		HaveField("Reason", v1alpha1.ReasonRegistrationTimeout), HaveField("Message", HaveSuffix(machineDeletedNote))))

	s.mustReconcile("failretry-a")
	s.g.Expect(witness.witnessed()).To(HaveLen(2), "nothing left to delete")
}
