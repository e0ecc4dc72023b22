package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
)

// controllerBinary, when set, is run instead of bin/claimscale.
var controllerBinary string

// localCluster is the control plane the demo and `make up` run: kube-apiserver,
// etcd, kube-controller-manager, kube-scheduler and kwok, bin/claimscale with
// the simulated provider, and config/samples/simulated.yaml applied.
type localCluster struct {
	root       string
	env        *testenv.Environment
	controller *exec.Cmd
	// logPath is the controller's log; metricsPort serves its metrics and
	// the decision records `kubectl claimscale` reads.
	logPath     string
	metricsPort int
	// kubectlBuilt is closed, with kubectlErr set, once bin/kubectl is
	// there: a fresh machine compiles it beside the running demo, since the
	// first pods need none.
	kubectlBuilt chan struct{}
	kubectlErr   error
}

// startLocalCluster starts everything and waits for the sample pool to be
// Ready. On error the returned cluster, if not nil, holds what started and
// must be stopped.
func startLocalCluster(ctx context.Context, logDir string) (*localCluster, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	kubectlBuilt, kubectlErr := make(chan struct{}), new(error)
	go func() {
		defer close(kubectlBuilt)
		*kubectlErr = buildKubectl(ctx, root, filepath.Join(logDir, "claimscale-demo-kubectl-build.log"))
	}()
	step("starting a local control plane: kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok")
	env, err := testenv.Start(testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	if err != nil {
		return nil, err
	}
	local := &localCluster{root: root, env: env, kubectlBuilt: make(chan struct{})}
	go func() {
		<-kubectlBuilt
		local.kubectlErr = *kubectlErr
		close(local.kubectlBuilt)
	}()
	kube := env.Client

	step("starting claimscale (bin/claimscale, simulated provider)")
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "claimscale-system"}}); err != nil {
		return local, err
	}
	if local.metricsPort, err = testenv.FreePort(); err != nil {
		return local, err
	}
	local.logPath = filepath.Join(logDir, "claimscale-demo.log")
	logFile, err := os.Create(local.logPath)
	if err != nil {
		return local, err
	}
	defer logFile.Close()
	binary := controllerBinary
	if binary == "" {
		binary = filepath.Join(root, "bin", "claimscale")
	}
	controller := exec.Command(binary,
		"--kubeconfig", env.KubeconfigPath, "--cluster-name", "demo", "--namespace", "claimscale-system",
		"--leader-elect=false", "--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(local.metricsPort),
		"--health-probe-bind-address", "0", "--simulated-provider")
	controller.Stdout, controller.Stderr = logFile, logFile
	if err := controller.Start(); err != nil {
		return local, fmt.Errorf("starting bin/claimscale (run `make build`): %w", err)
	}
	local.controller = controller
	fmt.Printf("controller logs: %s\n", local.logPath)

	step("applying the simulated NodeProvider and the NodePool 'general'")
	if err := applyFile(ctx, kube, filepath.Join(root, "config", "samples", "simulated.yaml")); err != nil {
		return local, err
	}
	if err := waitFor(ctx, "the pool to be Ready", func() (bool, string) {
		var pool v1alpha1.NodePool
		if err := kube.Get(ctx, client.ObjectKey{Name: "general"}, &pool); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(pool.Status.Conditions, v1alpha1.ConditionReady), ""
	}); err != nil {
		return local, err
	}
	fmt.Println("the NodeProvider 'simulated' and the NodePool 'general' are Ready")
	return local, nil
}

// applyFile creates the objects of a manifest, printing each as kubectl
// apply would; the demo starts on an empty cluster, so nothing exists yet.
func applyFile(ctx context.Context, kube client.Client, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	objects, err := testenv.DecodeManifests(data)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	fmt.Printf("$ kubectl apply -f %s\n", path)
	for _, object := range objects {
		if err := kube.Create(ctx, object); err != nil {
			return fmt.Errorf("creating %s %s from %s: %w", object.GetKind(), object.GetName(), path, err)
		}
		fmt.Printf("%s.%s/%s created\n", strings.ToLower(object.GetKind()), object.GroupVersionKind().Group, object.GetName())
	}
	return nil
}

// buildKubectl links bin/kubectl, compiling it first on a machine that
// has never built it. It runs at the lowest priority: the control plane
// and the controller must not wait for it.
func buildKubectl(ctx context.Context, root, logPath string) error {
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{filepath.Join(root, "hack", "tools.sh"), "kubectl"}
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "19"}, args...)
	}
	build := exec.CommandContext(ctx, args[0], args[1:]...)
	build.Stdout, build.Stderr = log, log
	// A demo that ends early takes the compile with it, not only the
	// script: the whole process group goes.
	build.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	build.Cancel = func() error { return syscall.Kill(-build.Process.Pid, syscall.SIGKILL) }
	if err := build.Run(); err != nil {
		return fmt.Errorf("building bin/kubectl (log: %s): %w", logPath, err)
	}
	return nil
}

// kubectl runs bin/kubectl against the cluster, printing the command.
func (l *localCluster) kubectl(ctx context.Context) func(args ...string) error {
	return func(args ...string) error {
		select {
		case <-l.kubectlBuilt:
		case <-ctx.Done():
			return ctx.Err()
		default:
			fmt.Println("(waiting for bin/kubectl, which this machine compiles for the first time)")
			select {
			case <-l.kubectlBuilt:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if l.kubectlErr != nil {
			return l.kubectlErr
		}
		cmd := exec.CommandContext(ctx, filepath.Join(l.root, "bin", "kubectl"), append([]string{"--kubeconfig", l.env.KubeconfigPath}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
		return cmd.Run()
	}
}

// Stop ends the controller, then the control plane, and removes their files.
func (l *localCluster) Stop() {
	step("stopping the control plane")
	if l.controller != nil {
		_ = l.controller.Process.Signal(os.Interrupt)
		_ = l.controller.Wait()
	}
	if err := l.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
	}
}
