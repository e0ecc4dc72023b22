package shapecatalog

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func names(shapes []Shape) string {
	var out []string
	for _, s := range shapes {
		out = append(out, s.Name)
	}
	return strings.Join(out, " ")
}

func TestGridOfDefaultsStepsAndPrices(t *testing.T) {
	g, err := GridOf(&v1alpha1.FlexibleShape{
		MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("2"),
		MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("2Gi"),
		PricePerCPU: "0.5",
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.CPUStep.Cmp(resource.MustParse("1")) != 0 || g.MemoryStep.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("steps %s and %s, want 1 and 1Gi", g.CPUStep.String(), g.MemoryStep.String())
	}
	if g.PricePerCPU != 0.5 || g.PricePerGiB != DefaultPricePerGiB {
		t.Errorf("prices %v and %v, want 0.5 and the default per GiB", g.PricePerCPU, g.PricePerGiB)
	}
	if _, err := GridOf(&v1alpha1.FlexibleShape{PricePerGiB: "cheap"}); err == nil || !strings.Contains(err.Error(), "pricePerGiB") {
		t.Errorf("a price that is no number: err = %v, want one naming pricePerGiB", err)
	}
}

// The grid is the minimum, then the multiples of the step above it: the
// sizes the scheduling core sizes claims on.
func TestGridPointsAreTheMinimumThenMultiplesOfTheStep(t *testing.T) {
	g, err := GridOf(&v1alpha1.FlexibleShape{
		MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("5"), CPUStep: ptr.To(resource.MustParse("2")),
		MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("1Gi"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(g.Expand()), "flex-1-1Gi flex-2-1Gi flex-4-1Gi"; got != want {
		t.Errorf("Expand = %s, want %s", got, want)
	}
	if s, ok := g.Smallest(resource.MustParse("2500m"), resource.MustParse("1")); !ok || s.Name != "flex-4-1Gi" {
		t.Errorf("Smallest(2500m) = %s, %v; want flex-4-1Gi", s.Name, ok)
	}
	if s := g.Largest(); s.Name != "flex-4-1Gi" {
		t.Errorf("Largest = %s, want flex-4-1Gi", s.Name)
	}
	if _, ok := g.Smallest(resource.MustParse("4500m"), resource.MustParse("1")); ok {
		t.Error("Smallest found a size for more than the largest point holds")
	}
}

func TestExpandRoundedNamesAndPricesTheRoundedSizesOnce(t *testing.T) {
	g, err := GridOf(&v1alpha1.FlexibleShape{
		MinCPU: resource.MustParse("500m"), MaxCPU: resource.MustParse("2"), CPUStep: ptr.To(resource.MustParse("500m")),
		MinMemory: resource.MustParse("1000Mi"), MaxMemory: resource.MustParse("1000Mi"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// 500m, 1, 1500m and 2 cores round to 1 and 2; memory stays 1000Mi.
	shapes := g.ExpandRounded(Rounding{CPU: 1000, Memory: 1 << 20})
	if got, want := names(shapes), "flex-1-1000Mi flex-2-1000Mi"; got != want {
		t.Errorf("ExpandRounded = %s, want %s", got, want)
	}
	if got, want := shapes[1].Price, DefaultSizePrice(resource.MustParse("2"), resource.MustParse("1000Mi")); got != want {
		t.Errorf("the rounded size costs %v, want %v", got, want)
	}
	if got := names(g.Expand()); got != "flex-500m-1000Mi flex-1-1000Mi flex-1500m-1000Mi flex-2-1000Mi" {
		t.Errorf("Expand without rounding = %s", got)
	}
}

func TestExpandIsBoundedAndKeepsTheEnds(t *testing.T) {
	g := Grid{
		MinCPU: resource.MustParse("1m"), MaxCPU: resource.MustParse("1e6"), CPUStep: resource.MustParse("1m"),
		MinMemory: resource.MustParse("1"), MaxMemory: resource.MustParse("1Ei"), MemoryStep: resource.MustParse("1"),
		PricePerCPU: DefaultPricePerCPU, PricePerGiB: DefaultPricePerGiB,
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	all := g.Expand()
	if len(all) != MaxExpandedShapes {
		t.Fatalf("Expand listed %d sizes, want %d", len(all), MaxExpandedShapes)
	}
	if first, last := all[0], all[len(all)-1]; first.Name != "flex-1m-1" || last.Name != g.Largest().Name {
		t.Errorf("Expand runs %s to %s, want the minimum to %s", first.Name, last.Name, g.Largest().Name)
	}
}

func TestValidateRefusesWhatTheArithmeticCannotHold(t *testing.T) {
	base := func() Grid {
		return Grid{
			MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("2"), CPUStep: resource.MustParse("1"),
			MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("2Gi"), MemoryStep: resource.MustParse("1Gi"),
		}
	}
	for _, c := range []struct {
		name   string
		change func(*Grid)
		want   string
	}{
		{"a fraction of a millicore", func(g *Grid) { g.MinCPU = resource.MustParse("1500u") }, "minimum cpu 1500u must be a whole number of millicores"},
		{"a zero step", func(g *Grid) { g.MemoryStep = resource.MustParse("0") }, "memory step 0 must be"},
		{"a negative price", func(g *Grid) { g.PricePerGiB = -1 }, "price -1 must be a non-negative number"},
		{"a minimum above the maximum", func(g *Grid) { g.MinCPU = resource.MustParse("3") }, "the minimum exceeds the maximum"},
	} {
		g := base()
		c.change(&g)
		if err := g.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
	if err := base().Validate(); err != nil {
		t.Errorf("a valid grid: %v", err)
	}
}
