package scheduling

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func unavailableIn(zone string, names ...string) poolOpt {
	return func(_ *v1alpha1.NodePool, p *Pool) {
		if p.UnavailableIn == nil {
			p.UnavailableIn = map[string][]string{}
		}
		p.UnavailableIn[zone] = names
	}
}

// A shape in capacity backoff in one zone is withheld there only: a pod
// spread over both zones gets the cheap shape in the other zone, and the
// dearer one, still offered, in the zone that is out of the cheap one.
func TestAShapeBackedOffInOneZoneIsOfferedInTheOthers(t *testing.T) {
	small, large := shape("small", "2", "4Gi", 1), shape("large", "8", "32Gi", 4)
	c := Cluster{Pools: []Pool{nodePool("default", []Shape{small, large}, zones("a", "b"), unavailableIn("a", "small"))}}
	r := solve(t, c, pods(2, "api", "100m", "128Mi", spread(corev1.LabelTopologyZone, 1, "api")))
	wantNodes("default/small/b:1", "default/large/a:1")(t, r)
}

func noneFree(names ...string) poolOpt {
	return func(_ *v1alpha1.NodePool, p *Pool) {
		p.NoneFree = map[string]string{}
		for _, name := range names {
			p.NoneFree[name] = name + "-01 on for claim metal-x"
		}
	}
}

// An inventory shape with no machine free (bare-metal servers all on, or
// at the provider's cap) gets no new node; a pod nothing else holds is
// told that no machine is free, not that the pool is backed off.
func TestAnInventoryShapeWithNoMachineFreeIsNotPackedAndSaysSo(t *testing.T) {
	small, large := shape("small", "2", "4Gi", 1), shape("large", "8", "32Gi", 4)
	c := Cluster{Pools: []Pool{nodePool("metal", []Shape{small, large}, noneFree("small"))}}
	wantNodes("metal/large/:1")(t, solve(t, c, pods(1, "api", "100m", "128Mi")))

	c = Cluster{Pools: []Pool{nodePool("metal", []Shape{small, large}, noneFree("small", "large"))}}
	r := solve(t, c, pods(1, "api", "100m", "128Mi"))
	wantUnschedulable("api-00000", "no machine of shapes large, small is free", "(large: large-01 on for claim metal-x; small: small-01 on for claim metal-x)")(t, r)
}
