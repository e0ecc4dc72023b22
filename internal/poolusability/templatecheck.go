package poolusability

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/poolclaims"
	"github.com/claimscale/claimscale/internal/scheduling"
)

// TemplateInvalidError: a pool's template cannot make a node, because the
// scheduling package cannot compute one from it or because the API server
// refuses the claims or nodes it would make.
type TemplateInvalidError struct{ Err error }

func (e *TemplateInvalidError) Error() string { return "template invalid: " + e.Err.Error() }
func (e *TemplateInvalidError) Unwrap() error { return e.Err }

// IsTemplateInvalid says whether err is a TemplateInvalidError.
func IsTemplateInvalid(err error) bool {
	var invalid *TemplateInvalidError
	return errors.As(err, &invalid)
}

// TemplateCheck finds what in a pool's template can never make a node: the
// template node cannot be computed (an eviction threshold above 100 %), a
// taint a Node would refuse, or a claim the API server would refuse (a
// label value, a name too long for the labels it goes into). The API
// server's verdict on the claim is asked once per pool generation, by a
// server-side dry run, so its own validation is the judge.
type TemplateCheck struct {
	Kube client.Client

	mu   sync.Mutex
	memo map[types.UID]checkedTemplate
}

type checkedTemplate struct {
	generation int64
	err        error
}

// Check returns a TemplateInvalidError when the pool's template can never
// make a node of shapes, nil when it can, and another error when it could
// not tell (the dry run failed for another reason).
func (t *TemplateCheck) Check(ctx context.Context, pool *v1alpha1.NodePool, shapes scheduling.Shapes) error {
	shape, ok := poolclaims.AnyShape(shapes)
	if !ok {
		return nil
	}
	if err := poolclaims.TemplateProblem(pool, shapes); err != nil {
		return &TemplateInvalidError{Err: err}
	}
	if t == nil || t.Kube == nil {
		return nil
	}
	t.mu.Lock()
	if checked, ok := t.memo[pool.UID]; ok && checked.generation == pool.Generation {
		t.mu.Unlock()
		return checked.err
	}
	t.mu.Unlock()

	claim := poolclaims.New(pool, shape, nil, nil)
	err := t.Kube.Create(ctx, claim, client.DryRunAll)
	switch {
	case err == nil:
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		err = &TemplateInvalidError{Err: fmt.Errorf("the API server refuses the pool's NodeClaims: %s", messageOf(err))}
	default:
		log.FromContext(ctx).Info("could not check the pool's claims against the API server", "nodePool", pool.Name, "error", err.Error())
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.memo == nil {
		t.memo = map[types.UID]checkedTemplate{}
	}
	t.memo[pool.UID] = checkedTemplate{generation: pool.Generation, err: err}
	return err
}

func messageOf(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}
