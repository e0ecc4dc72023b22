package disruption

import (
	"context"
	"fmt"
)

// considerExpiration takes a node whose claim is older than its pool's
// expireAfter as expiration's candidate.
func (r *round) considerExpiration(c *candidate, blockReason, why string) {
	if expireAfter := c.pool.pool.Spec.Disruption.ExpireAfter; expireAfter != nil && expireAfter.Duration > 0 &&
		r.s.now.Sub(c.claim.CreationTimestamp.Time) >= expireAfter.Duration {
		r.classify(c, reasonExpired, &r.expired, blockReason, why, "expired")
	}
}

// expiration replaces nodes older than their pool's expireAfter, whatever
// the budgets, oldest first; never leaving their pods without a place.
func (r *round) expiration(ctx context.Context) (*command, error) {
	for _, c := range r.expired {
		if r.memory.skip(c.claim.UID, reasonExpired, r.s.fingerprint, r.s.now) {
			continue
		}
		if settled, err := r.settled(ctx); err != nil || !settled {
			return nil, err
		}
		why := fmt.Sprintf("node %s expired: claim %s is older than the pool's expireAfter of %s",
			c.node.Name, c.claim.Name, c.pool.pool.Spec.Disruption.ExpireAfter.Duration)
		cmd, refused, err := r.whatIf.replacement(ctx, reasonExpired, c, why)
		if err != nil || cmd != nil {
			return cmd, err
		}
		r.memory.remember(c.claim.UID, reasonExpired, r.s.fingerprint, r.s.now)
		r.refuse(c, eventBlocked, refused.record, "expired, but "+refused.note)
	}
	return nil, nil
}
