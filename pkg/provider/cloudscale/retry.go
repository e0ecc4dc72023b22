package cloudscale

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"k8s.io/utils/clock"

	"github.com/claimscale/claimscale/pkg/provider"
)

// do makes one API request through fn and classifies its failure.
func (p *Provider) do(ctx context.Context, fn func(ctx context.Context) error) error {
	ex := &exchange{}
	err := fn(withExchange(ctx, ex))
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return p.classify(ex, err)
}

// retry runs op until it succeeds, fails for good, or has been tried
// cfg.MaxTries times. op returns classified errors (from do): retryable
// ones are tried again after an exponential backoff, or after the wait the
// API asked for with Retry-After. A Retry-After longer than cfg.MaxRetryWait
// is not waited out here but returned, so the caller's requeue honours it
// without holding a worker.
func (p *Provider) retry(ctx context.Context, op func(ctx context.Context) error) error {
	exp := backoff.NewExponentialBackOff()
	exp.InitialInterval = p.cfg.RetryInterval
	exp.MaxInterval = 10 * p.cfg.RetryInterval
	exp.MaxElapsedTime = 0
	exp.Clock = p.clock
	b := &retryAfterBackOff{BackOff: backoff.WithMaxRetries(exp, uint64(p.cfg.MaxTries-1))}

	return backoff.RetryNotifyWithTimer(func() error {
		err := op(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return backoff.Permanent(ctx.Err())
		case !provider.IsRetryable(err):
			return backoff.Permanent(err)
		}
		after := provider.RetryAfter(err)
		if after > p.cfg.MaxRetryWait {
			return backoff.Permanent(err)
		}
		b.after = after
		return err
	}, backoff.WithContext(b, ctx), nil, &clockTimer{clock: p.clock})
}

// retryAfterBackOff waits what the API asked for instead of the next
// exponential step, when it asked.
type retryAfterBackOff struct {
	backoff.BackOff
	after time.Duration
}

func (b *retryAfterBackOff) NextBackOff() time.Duration {
	next := b.BackOff.NextBackOff()
	if next == backoff.Stop {
		return next
	}
	if b.after > 0 {
		next, b.after = b.after, 0
	}
	return next
}

// clockTimer runs backoff's waits on an injected clock, so tests step time
// instead of sleeping.
type clockTimer struct {
	clock clock.Clock
	timer clock.Timer
}

func (t *clockTimer) Start(d time.Duration) {
	if t.timer == nil {
		t.timer = t.clock.NewTimer(d)
		return
	}
	t.timer.Reset(d)
}

func (t *clockTimer) Stop() {
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *clockTimer) C() <-chan time.Time { return t.timer.C() }
