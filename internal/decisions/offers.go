package decisions

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// PoolOffer is what a pool could make at the last provisioning round, as
// its provider resolved it: the shapes with their capacity and price, the
// zones and the shapes in capacity backoff. A simulation outside the
// controller decides on it, so it needs neither the provider's
// credentials nor a call to the provider.
type PoolOffer struct {
	Pool        string       `json:"pool"`
	Shapes      []OfferShape `json:"shapes"`
	Zones       []string     `json:"zones,omitempty"`
	Unavailable []string     `json:"unavailable,omitempty"`
	// UnavailableIn are shapes backed off in some zones only, by zone.
	UnavailableIn map[string][]string `json:"unavailableIn,omitempty"`
}

// OfferShape is a provider.Shape.
type OfferShape struct {
	Name     string              `json:"name"`
	Capacity corev1.ResourceList `json:"capacity"`
	Price    float64             `json:"price,omitempty"`
}

// RecordPoolOffer keeps a pool's latest offer. Pools are few and bounded
// by the cluster's NodePools; a deleted pool's offer is dropped by
// ForgetPoolOffersExcept.
func (s *Store) RecordPoolOffer(offer PoolOffer) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offers == nil {
		s.offers = map[string]PoolOffer{}
	}
	s.offers[offer.Pool] = offer
}

// PoolOffers returns every pool's latest offer, by pool name.
func (s *Store) PoolOffers() []PoolOffer {
	s.mu.RLock()
	out := make([]PoolOffer, 0, len(s.offers))
	for _, offer := range s.offers {
		out = append(out, offer)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}
