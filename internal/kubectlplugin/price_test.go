package kubectlplugin

import "testing"

func TestFormatPriceReadsSumsAsSet(t *testing.T) {
	// Summed at run time, as a decision's price is: constant arithmetic
	// would be exact.
	price := 0.2
	three := price + price + price
	for _, tc := range []struct {
		price float64
		want  string
	}{
		{0, "-"},
		{0.2, "0.2"},
		{three, "0.6"},
		{three - price, "0.4"},
		{1.125, "1.125"},
	} {
		if got := formatPrice(tc.price); got != tc.want {
			t.Errorf("formatPrice(%v) = %q, want %q", tc.price, got, tc.want)
		}
	}
}
