package shapecatalog

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDefaultSizePriceCountsCoresAndGiB(t *testing.T) {
	if got := DefaultSizePrice(resource.MustParse("2"), resource.MustParse("4Gi")); got != 3 {
		t.Fatalf("2 cores and 4Gi cost %v, want 3", got)
	}
	if got := DefaultSizePrice(resource.MustParse("500m"), resource.MustParse("512Mi")); got != 0.625 {
		t.Fatalf("500m and 512Mi cost %v, want 0.625", got)
	}
}

func TestFlexibleNameKeepsTheNamesClaimsCarry(t *testing.T) {
	for _, c := range []struct{ cpu, memory, want string }{
		{"2", "4Gi", "flex-2-4Gi"},
		{"1500m", "3Gi", "flex-1500m-3Gi"},
	} {
		if got := FlexibleName(resource.MustParse(c.cpu), resource.MustParse(c.memory)); got != c.want {
			t.Errorf("FlexibleName(%s, %s) = %s, want %s", c.cpu, c.memory, got, c.want)
		}
	}
}
