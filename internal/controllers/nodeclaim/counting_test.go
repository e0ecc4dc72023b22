package nodeclaim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/metrics"
)

// racingWriter writes to a claim just before the controller's first patch
// that takes its termination finalizer off, as another controller would:
// the patch, made with an optimistic lock, conflicts for real.
type racingWriter struct {
	client.Client
	raced atomic.Bool
}

func (w *racingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if claim, ok := obj.(*v1alpha1.NodeClaim); ok && !controllerutil.ContainsFinalizer(claim, v1alpha1.TerminationFinalizer) && w.raced.CompareAndSwap(false, true) {
		stored := &v1alpha1.NodeClaim{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), stored); err != nil {
			return err
		}
		before := stored.DeepCopy()
		stored.Annotations = map[string]string{"example.com/touched": "true"}
		if err := env.Client.Patch(ctx, stored, client.MergeFrom(before)); err != nil {
			return err
		}
	}
	return w.Client.Patch(ctx, obj, patch, opts...)
}

// terminatedEvents counts the Terminated events recorded so far.
func (s *scenario) terminatedEvents() int {
	n := 0
	for {
		select {
		case event := <-s.recorder.Events:
			if strings.Contains(event, "Terminated") {
				n++
			}
		default:
			return n
		}
	}
}

// A termination is counted once, and told once, even when the patch that
// takes the finalizer off conflicts and the termination runs again.
func TestATerminationIsCountedOnceWhenTheFinalizerPatchConflicts(t *testing.T) {
	s := newScenario(t, "count-once")
	racing := &racingWriter{Client: cached}
	s.c.Kube = racing
	s.registered("count-once-a", corev1.ConditionTrue)
	s.terminatedEvents()
	before := testutil.ToFloat64(metrics.NodeClaimsTerminated.WithLabelValues(s.pool.Name, metrics.ReasonDeleted))
	s.deleteClaim("count-once-a")
	s.g.Eventually(func() error {
		_, err := s.reconcile("count-once-a")
		if err != nil {
			return err
		}
		if s.claim("count-once-a") != nil {
			return errors.New("claim still there")
		}
		return nil
	}).Should(Succeed())
	s.g.Expect(racing.raced.Load()).To(BeTrue(), "the finalizer patch met a concurrent write")
	s.g.Expect(testutil.ToFloat64(metrics.NodeClaimsTerminated.WithLabelValues(s.pool.Name, metrics.ReasonDeleted)) - before).To(Equal(1.0))
	s.g.Expect(s.terminatedEvents()).To(Equal(1))
}

// A claim given up on is counted once, by why it was given up, and not
// again as deleted when its termination finishes.
func TestARegistrationTimeoutIsCountedOnceByItsReason(t *testing.T) {
	s := newScenario(t, "count-timeout", func(pool *v1alpha1.NodePool) {
		pool.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	timedOut := func() float64 {
		return testutil.ToFloat64(metrics.NodeClaimsTerminated.WithLabelValues(s.pool.Name, metrics.ReasonRegistrationTimeout))
	}
	deleted := func() float64 {
		return testutil.ToFloat64(metrics.NodeClaimsTerminated.WithLabelValues(s.pool.Name, metrics.ReasonDeleted))
	}
	before, beforeDeleted := timedOut(), deleted()
	s.newClaim("count-timeout-a")
	s.clock.SetTime(s.claim("count-timeout-a").CreationTimestamp.Time)
	s.mustReconcile("count-timeout-a")
	s.clock.Step(10*time.Minute + time.Second)
	s.g.Eventually(func() error {
		_, err := s.reconcile("count-timeout-a")
		if err != nil {
			return err
		}
		if s.claim("count-timeout-a") != nil {
			return errors.New("claim still there")
		}
		return nil
	}).Should(Succeed())
	s.g.Expect(timedOut() - before).To(Equal(1.0))
	s.g.Expect(deleted() - beforeDeleted).To(BeZero())
}
