// Package testenv starts a local control plane for tests and the demo: a
// real kube-apiserver and etcd (controller-runtime envtest) with claimscale's
// CRDs installed, and optionally a kube-controller-manager, a kube-scheduler
// and kwok, so Deployments make pods, pods bind to the nodes claimscale makes
// and become Running. The API server accepts bootstrap tokens and kubeadm's
// bootstrap RBAC and kube-public/cluster-info are published, so a node can
// join by TLS bootstrap. Everything listens on 127.0.0.1 on ports chosen at run
// time; binaries come from bin/ (built by hack/tools.sh).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	claimscalescheme "github.com/claimscale/claimscale/internal/scheme"
)

// Options choose what runs besides the API server and etcd.
type Options struct {
	// ControllerManager starts kube-controller-manager with the controllers
	// a workload needs without kubelets: deployments, replicasets,
	// daemonsets, disruption (PDB status), garbage collection; the
	// kubelet TLS bootstrap's CSR approval and signing; and the
	// aggregation of ClusterRoles (view, edit, admin).
	ControllerManager bool
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// Kwok starts kwok, which runs the nodes annotated kwok.x-k8s.io/node=fake
	// and the pods bound to them.
	Kwok bool
	// Logs receives the output of the extra processes; nil discards it.
	Logs io.Writer
	// Verbosity is the klog level (--v) of the controller manager and the
	// scheduler: 2 logs each ReplicaSet's pod creations and deletions and
	// each binding, to tell where a slow scale-up or scale-down waits.
	Verbosity int
	// ClientQPS, when set, is the client QPS and burst of the controller
	// manager and the scheduler. Their defaults (20 and 50) make a
	// Deployment of thousands of pods a matter of minutes; kwok's own
	// tooling runs them at 5,000.
	ClientQPS int
	// CRDPaths are directories or files of CRDs to install besides
	// claimscale's (Cluster API's, a test provider's).
	CRDPaths []string
	// NodeStatusReport, when set, makes kwok's nodes behave as kubelets
	// have since node leases: a Lease renewed every 10 s and the Node's
	// status written every NodeStatusReport (a kubelet's
	// nodeStatusReportFrequency, 5 minutes by default) instead of kwok's
	// own 20–25 s. Every watcher of Nodes decodes those writes: at a
	// thousand nodes kwok's default is ten times the traffic of real
	// kubelets.
	NodeStatusReport time.Duration
}

// Environment is a running control plane.
type Environment struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a client with claimscale's kinds registered.
	Client client.Client
	// Scheme has the built-in kinds and claimscale's.
	Scheme *runtime.Scheme
	// KubeconfigPath is an administrator kubeconfig for kubectl and friends.
	KubeconfigPath string

	env       *envtest.Environment
	clientCA  *clientCA
	workDir   string
	processes []*exec.Cmd
}

// RepoRoot finds the repository root (the directory holding go.mod) from
// the working directory upwards, so tests in any package find bin/ and the
// CRDs.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "config", "crd", "bases")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no repository root (go.mod with config/crd/bases) above the working directory")
		}
		dir = parent
	}
}

