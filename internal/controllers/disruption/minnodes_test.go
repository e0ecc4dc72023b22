package disruption

import "testing"

// A pool's minNodes keeps its cheapest node warm: of an empty small and
// an empty large node, the large one goes.
func TestMinNodesKeepsTheCheapestEmptyNode(t *testing.T) {
	f := newFixture(c4, c8).node("a", c4).node("b", c8).emptyFor("a", "b")
	f.pool.Spec.MinNodes = 1
	cmd, r := decideOnce(t, f)
	if got := describe(cmd); got != "Empty delete b" {
		t.Fatalf("decided %q, want the large node b to go and the small one kept; refusals %v", got, notes(r))
	}
}
