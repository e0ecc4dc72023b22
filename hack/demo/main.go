// Command demo runs claimscale's demo on a local control plane: a real
// kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok,
// the CRDs, and the simulated provider's samples. Run it with `make demo`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/claimscale/claimscale/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	step("starting a local control plane (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok)")
	env, err := testenv.Start(testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the control plane")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()
	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", env.KubeconfigPath}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		fmt.Printf("$ kubectl %s\n", joinArgs(args))
		return cmd.Run()
	}

	step("applying the simulated provider and its pool")
	if err := kubectl("apply", "-f", filepath.Join(root, "config", "samples", "simulated.yaml")); err != nil {
		return err
	}
	if err := kubectl("get", "nodeproviders,nodepools"); err != nil {
		return err
	}
	if err := kubectl("explain", "nodepool.spec.shapes"); err != nil {
		return err
	}
	step("done")
	return nil
}

func step(message string) { fmt.Printf("\n==> %s\n", message) }

func joinArgs(args []string) string {
	out := ""
	for i, arg := range args {
		if i > 0 {
			out += " "
		}
		out += arg
	}
	return out
}
