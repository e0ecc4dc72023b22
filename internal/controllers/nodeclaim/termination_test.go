package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// An eviction an overloaded API server did not answer in time is asked
// again at the next drain poll, not reported as an error; one it refused
// for a reason is.
func TestBusyAPIServerIsOnlyTheAnswersARetryFixes(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		busy bool
	}{
		{apierrors.NewTimeoutError("request did not complete within 60s", 0), true},
		{apierrors.NewServerTimeout(pods, "create", 1), true},
		{apierrors.NewServiceUnavailable("etcd leader changed"), true},
		{fmt.Errorf("evicting: %w", context.DeadlineExceeded), true},
		{apierrors.NewForbidden(pods, "web-1", errors.New("no eviction rights")), false},
		{apierrors.NewInternalError(errors.New("admission webhook panicked")), false},
		{errors.New("connection reset"), false},
	} {
		if got := busyAPIServer(tc.err); got != tc.busy {
			t.Errorf("busyAPIServer(%v) = %t, want %t", tc.err, got, tc.busy)
		}
	}
}
