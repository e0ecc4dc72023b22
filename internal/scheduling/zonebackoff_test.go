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

func freeMachines(kv map[string]int) poolOpt {
	return func(_ *v1alpha1.NodePool, p *Pool) { p.Free = kv }
}

// An inventory shape with some machines free gets no more new nodes than
// that: pods that would fill more small servers than are off go onto the
// larger ones, in the same round, instead of waiting for a round that
// finds the small ones gone.
func TestAnInventoryShapeGetsNoMoreNodesThanItHasMachinesFree(t *testing.T) {
	// Each pod needs a server of its own, of either shape.
	small, large := shape("small", "2", "4Gi", 1), shape("large", "3", "6Gi", 2)
	c := Cluster{Pools: []Pool{nodePool("metal", []Shape{small, large}, freeMachines(map[string]int{"small": 2, "large": 3}))}}
	r := solve(t, c, pods(4, "api", "1700m", "128Mi"))
	wantNodes("metal/small/:1", "metal/small/:1", "metal/large/:1", "metal/large/:1")(t, r)

	// With every server taken, the pods left are told why.
	c = Cluster{Pools: []Pool{nodePool("metal", []Shape{small}, freeMachines(map[string]int{"small": 2}))}}
	r = solve(t, c, pods(3, "api", "1700m", "128Mi"))
	wantNodes("metal/small/:1", "metal/small/:1")(t, r)
	wantUnschedulable("api-00002", "every free machine of the shapes that fit is taken by other new nodes of this round: small (2 free)")(t, r)
}
