package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// upState is what `make up` leaves in its directory for `make down` and for
// the person trying things: how to reach the cluster and what to stop.
type upState struct {
	// PID is the process that runs the cluster; SIGTERM stops it cleanly.
	PID int `json:"pid"`
	// Processes are the ones it started (etcd, kube-apiserver, the
	// controllers, kwok, claimscale), with the binary each ran, so a
	// `make down` after that process died still stops them and never a
	// process that merely reused an id.
	Processes       []upProcess `json:"processes"`
	Kubeconfig      string      `json:"kubeconfig"`
	MetricsEndpoint string      `json:"metricsEndpoint"`
	ControllerLog   string      `json:"controllerLog"`
}

type upProcess struct {
	PID    int    `json:"pid"`
	Binary string `json:"binary"`
}

const (
	stateFile = "state.json"
	// upStartTimeout bounds how long `make up` waits for the cluster.
	upStartTimeout = 3 * time.Minute
	// downTimeout is how long the cluster gets to stop by itself before
	// what is left is killed.
	downTimeout = time.Minute
)

// startInBackground starts `-serve dir` as a session of its own, so it
// outlives make, waits until it says the cluster is ready, and prints how
// to use it.
func startInBackground(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if state, err := readUpState(dir); err == nil && alive(state.PID) {
		fmt.Println("a local cluster is already running (`make down` stops it)")
		printHowToUse(state)
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, stateFile))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, "up.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	server := exec.Command(self, "-serve", dir, "-controller", controllerBinary)
	server.Stdout, server.Stderr = logFile, logFile
	server.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := server.Start(); err != nil {
		return fmt.Errorf("starting the local cluster: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	fmt.Printf("starting the local cluster in the background (log: %s)\n", logPath)
	deadline := time.After(upStartTimeout)
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for {
		if state, err := readUpState(dir); err == nil {
			printHowToUse(state)
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the local cluster stopped while starting (%v); its log %s ends:\n%s", err, logPath, tail(logPath, 20))
		case <-deadline:
			_ = server.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("the local cluster was not ready after %s; its log: %s", upStartTimeout, logPath)
		case <-ticker.C:
		}
	}
}

// serveLocalCluster runs the cluster until SIGTERM or SIGINT, then stops
// everything it started and removes its state.
func serveLocalCluster(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	local, err := startLocalCluster(ctx, dir)
	if local != nil {
		defer local.Stop()
	}
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	content, err := os.ReadFile(local.env.KubeconfigPath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, content, 0o600); err != nil {
		return err
	}
	state := upState{
		PID:             os.Getpid(),
		Processes:       childProcesses(os.Getpid()),
		Kubeconfig:      kubeconfig,
		MetricsEndpoint: "https://127.0.0.1:" + strconv.Itoa(local.metricsPort),
		ControllerLog:   local.logPath,
	}
	encoded, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return err
	}
	// Written last and whole (rename), so a reader sees a ready cluster.
	if err := os.WriteFile(filepath.Join(dir, stateFile+".tmp"), encoded, 0o600); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, stateFile+".tmp"), filepath.Join(dir, stateFile)); err != nil {
		return err
	}
	step("the local cluster is running; SIGTERM (make down) stops it")
	<-ctx.Done()
	_ = os.Remove(filepath.Join(dir, stateFile))
	_ = os.Remove(kubeconfig)
	return nil
}

// stopBackground stops the cluster `make up` started and removes its
// directory.
func stopBackground(dir string) error {
	state, err := readUpState(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no local cluster is running")
		return os.RemoveAll(dir)
	}
	if err != nil {
		return err
	}
	if alive(state.PID) {
		fmt.Printf("stopping the local cluster (process %d)\n", state.PID)
		_ = syscall.Kill(state.PID, syscall.SIGTERM)
		deadline := time.Now().Add(downTimeout)
		for alive(state.PID) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond) // polling another process's exit; nothing to wait on
		}
		if alive(state.PID) {
			_ = syscall.Kill(state.PID, syscall.SIGKILL)
		}
	}
	for _, process := range state.Processes {
		if alive(process.PID) && binaryOf(process.PID) == process.Binary {
			fmt.Printf("killing %s (process %d), left running\n", filepath.Base(process.Binary), process.PID)
			_ = syscall.Kill(process.PID, syscall.SIGKILL)
		}
	}
	fmt.Println("stopped; nothing of the local cluster is left running")
	return os.RemoveAll(dir)
}

func printHowToUse(state upState) {
	fmt.Printf(`
The local cluster runs: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler, kwok, and claimscale with the simulated provider and the
NodePool 'general' (config/samples/simulated.yaml). Controller log: %s

  export KUBECONFIG=%s
  export PATH=$PWD/bin:$PATH     # kubectl and kubectl-claimscale
  # the plugin reads the controller's decisions from its metrics endpoint:
  CS="--endpoint %s --insecure-skip-endpoint-verify"

Try:
  kubectl get nodeproviders,nodepools
  kubectl claimscale $CS simulate -f config/samples/workload.yaml   # what would it buy?
  kubectl apply -f config/samples/workload.yaml                     # 6 pods × 1 cpu
  kubectl get pods,nodeclaims,nodes -o wide
  kubectl claimscale $CS get
  kubectl claimscale $CS why pod/<a pod name>
  kubectl scale deployment web --replicas=0         # nodes go after consolidateAfter (10s)
  kubectl claimscale $CS simulate --scale-down

make down stops everything it started.
`, state.ControllerLog, state.Kubeconfig, state.MetricsEndpoint)
}

func readUpState(dir string) (upState, error) {
	var state upState
	content, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return state, err
	}
	if err := json.Unmarshal(content, &state); err != nil {
		return state, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return state, nil
}

// childProcesses are the direct children of pid, read from /proc: every
// process the local cluster starts is started by it.
func childProcesses(pid int) []upProcess {
	entries, _ := os.ReadDir("/proc")
	var children []upProcess
	for _, entry := range entries {
		child, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		// The parent id is the second field after the command name.
		if fields := procStat(child); len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			children = append(children, upProcess{PID: child, Binary: binaryOf(child)})
		}
	}
	return children
}

func binaryOf(pid int) string {
	binary, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	return binary
}

// alive says whether a process exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	// The state is the first field after the command name.
	fields := procStat(pid)
	return len(fields) > 0 && fields[0] != "Z"
}

// procStat is the fields of /proc/PID/stat after the command name, which
// is in parentheses and may hold spaces; nil when the process is gone.
func procStat(pid int) []string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
}

func tail(path string, lines int) string {
	content, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(content), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
