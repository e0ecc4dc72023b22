package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// RunMain is the whole TestMain of a package whose tests share one control
// plane: it starts one with opts and stores it in *env, runs setup (what
// the package's tests share besides, such as a cache; nil for nothing)
// with a context that ends before the control plane stops, runs the
// tests, stops everything and exits with the tests' code.
func RunMain(m *testing.M, opts Options, env **Environment, setup func(ctx context.Context, env *Environment) error) {
	started, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test control plane:", err)
		os.Exit(1)
	}
	*env = started
	ctx, cancel := context.WithCancel(context.Background())
	code := 1
	if setup == nil {
		code = m.Run()
	} else if err := setup(ctx, started); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the test package:", err)
	} else {
		code = m.Run()
	}
	cancel()
	if err := started.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test control plane:", err)
	}
	os.Exit(code)
}
