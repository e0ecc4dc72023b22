// Package memlimit sets the Go runtime's soft memory limit from the
// container's memory limit.
//
// The container's limit bounds everything the process has resident,
// including the pages of the binary's own code it has touched. Go's limit
// does not count those: "it does not account for space used by the Go
// binary and memory external to Go" (runtime/debug.SetMemoryLimit). The
// controller links the scheduler's plugins, every provider's SDK and
// Cluster API's types; about 60 MiB of its code is resident once it has
// run for a while. Handing the container's limit to GOMEMLIMIT as it is
// lets the heap grow into that room, and the process past its limit.
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
	// CodeReserve is the part of the container's limit left to the
	// binary's resident code and to memory outside Go's accounting
	// (measured: 59 MiB resident code after a 10,000-pod run).
	CodeReserve = 64 << 20
)

// Soft is the limit the runtime gets for a container limit of
// containerLimit bytes: the limit less CodeReserve, and never less than
// half the limit, so a small container is not starved.
func Soft(containerLimit int64) int64 {
	reserve := int64(CodeReserve)
	if reserve > containerLimit/2 {
		reserve = containerLimit / 2
	}
	return containerLimit - reserve
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
