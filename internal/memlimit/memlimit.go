// Package memlimit sets the Go runtime's soft memory limit from the
// container's memory limit.
//
// The container's limit bounds everything the process has resident,
// including the pages of the binary's own code it has touched. Go's limit
// does not count those: "it does not account for space used by the Go
// binary and memory external to Go" (runtime/debug.SetMemoryLimit). Handed
// the container's limit as it is, the heap grows into that room and the
// process past its limit. The runtime gets nine tenths of it, the
// convention of github.com/KimMachineGun/automemlimit.
//
// A tenth does not hold all of the code at small limits: the controller
// links the scheduler's plugins, every provider's SDK and Cluster API's
// types, and about 55 MiB of it is resident after a 10,000-pod run. Those
// pages are clean, and the kernel drops them under pressure before it
// kills the process. Leaving them all out of Go's share is worse: with
// 136 of a 200 MiB limit (the whole limit less 64 MiB), the runtime sat at
// its limit after a 10,000-pod scale-up and the collector ran without
// pause, 0.4 cores with nothing to do and twice the CPU over the run.
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

// Soft is the limit the runtime gets for a container limit of
// containerLimit bytes: nine tenths of it.
func Soft(containerLimit int64) int64 {
	return containerLimit / 10 * 9
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
