package operator

import "github.com/go-logr/logr"

// LogStart says that the controller starts: its version, mode and cluster,
// and under --dry-run, first of all, that it acts on nothing. A dry run
// looks like a controller that decides and does nothing: the log is where
// an operator looks first to tell the two apart.
func LogStart(logger logr.Logger, version string, opts Options) {
	if opts.DryRun {
		logger.Info("starting in dry-run: deciding and recording as usual, but creating, deleting, cordoning and evicting nothing",
			"version", version, "mode", opts.Mode, "cluster", opts.ClusterName, "dryRun", true)
		return
	}
	logger.Info("starting", "version", version, "mode", opts.Mode, "cluster", opts.ClusterName)
}
