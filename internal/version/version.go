// Package version carries the build's version, set by the Makefile's
// ldflags.
package version

import (
	"fmt"
	"runtime"
)

var (
	// Version is the release or `git describe` of the build.
	Version = "dev"
	// Commit is the git commit of the build.
	Commit = "unknown"
)

// String describes the build for --version and the startup log.
func String() string {
	return fmt.Sprintf("claimscale %s (commit %s, %s)", Version, Commit, runtime.Version())
}
