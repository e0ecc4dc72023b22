package nodeclaim

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// conflictRetry is how soon a reconcile whose write conflicted runs again:
// by then the cache holds the newer claim.
const conflictRetry = 200 * time.Millisecond

// requeueOnConflict turns a result whose only errors are optimistic-lock
// conflicts (a finalizer patched from a copy the cache had not refreshed
// yet) into a quiet retry: nobody has to act on a conflict, so it is no
// error-level log line. Any other error stays.
func requeueOnConflict(ctx context.Context) func(reconcile.Result, error) (reconcile.Result, error) {
	return func(result reconcile.Result, err error) (reconcile.Result, error) {
		if err == nil || !onlyConflicts(err) {
			return result, err
		}
		log.FromContext(ctx).V(1).Info("write conflicted, retrying", "error", err.Error(), "after", conflictRetry)
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
}

func onlyConflicts(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		found := false
		for _, e := range joined.Unwrap() {
			if e == nil {
				continue
			}
			if !onlyConflicts(e) {
				return false
			}
			found = true
		}
		return found
	}
	return apierrors.IsConflict(err)
}
