package clusterstate

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// Writes records the controller's own writes to claims (created, deleted,
// woken) until the cache shows them, so a picture read before the informer
// caught up counts them anyway: a claim just created is in flight, a claim
// just deleted is leaving, a sleeping claim just woken is in flight and no
// longer an offering, and no decision is taken twice on a cache a write
// ahead of it. It is also the one place that waits for the cache to show a
// write (Await), on the claim informer's events rather than by looking
// again and again.
//
// A nil *Writes records nothing, and Await looks at the cache every
// awaitInterval.
type Writes struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	created map[string]ownWrite
	deleted map[string]ownWrite
	// woken are sleeping claims whose suspend annotation the controller
	// removed, as the API server returned them.
	woken map[string]ownWrite
	// changed is closed, and replaced, on every claim event the informer
	// hands over; nil until Watch.
	changed chan struct{}
}

// ownWrite is one write not yet seen in the cache: the claim as written
// (created) or as it was when deleted, and when.
type ownWrite struct {
	claim *v1alpha1.NodeClaim
	at    time.Time
}

// ownWriteMemory is how long a write the cache never shows is kept: the
// claim was removed by someone else before the informer saw it, or the
// watch is broken, and a cache that far behind is not made right by
// remembering longer.
const ownWriteMemory = time.Minute

// awaitInterval is how often Await looks at the cache when no informer
// tells it of changes (tests, a Writes not watching).
const awaitInterval = 10 * time.Millisecond

// NewWrites returns Writes that has recorded none; clock times the records.
func NewWrites(clock clock.PassiveClock) *Writes {
	return &Writes{clock: clock, created: map[string]ownWrite{}, deleted: map[string]ownWrite{}, woken: map[string]ownWrite{}}
}

// Watch wakes Await on every claim event, and forgets the writes the
// informer shows.
func (w *Writes) Watch(ctx context.Context, informers cache.Informers) error {
	informer, err := informers.GetInformer(ctx, &v1alpha1.NodeClaim{})
	if err != nil {
		return fmt.Errorf("watching claims for the controller's own writes: %w", err)
	}
	w.mu.Lock()
	w.changed = make(chan struct{})
	w.mu.Unlock()
	// seen forgets the writes the event shows and wakes every Await;
	// gone: the event is the claim's removal.
	seen := func(obj any, gone bool) {
		claim, _ := withoutTombstone(obj).(*v1alpha1.NodeClaim)
		w.mu.Lock()
		if claim != nil {
			w.forgetSeen(claim.Name, claim, gone)
		}
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj, false) },
		UpdateFunc: func(_, updated any) { seen(updated, false) },
		DeleteFunc: func(obj any) { seen(obj, true) },
	}); err != nil {
		return fmt.Errorf("watching claims for the controller's own writes: %w", err)
	}
	return nil
}

// Created records a claim the controller created (as the API server
// returned it).
func (w *Writes) Created(claim *v1alpha1.NodeClaim) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.created[claim.Name] = ownWrite{claim: claim.DeepCopy(), at: w.clock.Now()}
	w.expire()
}

// Deleted records a claim the controller asked the API server to delete.
func (w *Writes) Deleted(claim *v1alpha1.NodeClaim) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deleted[claim.Name] = ownWrite{claim: claim, at: w.clock.Now()}
	w.expire()
}

// Woken records a sleeping claim the controller woke (as the API server
// returned it, without the suspend annotation).
func (w *Writes) Woken(claim *v1alpha1.NodeClaim) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.woken[claim.Name] = ownWrite{claim: claim.DeepCopy(), at: w.clock.Now()}
	w.expire()
}

// forgetSeen forgets the writes to the named claim the cache shows: a
// create once the claim is there, a deletion once the claim is being
// deleted or gone, a wake once the claim has no suspend annotation (or is
// another claim, or gone). cached is the claim as the cache has it, nil
// when it has none.
func (w *Writes) forgetSeen(name string, cached *v1alpha1.NodeClaim, gone bool) {
	if woken, ok := w.woken[name]; ok && (gone || cached == nil || cached.UID != woken.claim.UID || !cached.SleepRequested()) {
		delete(w.woken, name)
	}
	if created, ok := w.created[name]; ok && cached != nil && (created.claim.UID == "" || created.claim.UID == cached.UID) {
		delete(w.created, name)
	}
	if deleted, ok := w.deleted[name]; ok {
		if gone || cached == nil || cached.UID != deleted.claim.UID || !cached.DeletionTimestamp.IsZero() {
			delete(w.deleted, name)
			delete(w.created, name)
		}
	}
}

