package scheduling

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// admittedThreshold is the pattern of v1alpha1.EvictionThreshold, all the
// API server lets reach evictionThreshold as a quantity (it refuses
// exponents, which take minutes to parse). Percentages are fed whatever
// they are ("NaN%", "1e400%"): reading them is cheap, and an object stored
// before a rule existed may hold one.
var admittedThreshold = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?%|[0-9]+(\.[0-9]+)?([KMGTPE]i?)?)$`)

// FuzzEvictionThreshold feeds an evictionHard value the API admits (above
// 100% included), and a machine's capacity within the largest machine the
// API admits, to
// evictionThreshold: it answers an error, or for a percentage an amount
// between zero and the capacity, or for a quantity that quantity. The seed
// corpus is in testdata/fuzz/FuzzEvictionThreshold.
func FuzzEvictionThreshold(f *testing.F) {
	f.Fuzz(func(t *testing.T, threshold string, capacityBytes int64) {
		if !strings.HasSuffix(threshold, "%") && !admittedThreshold.MatchString(threshold) {
			t.Skip()
		}
		maxMemory := resource.MustParse("64Ti")
		if capacityBytes < 0 || capacityBytes > maxMemory.Value() {
			t.Skip()
		}
		capacity := *resource.NewQuantity(capacityBytes, resource.BinarySI)
		got, err := evictionThreshold(threshold, capacity)
		if err != nil {
			return
		}
		if strings.HasSuffix(threshold, "%") {
			if got.Sign() < 0 || got.Cmp(capacity) > 0 {
				t.Fatalf("%s of %s is %s", threshold, capacity.String(), got.String())
			}
			return
		}
		want, err := resource.ParseQuantity(threshold)
		if err != nil || got.Cmp(want) != 0 {
			t.Fatalf("%s read as %s", threshold, got.String())
		}
	})
}
