package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/internal/testenv"
)

// TestUpAndDownLeaveNothingRunning runs `make up`'s and `make down`'s
// commands as a person would: up returns with the cluster running in the
// background and a kubeconfig that reaches it; down stops every process up
// started and removes its directory.
func TestUpAndDownLeaveNothingRunning(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "kube-apiserver")); err != nil {
		t.Fatalf("bin/kube-apiserver missing: run hack/tools.sh demo (make test does): %v", err)
	}
	binaries := t.TempDir()
	demo, controller := filepath.Join(binaries, "demo"), filepath.Join(binaries, "claimscale")
	for binary, pkg := range map[string]string{demo: "./hack/demo", controller: "./cmd/claimscale"} {
		build := exec.Command("go", "build", "-o", binary, pkg)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "up")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(demo, append(args, "-controller", controller)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("demo %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = exec.Command(demo, "-down", dir).Run()
		}
	})

	out := run("-up", dir)
	state, err := readUpState(dir)
	if err != nil {
		t.Fatalf("no state after up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "export KUBECONFIG="+state.Kubeconfig) || !strings.Contains(out, "make down") {
		t.Errorf("up does not say how to use the cluster:\n%s", out)
	}
	if !alive(state.PID) {
		t.Fatalf("the cluster's process %d is not running after up returned", state.PID)
	}
	started := map[string]bool{}
	for _, process := range state.Processes {
		started[filepath.Base(process.Binary)] = true
	}
	for _, want := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "claimscale"} {
		if !started[want] {
			t.Errorf("up recorded no %s process; recorded %v", want, state.Processes)
		}
	}
	kubectl := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", state.Kubeconfig, "get", "nodepools", "-o", "name")
	if pools, err := kubectl.CombinedOutput(); err != nil || !strings.Contains(string(pools), "nodepool.claimscale.io/general") {
		t.Errorf("the printed kubeconfig does not reach a cluster with the sample pool: %v\n%s", err, pools)
	}
	if again := run("-up", dir); !strings.Contains(again, "already running") {
		t.Errorf("a second up started another cluster:\n%s", again)
	}

	run("-down", dir)
	stopped = true
	if alive(state.PID) {
		t.Errorf("the cluster's process %d still runs after down", state.PID)
	}
	for _, process := range state.Processes {
		if alive(process.PID) && binaryOf(process.PID) == process.Binary {
			t.Errorf("%s (process %d) still runs after down", process.Binary, process.PID)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("down left %s behind: %v", dir, err)
	}
}
