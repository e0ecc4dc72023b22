package memlimit

import (
	"runtime/debug"
	"testing"
)

func TestSoftLeavesTheCodeOutsideGo(t *testing.T) {
	for _, tc := range []struct {
		name            string
		container, want int64
	}{
		{"the chart's default: nine tenths", 1 << 30, 966367638},
		{"200 MiB: less the code", 200 << 20, 120 << 20},
		{"128 MiB: half", 128 << 20, 64 << 20},
	} {
		if got := Soft(tc.container); got != tc.want {
			t.Errorf("%s: Soft(%d) = %d, want %d", tc.name, tc.container, got, tc.want)
		}
	}
}

func TestFromEnv(t *testing.T) {
	previous := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(previous) })

	env := func(values map[string]string) func(string) string {
		return func(name string) string { return values[name] }
	}
	soft, err := FromEnv(env(map[string]string{EnvContainerLimit: "209715200"}))
	if err != nil || soft != 120<<20 {
		t.Fatalf("FromEnv(200 MiB) = %d, %v; want 120 MiB", soft, err)
	}
	if got := debug.SetMemoryLimit(-1); got != soft {
		t.Fatalf("runtime limit = %d after FromEnv, want %d", got, soft)
	}

	debug.SetMemoryLimit(previous)
	soft, err = FromEnv(env(map[string]string{EnvContainerLimit: "209715200", EnvGoLimit: "300MiB"}))
	if err != nil || soft != 0 || debug.SetMemoryLimit(-1) != previous {
		t.Fatalf("with GOMEMLIMIT set, FromEnv = %d, %v and changed the limit to %d; want it left alone", soft, err, debug.SetMemoryLimit(-1))
	}
	if soft, err = FromEnv(env(nil)); err != nil || soft != 0 {
		t.Fatalf("without a container limit, FromEnv = %d, %v; want nothing set", soft, err)
	}
	if _, err = FromEnv(env(map[string]string{EnvContainerLimit: "200Mi"})); err == nil {
		t.Fatal("FromEnv accepted a limit that is not in bytes")
	}
}