// Start brings up the control plane. Call Stop when done, also on failure
// paths: it stops whatever did start.
func Start(opts Options) (*Environment, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir := filepath.Join(root, "bin")
	for _, name := range requiredBinaries(opts) {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("%s missing in %s: run `make tools` first", name, binDir)
		}
	}
	workDir, err := os.MkdirTemp("", "claimscale-testenv-")
	if err != nil {
		return nil, err
	}
	scheme := claimscalescheme.New()
	env := &envtest.Environment{
		CRDDirectoryPaths:     append([]string{filepath.Join(root, "config", "crd", "bases")}, opts.CRDPaths...),
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: binDir,
		Scheme:                scheme,
		// envtest gives each process 20 s to answer, then kills and
		// retries it; on a busy two-core machine, where go test starts
		// two control planes at once beside the compiler, kube-apiserver
		// can take longer than that to load its CRDs and be ready.
		ControlPlaneStartTimeout: 90 * time.Second,
	}
	// Without a kube-controller-manager nothing removes the not-ready taint
	// that admission puts on new nodes, and there are no service account
	// tokens to admit.
	env.ControlPlane.GetAPIServer().Configure().
		Set("disable-admission-plugins", "ServiceAccount,TaintNodesByCondition")
	// Nodes join as kubelets do: a bootstrap token, a CSR the controller
	// manager approves and signs with the client CA, then the Node created
	// under its own identity, which the Node authorizer and NodeRestriction
	// admit (kubeadm's defaults).
	ca, err := newClientCA()
	if err != nil {
		return nil, err
	}
	env.ControlPlane.GetAPIServer().SecureServing.Authn = ca
	env.ControlPlane.GetAPIServer().Configure().
		Set("enable-bootstrap-token-auth", "true").
		Set("authorization-mode", "Node,RBAC").
		Set("enable-admission-plugins", "NodeRestriction")

	e := &Environment{Scheme: scheme, env: env, workDir: workDir, clientCA: ca}
	cfg, err := env.Start()
	if err != nil {
		// envtest may have started etcd and the API server before failing
		// (on a CRD the API server refuses, say): stop what runs.
		_ = e.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	e.Config = cfg
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("building client: %w", err)
	}
	admin, err := env.AddUser(envtest.User{Name: "claimscale-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("adding admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("writing admin kubeconfig: %w", err)
	}
	e.KubeconfigPath = filepath.Join(workDir, "kubeconfig")
	if err := os.WriteFile(e.KubeconfigPath, kubeconfig, 0o600); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.publishKubeadmBootstrap(); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.startExtras(opts, binDir); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.waitForDefaultServiceAccountNamespace(); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

func requiredBinaries(opts Options) []string {
	// kubectl is no part of the control plane: the demo compiles it while
	// its cluster starts, and the tests that run it find it in bin/.
	names := []string{"kube-apiserver", "etcd"}
	if opts.ControllerManager {
		names = append(names, "kube-controller-manager")
	}
	if opts.Scheduler {
		names = append(names, "kube-scheduler")
	}
	if opts.Kwok {
		names = append(names, "kwok", "kwok-stages.yaml")
	}
	return names
}

func (e *Environment) startExtras(opts Options, binDir string) error {
	logs := opts.Logs
	if logs == nil {
		logs = io.Discard
	}
	if opts.ControllerManager {
		args := append([]string{
			"--controllers=deployment-controller,replicaset-controller,daemonset-controller,disruption-controller,garbage-collector-controller,statefulset-controller,job-controller," +
				"certificatesigningrequest-approving-controller,certificatesigningrequest-signing-controller,clusterrole-aggregation-controller," +
				// Makes the ResourceClaims of pods that ask for devices through a
				// ResourceClaimTemplate.
				"resourceclaim-controller",
			"--cluster-signing-cert-file=" + e.clientCA.certPath(),
			"--cluster-signing-key-file=" + e.clientCA.keyPath(),
			"--use-service-account-credentials=false",
			"--concurrent-deployment-syncs=10",
			"--concurrent-replicaset-syncs=10",
		}, componentFlags(opts)...)
		if err := e.startComponent(logs, filepath.Join(binDir, "kube-controller-manager"), args...); err != nil {
			return err
		}
	}
	if opts.Scheduler {
		if err := e.startComponent(logs, filepath.Join(binDir, "kube-scheduler"), componentFlags(opts)...); err != nil {
			return err
		}
	}
	if opts.Kwok {
		port, err := FreePort()
		if err != nil {
			return err
		}
		stages := filepath.Join(binDir, "kwok-stages.yaml")
		var leases []string
		if opts.NodeStatusReport > 0 {
			if stages, err = e.stagesReportingEvery(stages, opts.NodeStatusReport); err != nil {
				return err
			}
			// kube-controller-manager takes the Lease as the heartbeat.
			leases = []string{"--node-lease-duration-seconds=40"}
		}
		if err := e.startProcess(logs, filepath.Join(binDir, "kwok"), append([]string{
			"--kubeconfig=" + e.KubeconfigPath,
			"--config=" + stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
			"--node-ip=127.0.0.1",
			"--node-port=0",
			"--server-address=127.0.0.1:" + strconv.Itoa(port),
		}, leases...)...); err != nil {
			return err
		}
	}
	return nil
}

// kwokHeartbeatStage names the stage of kwok's stages (kwok-stages.yaml
// of the pinned kwok) that writes a Node's status over and over.
const kwokHeartbeatStage = "  name: node-heartbeat\n"

// kwokHeartbeatDelay is the heartbeat stage's delay.
var kwokHeartbeatDelay = regexp.MustCompile(`(?m)^    durationMilliseconds: \d+\n    jitterDurationMilliseconds: \d+$`)

// stagesReportingEvery writes a copy of kwok's stages whose node-heartbeat
// stage writes a Node's status every interval (jittered by a tenth).
func (e *Environment) stagesReportingEvery(path string, interval time.Duration) (string, error) {
	stages, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading kwok's stages: %w", err)
	}
	documents := strings.Split(string(stages), "\n---\n")
	found := false
	for i, document := range documents {
		if !strings.Contains(document, kwokHeartbeatStage) {
			continue
		}
		if !kwokHeartbeatDelay.MatchString(document) {
			return "", errors.New("kwok's node-heartbeat stage has no delay to change")
		}
		documents[i] = kwokHeartbeatDelay.ReplaceAllString(document, fmt.Sprintf("    durationMilliseconds: %d\n    jitterDurationMilliseconds: %d",
			interval.Milliseconds(), (interval+interval/10).Milliseconds()))
		found = true
	}
	if !found {
		return "", errors.New("kwok's stages have no node-heartbeat stage")
	}
	out := filepath.Join(e.workDir, "kwok-stages.yaml")
	if err := os.WriteFile(out, []byte(strings.Join(documents, "\n---\n")), 0o600); err != nil {
		return "", fmt.Errorf("writing kwok's stages: %w", err)
	}
	return out, nil
}

