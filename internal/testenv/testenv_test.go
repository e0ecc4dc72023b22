package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A CRD the API server refuses fails Start after etcd and the API server
// are up; they must not outlive the failure.
func TestStartStopsWhatItStartedWhenACRDIsRefused(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	crds := filepath.Join(fake, "config", "crd", "bases")
	if err := os.MkdirAll(crds, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fake, "go.mod"), []byte("module fake\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Structurally invalid: a version without a schema.
	refused := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Cluster
  versions: [{name: v1, served: true, storage: true}]
`
	if err := os.WriteFile(filepath.Join(crds, "widgets.yaml"), []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "bin"), filepath.Join(fake, "bin")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(fake)

	env, err := Start(Options{})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start accepted a refused CRD")
	}
	if left := processesRunningFrom(t, filepath.Join(fake, "bin")); len(left) > 0 {
		t.Fatalf("still running after the failed Start: %v", left)
	}
}

// processesRunningFrom lists the command lines of processes whose binary
// lives in dir.
func processesRunningFrom(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to look for processes: %v", err)
	}
	var found []string
	for _, entry := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if command := strings.ReplaceAll(string(cmdline), "\x00", " "); strings.HasPrefix(command, dir) {
			found = append(found, command)
		}
	}
	return found
}

// kwok's nodes can report their status as kubelets do, every few minutes,
// instead of kwok's 20–25 s; its other stages stay as shipped.
func TestStagesReportingEveryChangesOnlyTheHeartbeat(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(root, "bin", "kwok-stages.yaml")
	e := &Environment{workDir: t.TempDir()}
	written, err := e.stagesReportingEvery(shipped, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(written)
	if err != nil {
		t.Fatal(err)
	}
	was, is := strings.Split(string(before), "\n---\n"), strings.Split(string(after), "\n---\n")
	if len(was) != len(is) {
		t.Fatalf("%d stages became %d", len(was), len(is))
	}
	changed := 0
	for i := range was {
		if was[i] == is[i] {
			continue
		}
		changed++
		if !strings.Contains(is[i], kwokHeartbeatStage) {
			t.Errorf("stage %d changed but is not the heartbeat:\n%s", i, is[i])
		}
		if !strings.Contains(is[i], "durationMilliseconds: 300000\n    jitterDurationMilliseconds: 330000") {
			t.Errorf("heartbeat not every 5 minutes:\n%s", is[i])
		}
	}
	if changed != 1 {
		t.Errorf("%d stages changed, want the heartbeat alone", changed)
	}
}
