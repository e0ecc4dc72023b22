package decisions

import "container/list"

// recent holds the latest record per key, at most a bound of them, in the
// order they were recorded, so that a full store drops its least recently
// recorded one without scanning: provisioning records every pending pod
// of a round under the store's lock, and at 10,000 pods a scan per new pod
// would cost the round millions of steps.
type recent[R any] struct {
	order *list.List // front: least recently recorded
	items map[string]*list.Element
}

type entry[R any] struct {
	key    string
	record R
}

// put keeps record as key's latest and, when that adds a key to a store
// already at max, drops the least recently recorded one.
func (r *recent[R]) put(key string, record R, max int) {
	if r.items == nil {
		r.order, r.items = list.New(), map[string]*list.Element{}
	}
	if e, ok := r.items[key]; ok {
		e.Value = entry[R]{key, record}
		r.order.MoveToBack(e)
		return
	}
	if len(r.items) >= max {
		oldest := r.order.Front()
		delete(r.items, oldest.Value.(entry[R]).key)
		r.order.Remove(oldest)
	}
	r.items[key] = r.order.PushBack(entry[R]{key, record})
}

func (r *recent[R]) get(key string) (R, bool) {
	if e, ok := r.items[key]; ok {
		return e.Value.(entry[R]).record, true
	}
	var none R
	return none, false
}

func (r *recent[R]) len() int { return len(r.items) }

// each calls f with every record, least recently recorded first, until f
// says stop.
func (r *recent[R]) each(f func(R) bool) {
	if r.order == nil {
		return
	}
	for e := r.order.Front(); e != nil; e = e.Next() {
		if !f(e.Value.(entry[R]).record) {
			return
		}
	}
}
