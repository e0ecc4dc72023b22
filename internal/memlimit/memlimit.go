// Package memlimit sets the Go runtime's soft memory limit from the
// container's memory limit.
//
// The container's limit bounds everything the process has resident,
// including the pages of the binary's own code it has touched. Go's limit
// does not count those: "it does not account for space used by the Go
// binary and memory external to Go" (runtime/debug.SetMemoryLimit). Handed
// the container's limit as it is, the heap grows into that room and the
// process past its limit.
//
// The controller links the scheduler's plugins, every provider's SDK and
// Cluster API's types: 55 to 62 MiB of its code is resident after a
// 10,000-pod run, and in a burst of allocation the runtime goes up to 16
// MiB past its limit before its collector catches up. So the
// runtime gets the container's limit less codeReserve (80 MiB), or nine
// tenths of it (the convention of github.com/KimMachineGun/automemlimit)
// when that is less, and never less than half of it: at a small limit the
// code's pages, which are clean, are the kernel's to drop under pressure
// rather than the heap's to give up.
//
// Less than nine tenths was tried once and was worse: with 136 of a 200
// MiB limit, the runtime sat at its limit after a 10,000-pod scale-up and
// the collector ran without pause (0.4 cores with nothing to do). That was
// when a cached pod held 5.4 KiB; at 1.5 KiB the live heap after the same
// scale-up is about 60 MiB, and the same 136 MiB cost no CPU at all (less
// over the run than nine tenths did, 0.016 cores idle). At 128 MiB the
// resident size peaked at 198 and 209 MiB in two runs, at 120 MiB between
// 180 and 201 over eleven runs (docs/tuning.md, runs 10 to 24). 110 MiB
// was tried once more (run 25) and peaked higher, at 206 MiB, with a third
// more CPU, which says the peak near the end of a scale-up is mostly live
// memory, not garbage a lower limit would collect sooner.
package memlimit

import (
	"fmt"
	"runtime/debug"
	"strconv"
)

const (
	// EnvContainerLimit carries the container's memory limit in bytes, as
	// a resourceFieldRef to limits.memory hands it over.
	EnvContainerLimit = "CLAIMSCALE_MEMORY_LIMIT"
	// EnvGoLimit is the runtime's own setting; set, it wins.
	EnvGoLimit = "GOMEMLIMIT"
)

// codeReserve is what a container's limit keeps outside Go's: the
// binary's resident code and the runtime's overshoot, with room.
const codeReserve = 80 << 20

// Soft is the limit the runtime gets for a container limit of
// containerLimit bytes: the limit less codeReserve, or nine tenths of it
// if that is less, and at least half of it.
func Soft(containerLimit int64) int64 {
	return max(min(containerLimit-codeReserve, containerLimit/10*9), containerLimit/2)
}

// FromEnv sets the runtime's soft limit from EnvContainerLimit, unless
// GOMEMLIMIT is set (the runtime has applied it already) or no container
// limit is. Without a limit of its own the container is handed its node's
// allocatable memory, which is a fair bound too. It returns the limit set,
// 0 when it set none.
func FromEnv(getenv func(string) string) (int64, error) {
	if getenv(EnvGoLimit) != "" {
		return 0, nil
	}
	value := getenv(EnvContainerLimit)
	if value == "" {
		return 0, nil
	}
	containerLimit, err := strconv.ParseInt(value, 10, 64)
	if err != nil || containerLimit <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit in bytes", EnvContainerLimit, value)
	}
	soft := Soft(containerLimit)
	debug.SetMemoryLimit(soft)
	return soft, nil
}
