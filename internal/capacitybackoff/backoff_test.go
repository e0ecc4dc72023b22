package capacitybackoff

import (
	"reflect"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestBackoffDoublesUpToThirtyMinutes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	if b.Unavailable("general", "small", "") {
		t.Fatal("unavailable before any failure")
	}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Record("general", "small", ""))
	}
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", got, want)
		}
	}
	if !b.Unavailable("general", "small", "") {
		t.Fatal("available right after a failure")
	}
	if b.Unavailable("general", "large", "") || b.Unavailable("other", "small", "") {
		t.Fatal("backoff leaked to another shape or pool")
	}
	clk.Step(30*time.Minute + time.Second)
	if b.Unavailable("general", "small", "") {
		t.Fatal("still unavailable after the backoff ended")
	}
}

func TestBackoffStartsOverAfterAQuietPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	b.Record("general", "small", "")
	b.Record("general", "small", "")
	clk.Step(time.Hour)
	if got := b.Record("general", "small", ""); got != 5*time.Minute {
		t.Fatalf("backoff after a quiet hour = %v, want 5m", got)
	}
}

func TestBackoffIsPerZone(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := NewBackoff(clk)
	b.Record("general", "flex-8-2", "lpg1")
	if !b.Unavailable("general", "flex-8-2", "lpg1") {
		t.Fatal("available in the zone that just failed")
	}
	if b.Unavailable("general", "flex-8-2", "rma1") {
		t.Fatal("a failure in lpg1 backed off rma1 too")
	}
	b.Record("general", "flex-8-2", "")
	if !b.Unavailable("general", "flex-8-2", "rma1") {
		t.Fatal("a failure without a zone must back the shape off everywhere")
	}
}

func TestNarrow(t *testing.T) {
	zones := []string{"lpg1", "rma1"}
	shapes := []string{"small", "large"}
	for _, tc := range []struct {
		name            string
		failures        [][2]string // shape, zone
		zones           []string
		wantZones       []string
		wantUnavailable []string
		wantIn          map[string][]string
	}{
		{name: "nothing backed off keeps every zone and shape", zones: zones, wantZones: zones},
		{
			name:     "a zone with every shape backed off is left out, its shapes stay in the other zone",
			failures: [][2]string{{"small", "lpg1"}, {"large", "lpg1"}}, zones: zones,
			wantZones: []string{"rma1"},
		},
		{
			name:     "a shape out in one zone while the zone has others is withheld in that zone only",
			failures: [][2]string{{"small", "lpg1"}}, zones: zones,
			wantZones: zones, wantIn: map[string][]string{"lpg1": {"small"}},
		},
		{
			name:     "a shape out in every zone that remains is unavailable",
			failures: [][2]string{{"small", "lpg1"}, {"small", "rma1"}}, zones: zones,
			wantZones: zones, wantUnavailable: []string{"small"},
		},
		{
			name:     "every zone out keeps the zones and makes every shape unavailable",
			failures: [][2]string{{"small", "lpg1"}, {"large", "lpg1"}, {"small", "rma1"}, {"large", "rma1"}}, zones: zones,
			wantZones: zones, wantUnavailable: shapes,
		},
		{
			name:            "a provider without zones backs shapes off as before",
			failures:        [][2]string{{"small", ""}},
			wantUnavailable: []string{"small"},
		},
		{
			name:     "a failure without a zone counts in every zone",
			failures: [][2]string{{"small", ""}, {"large", ""}}, zones: zones,
			wantZones: zones, wantUnavailable: shapes,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBackoff(clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
			for _, f := range tc.failures {
				b.Record("general", f[0], f[1])
			}
			gotZones, gotUnavailable, gotIn := b.Narrow("general", tc.zones, shapes)
			if !slices.Equal(gotZones, tc.wantZones) || !slices.Equal(gotUnavailable, tc.wantUnavailable) || !reflect.DeepEqual(gotIn, tc.wantIn) {
				t.Fatalf("Narrow = %v, %v, %v; want %v, %v, %v", gotZones, gotUnavailable, gotIn, tc.wantZones, tc.wantUnavailable, tc.wantIn)
			}
		})
	}
}