// startComponent starts a control-plane component (controller manager,
// scheduler) as the administrator, without leader election, serving its
// own endpoints on a free loopback port.
func (e *Environment) startComponent(logs io.Writer, path string, args ...string) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	return e.startProcess(logs, path, append([]string{
		"--kubeconfig=" + e.KubeconfigPath,
		"--authentication-kubeconfig=" + e.KubeconfigPath,
		"--authorization-kubeconfig=" + e.KubeconfigPath,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
	}, args...)...)
}

// componentFlags are the client QPS and log level flags the controller
// manager and the scheduler share.
func componentFlags(opts Options) []string {
	var flags []string
	if opts.ClientQPS > 0 {
		flags = append(flags, "--kube-api-qps="+strconv.Itoa(opts.ClientQPS), "--kube-api-burst="+strconv.Itoa(opts.ClientQPS))
	}
	if opts.Verbosity > 0 {
		flags = append(flags, "--v="+strconv.Itoa(opts.Verbosity))
	}
	return flags
}

// KwokNodeAnnotation marks a Node for kwok to run (value "fake").
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

func (e *Environment) startProcess(logs io.Writer, path string, args ...string) error {
	cmd := exec.Command(path, args...)
	cmd.Stdout = logs
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", filepath.Base(path), err)
	}
	e.processes = append(e.processes, cmd)
	return nil
}

// The controller manager's service-account controller is off, so make sure
// the default namespace exists for the tests that use it.
func (e *Environment) waitForDefaultServiceAccountNamespace() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var ns corev1.Namespace
		err := e.Client.Get(ctx, client.ObjectKey{Name: "default"}, &ns)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the default namespace: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops every process it started and removes its files.
func (e *Environment) Stop() error {
	var errs []error
	for i := len(e.processes) - 1; i >= 0; i-- {
		cmd := e.processes[i]
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	e.processes = nil
	if e.env != nil {
		if err := e.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
		}
	}
	if e.workDir != "" {
		errs = append(errs, os.RemoveAll(e.workDir))
	}
	return errors.Join(errs...)
}

// FreePort is a loopback port free now, for a process that must be told
// its port rather than choose one.
func FreePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("choosing a free port: %w", err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// Tool returns the path of bin/NAME, one of the tools hack/tools.sh builds,
// after running `hack/tools.sh NAME`: at once when the tool is cached, and
// otherwise after building it, or after waiting for the build already
// under way (`make test` builds the tools only a few tests use beside the
// tests, and each build holds a lock). So a test that needs Kueue or
// Prometheus also runs alone on a fresh machine.
func Tool(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	provide := exec.Command(filepath.Join(root, "hack", "tools.sh"), name)
	if output, err := provide.CombinedOutput(); err != nil {
		return "", fmt.Errorf("hack/tools.sh %s: %w\n%s", name, err, output)
	}
	return filepath.Join(root, "bin", name), nil
}