// expire forgets the writes older than ownWriteMemory.
func (w *Writes) expire() {
	horizon := w.clock.Now().Add(-ownWriteMemory)
	for _, records := range []map[string]ownWrite{w.created, w.deleted, w.woken} {
		for name, write := range records {
			if write.at.Before(horizon) {
				delete(records, name)
			}
		}
	}
}

// overlay returns the cache's claims with the writes it does not show
// yet: claims created and not yet listed are added, claims deleted and
// still listed live are marked deleted, claims woken and still listed with
// the suspend annotation are listed as written (on a copy; the cache's
// claim is shared). The writes the cache shows are forgotten.
func (w *Writes) overlay(cached []v1alpha1.NodeClaim) []v1alpha1.NodeClaim {
	if w == nil {
		return cached
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expire()
	if w.none() {
		return cached
	}
	index := make(map[string]int, len(cached))
	for i := range cached {
		index[cached[i].Name] = i
	}
	for name := range w.created {
		if i, ok := index[name]; ok {
			w.forgetSeen(name, &cached[i], false)
		}
	}
	for name := range w.deleted {
		if i, ok := index[name]; ok {
			w.forgetSeen(name, &cached[i], false)
		} else if _, created := w.created[name]; !created {
			w.forgetSeen(name, nil, true)
		}
	}
	for name := range w.woken {
		if i, ok := index[name]; ok {
			w.forgetSeen(name, &cached[i], false)
		} else {
			w.forgetSeen(name, nil, true)
		}
	}
	if w.none() {
		return cached
	}
	// A list of our own: the cache's is shared with every reader.
	claims := make([]v1alpha1.NodeClaim, len(cached), len(cached)+len(w.created))
	copy(claims, cached)
	for name, write := range w.created {
		if _, ok := index[name]; !ok {
			// A copy of its own: a caller of Claims may write to it.
			claims = append(claims, *write.claim.DeepCopy())
			index[name] = len(claims) - 1
		}
	}
	for name, write := range w.deleted {
		i, ok := index[name]
		if !ok || !claims[i].DeletionTimestamp.IsZero() {
			continue
		}
		// Its deletion asked for when recorded: the API server sets the
		// timestamp when it accepts the request.
		deletedAt := metav1.NewTime(write.at)
		claims[i].DeletionTimestamp = &deletedAt
	}
	for name, write := range w.woken {
		if i, ok := index[name]; ok && claims[i].DeletionTimestamp.IsZero() {
			// A copy of its own, as written: a caller of Claims may
			// write to it.
			claims[i] = *write.claim.DeepCopy()
		}
	}
	return claims
}

// none says whether no write is recorded.
func (w *Writes) none() bool {
	return len(w.created) == 0 && len(w.deleted) == 0 && len(w.woken) == 0
}

// Pending says whether a write to the named claim is recorded and not yet
// seen in the cache.
func (w *Writes) Pending(name string) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, created := w.created[name]
	_, deleted := w.deleted[name]
	_, woken := w.woken[name]
	return created || deleted || woken
}

// Await waits, for at most limit, until seen says the cache shows the
// controller's own write. It asks seen at once, then after every claim
// event the informer hands over (Watch), or every awaitInterval when no
// informer tells it. An error from seen ends the wait with it; so does the
// limit, with an error wrapping context.DeadlineExceeded.
func (w *Writes) Await(ctx context.Context, limit time.Duration, seen func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var tick <-chan time.Time
	for {
		changed := w.changes()
		if changed == nil && tick == nil {
			ticker := time.NewTicker(awaitInterval)
			defer ticker.Stop()
			tick = ticker.C
		}
		done, err := seen(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the cache to show the write: %w", ctx.Err())
		}
	}
}

// changes is closed on the next claim event; nil when no informer tells.
func (w *Writes) changes() <-chan struct{} {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed == nil {
		return nil
	}
	return w.changed
}
