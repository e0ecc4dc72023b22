// Command scale measures claimscale on a cluster of thousands of pods: it
// starts the local control plane (kube-apiserver, etcd,
// kube-controller-manager and kube-scheduler at client QPS 5,000 as kwok's
// own tooling runs them, kwok with nodes that report as kubelets do), runs
// bin/claimscale with the simulated provider as a process of its own so
// its memory and CPU can be read (the simulated machines' kubelets join
// from this program, as real ones join from their machines), applies N
// pods in M Deployments (two with a zone spread) to one pool of one
// 8 cpu / 32 Gi shape, scales them to zero, and prints what a user of a large cluster asks: how long, how
// many nodes against the lower bound, how much memory and CPU, how many
// errors and conflicts, how long the scale-down took. Run it with `make scale` (SCALE_FLAGS="-pods 10000").
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/internal/memlimit"
	"github.com/claimscale/claimscale/internal/testenv"
)

// The controller's namespace and cluster name, which the simulated
// kubelets must share to find its machines.
const (
	controllerNamespace = "claimscale-system"
	clusterName         = "scale"
)

type options struct {
	pods, deployments, spread int
	podCPU, podMemory         string
	shapeCPU, shapeMemory     string
	consolidateAfter          time.Duration
	budget                    string
	idleWindow                time.Duration
	nodeStatusReport          time.Duration
	timeout                   time.Duration
	controllerFlags           string
	controllerEnv             string
	controllerPath            string
	memoryLimit               string
	keepLogs                  bool
	controlPlaneLog           string
	controlPlaneVerbosity     int
	kubeletsInController      bool
}

func main() {
	var opts options
	flag.IntVar(&opts.pods, "pods", 1000, "pods in all, split evenly over the Deployments")
	flag.IntVar(&opts.deployments, "deployments", 10, "Deployments")
	flag.IntVar(&opts.spread, "spread", 2, "how many of the Deployments spread their pods over the zones (maxSkew 1)")
	flag.StringVar(&opts.podCPU, "pod-cpu", "800m", "cpu request of each pod")
	flag.StringVar(&opts.podMemory, "pod-memory", "1Gi", "memory request of each pod")
	flag.StringVar(&opts.shapeCPU, "shape-cpu", "8", "cpu of the pool's one shape")
	flag.StringVar(&opts.shapeMemory, "shape-memory", "32Gi", "memory of the pool's one shape")
	flag.DurationVar(&opts.consolidateAfter, "consolidate-after", 30*time.Second, "the pool's consolidateAfter")
	flag.StringVar(&opts.budget, "budget", "20%", "the pool's disruption budget")
	flag.DurationVar(&opts.nodeStatusReport, "node-status-report", 5*time.Minute, "how often kwok writes each Node's status, renewing a Lease every 10 s meanwhile, as a kubelet's nodeStatusReportFrequency; 0: kwok's own 20–25 s without Leases")
	flag.DurationVar(&opts.idleWindow, "idle-window", 20*time.Second, "how long the controller's CPU is measured with every pod Running and nothing to do")
	flag.DurationVar(&opts.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.StringVar(&opts.controllerPath, "controller", "bin/claimscale", "the controller binary, relative to the repository root (another build, to compare)")
	flag.StringVar(&opts.controllerFlags, "controller-flags", "", "more flags for bin/claimscale, space-separated")
	flag.StringVar(&opts.controllerEnv, "controller-env", "", "more environment for bin/claimscale only (not the control plane), NAME=value space-separated, e.g. GOGC=50")
	flag.StringVar(&opts.memoryLimit, "memory-limit", "", "run the controller as the chart does under resources.limits.memory of this size (e.g. 200Mi): handed over as the chart hands it, the controller sets its Go memory limit from it; empty: no limit")
	flag.BoolVar(&opts.keepLogs, "keep-logs", true, "keep the controller's log file")
	flag.StringVar(&opts.controlPlaneLog, "control-plane-log", "", "write the output of kube-controller-manager, kube-scheduler and kwok to this file; empty: discard it")
	flag.IntVar(&opts.controlPlaneVerbosity, "control-plane-v", 0, "klog level of kube-controller-manager and kube-scheduler (2: every ReplicaSet's pod creations and deletions, every binding)")
	flag.BoolVar(&opts.kubeletsInController, "kubelets-in-controller", false, "play the simulated machines' kubelets inside the controller, as the demo and the chart do, so their joins count as the controller's memory and CPU; by default this program plays them, as real kubelets run on their machines")
	flag.Parse()
	// The watcher's informers log through controller-runtime; their
	// retries are not this program's output.
	ctrllog.SetLogger(logr.Discard())
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	if opts.pods <= 0 || opts.deployments <= 0 || opts.pods < opts.deployments {
		return fmt.Errorf("need at least one pod per Deployment, got -pods %d -deployments %d", opts.pods, opts.deployments)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()

	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	statusEvery := "20–25 s, kwok's own"
	if opts.nodeStatusReport > 0 {
		statusEvery = opts.nodeStatusReport.String() + " and a Lease every 10 s, as kubelets"
	}
	logf("starting the control plane: kube-apiserver, etcd, kube-controller-manager and kube-scheduler at client QPS 5000, kwok (node status every %s)", statusEvery)
	envOpts := testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, ClientQPS: 5000, NodeStatusReport: opts.nodeStatusReport, Verbosity: opts.controlPlaneVerbosity}
	if opts.controlPlaneLog != "" {
		controlPlaneLog, err := os.Create(opts.controlPlaneLog)
		if err != nil {
			return fmt.Errorf("creating the control plane's log: %w", err)
		}
		defer controlPlaneLog.Close()
		envOpts.Logs = controlPlaneLog
	}
	env, err := testenv.Start(envOpts)
	if err != nil {
		return err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "scale: stopping the control plane:", err)
		}
	}()
	kubectl := func(stdin string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", env.KubeconfigPath}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out, nil
	}
	if _, err := kubectl("", "create", "namespace", controllerNamespace); err != nil {
		return err
	}

	ctl, err := startController(ctx, root, env.KubeconfigPath, opts)
	if err != nil {
		return err
	}
	defer ctl.stop()
	go ctl.sampleAnon(ctx)
	if !opts.kubeletsInController {
		go func() {
			if err := runKubelets(ctx, env.Config, env.Scheme, controllerNamespace, clusterName); err != nil {
				logf("the simulated kubelets stopped: %v", err)
			}
		}()
	}
	logf("controller pid %d, log %s, kubeconfig %s", ctl.cmd.Process.Pid, ctl.logPath, env.KubeconfigPath)

	if _, err := kubectl(poolManifest(opts), "apply", "-f", "-"); err != nil {
		return err
	}
	if err := waitFor(ctx, "the pool to be Ready", func() (bool, error) {
		out, err := kubectl("", "get", "nodepool", "scale", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return string(out) == "True", err
	}); err != nil {
		return err
	}

	w := newWatcher(env, opts.consolidateAfter)
	go w.run(ctx)

	r := &result{opts: opts}
	applied := time.Now()
	logf("applying %d pods in %d Deployments", opts.pods, opts.deployments)
	if _, err := kubectl(deploymentsManifest(opts), "apply", "-f", "-"); err != nil {
		return err
	}
	if err := waitFor(ctx, "the first claim", func() (bool, error) { return w.snapshot().claimsSeen > 0, nil }); err != nil {
		return err
	}
	r.firstClaim = time.Since(applied)
	// A pod kwok missed is only told from one kwok has not got to yet
	// once nothing has started for a while.
	lastRunning, lastStarted := 0, time.Now()
	if err := waitFor(ctx, "every pod Running", func() (bool, error) {
		s := w.snapshot()
		logProgress(applied, s)
		if s.running != lastRunning {
			lastRunning, lastStarted = s.running, time.Now()
		} else if time.Since(lastStarted) >= time.Minute {
			r.kwokMissed += pokeMissedByKwok(ctx, env.Client, w)
			lastStarted = time.Now()
		}
		return s.running == opts.pods, nil
	}); err != nil {
		return err
	}
	r.allRunning = time.Since(applied)
	// The last claims of a batch may still be launching for pods the
	// scheduler placed elsewhere meanwhile: count once nothing launches.
	if err := waitFor(ctx, "no claim launching", func() (bool, error) {
		s := w.snapshot()
		return s.claims == s.nodes, nil
	}); err != nil {
		return err
	}
	up := w.snapshot()
	r.claims, r.lowerBound, r.partlyFilled, r.perNode, r.going = up.claims, up.lowerBound, up.partlyFilled, up.perNode, up.going

	// Consolidation may still act on what scale-up left (a last, partly
	// filled node, nodes whose pods moved), and looks at each node once its
	// pods have stayed for consolidateAfter: idle is once no claim has
	// come, gone or been written for longer than consolidateAfter.
	quietFor := opts.consolidateAfter + 15*time.Second
	logf("waiting until no claim has come, gone or changed for %s", quietFor)
	last, lastChange := w.snapshot(), time.Now()
	if err := waitFor(ctx, "a quiet cluster", func() (bool, error) {
		s := w.snapshot()
		if s.claims != last.claims || s.claimsSeen != last.claimsSeen || s.nodes != last.nodes || s.claimWrites != last.claimWrites {
			last, lastChange = s, time.Now()
		}
		return time.Since(lastChange) >= quietFor, nil
	}); err != nil {
		return err
	}
	// Counted now, not from the last snapshot that saw a claim change:
	// pods may have come or gone since without any claim changing.
	settled := w.snapshot()
	r.settledClaims, r.settledPartlyFilled = settled.claims, settled.partlyFilled
	logf("measuring the controller's CPU for %s with nothing to do (%d nodes)", opts.idleWindow, last.nodes)
	r.idleNodes = last.nodes
	cpuBefore, err := ctl.cpuSeconds()
	if err != nil {
		return err
	}
	reconcilesBefore, err := ctl.reconciles()
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(opts.idleWindow):
	}
	cpuAfter, err := ctl.cpuSeconds()
	if err != nil {
		return err
	}
	reconcilesAfter, err := ctl.reconciles()
	if err != nil {
		return err
	}
	r.idleReconciles = perSecond(reconcilesBefore, reconcilesAfter, opts.idleWindow)
	r.idleCores = (cpuAfter - cpuBefore) / opts.idleWindow.Seconds()

	logf("scaling every Deployment to 0")
	// The first removal is the first of the nodes there are now to go: a
	// node consolidation adds meanwhile (a replacement) must not hide it,
	// as counting the nodes did.
	before := w.nodeNames()
	// One call for every Deployment, as a user scaling an application
	// down would: ten calls one after another spread the scale-down over
	// seconds, and no node empties before the last Deployment's turn.
	scale := []string{"scale", "--replicas=0"}
	for i := range opts.deployments {
		scale = append(scale, "deployment/"+deploymentName(i))
	}
	scaledDown := time.Now()
	if _, err := kubectl("", scale...); err != nil {
		return err
	}
	if err := waitFor(ctx, "the first node removed", func() (bool, error) {
		s := w.snapshot()
		logProgress(scaledDown, s)
		return w.anyGone(before), nil
	}); err != nil {
		return err
	}
	r.firstRemoved = time.Since(scaledDown)
	if err := waitFor(ctx, "every node removed", func() (bool, error) {
		s := w.snapshot()
		logProgress(scaledDown, s)
		return s.nodes == 0 && s.claims == 0, nil
	}); err != nil {
		return err
	}
	r.allRemoved = time.Since(scaledDown)
	if emptied, ok := w.emptied.firstEmptiedAfter(scaledDown); ok {
		r.firstEmptied = emptied.Sub(scaledDown)
	}
	r.removalDelayMedian, r.removalDelayMax, r.emptiedRemoved = w.emptied.removalDelays()

	end := w.snapshot()
	r.claimsMade, r.nodesMade = end.claimsSeen, end.nodesSeen
	if r.launched, err = ctl.launchedTotal(); err != nil {
		return err
	}
	if r.peakRSS, err = ctl.peakRSS(); err != nil {
		return err
	}
	r.peakAnon = ctl.peakAnon.Load()
	if r.totalCPU, err = ctl.cpuSeconds(); err != nil {
		return err
	}
	if r.errorLines, r.conflictLines, err = ctl.countLogLines(); err != nil {
		return err
	}
	r.print(os.Stdout)
	return nil
}

func poolManifest(opts options) string {
	return fmt.Sprintf(`apiVersion: claimscale.io/v1alpha1
kind: NodeProvider
metadata:
  name: simulated
spec:
  type: simulated
  simulated:
    bootDelay: 2s
    zones: [zone-a, zone-b]
---
apiVersion: claimscale.io/v1alpha1
kind: NodePool
metadata:
  name: scale
spec:
  providerRef:
    name: simulated
  template:
    kubelet:
      maxPods: 110
  shapes:
    fixed:
      - name: large
        cpu: %q
        memory: %s
        price: "0.20"
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: %s
    budgets:
      - nodes: %q
`, opts.shapeCPU, opts.shapeMemory, opts.consolidateAfter, opts.budget)
}

func deploymentName(i int) string { return fmt.Sprintf("scale-%02d", i) }

func deploymentsManifest(opts options) string {
	var b strings.Builder
	for i := range opts.deployments {
		replicas := opts.pods / opts.deployments
		if i < opts.pods%opts.deployments {
			replicas++
		}
		name := deploymentName(i)
		spread := ""
		if i < opts.spread {
			spread = fmt.Sprintf(`
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels: {app: %s}`, name)
		}
		fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  namespace: default
spec:
  replicas: %[2]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: app
          image: registry.example/scale:1
          resources:
            requests: {cpu: %[3]s, memory: %[4]s}%[5]s
`, name, replicas, opts.podCPU, opts.podMemory, spread)
	}
	return b.String()
}

// controller is bin/claimscale running as a process of its own.
type controller struct {
	cmd         *exec.Cmd
	logPath     string
	metricsAddr string
	keepLogs    bool
	// peakAnon is the most anonymous resident memory seen (the heap,
	// stacks and the runtime's own); the kernel keeps no high-water mark
	// of it, so it is sampled.
	peakAnon atomic.Int64
}

// sampleAnon samples the controller's anonymous resident memory every
// 200 ms until ctx ends. RSS is that and the binary's mapped code, about
// 60 MiB of which is resident whatever the cluster's size.
func (c *controller) sampleAnon(ctx context.Context) {
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		if anon, err := c.statusField("RssAnon:"); err == nil && anon > c.peakAnon.Load() {
			c.peakAnon.Store(anon)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func startController(ctx context.Context, root, kubeconfig string, opts options) (*controller, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.CreateTemp("", "claimscale-scale-*.log")
	if err != nil {
		return nil, err
	}
	c := &controller{logPath: logFile.Name(), metricsAddr: "127.0.0.1:" + strconv.Itoa(port), keepLogs: opts.keepLogs}
	args := []string{"--kubeconfig", kubeconfig, "--cluster-name", clusterName, "--namespace", controllerNamespace,
		"--leader-elect=false", "--metrics-bind-address", c.metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address", "0", "--simulated-provider"}
	if !opts.kubeletsInController {
		args = append(args, "--simulated-kubelets=false")
	}
	args = append(args, strings.Fields(opts.controllerFlags)...)
	path := opts.controllerPath
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	c.cmd = exec.CommandContext(ctx, path, args...)
	c.cmd.Env = append(os.Environ(), strings.Fields(opts.controllerEnv)...)
	if opts.memoryLimit != "" {
		// What the chart's resourceFieldRef hands the container: the
		// limit in bytes.
		limit, err := resource.ParseQuantity(opts.memoryLimit)
		if err != nil {
			return nil, fmt.Errorf("-memory-limit: %w", err)
		}
		c.cmd.Env = append(c.cmd.Env, memlimit.EnvContainerLimit+"="+strconv.FormatInt(limit.Value(), 10))
	}
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	c.cmd.Cancel = func() error { return c.cmd.Process.Signal(os.Interrupt) }
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (run `make build`): %w", path, err)
	}
	logFile.Close()
	return c, nil
}

func (c *controller) stop() {
	_ = c.cmd.Process.Signal(os.Interrupt)
	_ = c.cmd.Wait()
	if !c.keepLogs {
		_ = os.Remove(c.logPath)
	}
}

// peakRSS is the process's high-water mark of resident memory (VmHWM).
func (c *controller) peakRSS() (int64, error) { return c.statusField("VmHWM:") }

// statusField reads a memory figure of /proc/<pid>/status, in bytes.
func (c *controller) statusField(name string) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the controller's memory: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/<pid>/status", name)
}

// cpuSeconds is the user and system CPU the process has used.
func (c *controller) cpuSeconds() (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the controller's CPU: %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after it. utime and stime are fields 14 and 15 of proc(5).
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 13 {
		return 0, errors.New("short /proc/<pid>/stat")
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	// USER_HZ is 100 on every Linux this runs on.
	return (utime + stime) / 100, nil
}

// launchedTotal sums claimscale_nodeclaims_launched_total over its labels.
func (c *controller) launchedTotal() (float64, error) {
	totals, err := c.sums("claimscale_nodeclaims_launched_total", "")
	return totals[""], err
}

// reconciles counts each controller's reconciles so far.
func (c *controller) reconciles() (map[string]float64, error) {
	return c.sums("controller_runtime_reconcile_total", "controller")
}

// sums adds up a metric's samples by the value of one label ("" for all).
func (c *controller) sums(metric, label string) (map[string]float64, error) {
	resp, err := http.Get("http://" + c.metricsAddr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("reading the controller's metrics: %w", err)
	}
	defer resp.Body.Close()
	totals := map[string]float64{}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		value, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("reading %q: %w", line, err)
		}
		key := ""
		if label != "" {
			if i := strings.Index(line, label+`="`); i >= 0 {
				rest := line[i+len(label)+2:]
				key = rest[:strings.IndexByte(rest, '"')]
			}
		}
		totals[key] += value
	}
	return totals, scanner.Err()
}

// perSecond lists the counters that grew between two readings, as rates,
// largest first.
func perSecond(before, after map[string]float64, window time.Duration) string {
	type rate struct {
		name string
		rate float64
	}
	var rates []rate
	for name, value := range after {
		if grown := value - before[name]; grown > 0 {
			rates = append(rates, rate{name, grown / window.Seconds()})
		}
	}
	if len(rates) == 0 {
		return "none"
	}
	sort.Slice(rates, func(i, j int) bool { return rates[i].rate > rates[j].rate })
	var parts []string
	for _, r := range rates {
		parts = append(parts, fmt.Sprintf("%s %.1f/s", r.name, r.rate))
	}
	return strings.Join(parts, ", ")
}

// countLogLines counts the error-level lines of the controller's log and
// the lines that report a write conflict (at any level).
func (c *controller) countLogLines() (errorLines, conflictLines int, err error) {
	f, err := os.Open(c.logPath)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	reader := bufio.NewReader(f)
	for {
		line, err := reader.ReadString('\n')
		if strings.Contains(line, `"level":"error"`) {
			errorLines++
		}
		if strings.Contains(line, "the object has been modified") || strings.Contains(line, "Conflict") {
			conflictLines++
		}
		if err == io.EOF {
			return errorLines, conflictLines, nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
}

type result struct {
	opts                             options
	firstClaim, allRunning           time.Duration
	claims, lowerBound, partlyFilled int
	perNode, going                   int
	// settled… are counted once consolidation has had its say, as the
	// idle measurement starts.
	settledClaims, settledPartlyFilled int
	// kwokMissed counts the pods kwok left Pending on their node until
	// touched (watcher.missedByKwok).
	kwokMissed               int
	idleCores, totalCPU      float64
	idleNodes                int
	idleReconciles           string
	firstRemoved, allRemoved time.Duration
	// firstEmptied is when the first node lost its last pod after the
	// scale-down; the removal delays, over the emptiedRemoved nodes
	// removed with no pod left, are what came after consolidateAfter
	// allowed each to go (emptiedNodes).
	firstEmptied                        time.Duration
	removalDelayMedian, removalDelayMax time.Duration
	emptiedRemoved                      int
	claimsMade, nodesMade               int
	launched                            float64
	peakRSS, peakAnon                   int64
	errorLines, conflictLines           int
}

func (r *result) print(out io.Writer) {
	fmt.Fprintf(out, "\n%d pods of %s cpu / %s in %d Deployments (%d spread over 2 zones), one %s cpu / %s shape, consolidateAfter %s, budget %s\n\n",
		r.opts.pods, r.opts.podCPU, r.opts.podMemory, r.opts.deployments, min(r.opts.spread, r.opts.deployments),
		r.opts.shapeCPU, r.opts.shapeMemory, r.opts.consolidateAfter, r.opts.budget)
	if r.opts.memoryLimit != "" {
		fmt.Fprintf(out, "controller under a %s memory limit (handed over as the chart does)\n\n", r.opts.memoryLimit)
	}
	if r.opts.kubeletsInController {
		fmt.Fprint(out, "simulated kubelets joining inside the controller: their TLS handshakes count as its memory and CPU\n\n")
	}
	if r.opts.controllerEnv != "" {
		fmt.Fprintf(out, "controller environment: %s\n\n", r.opts.controllerEnv)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "| figure\t| value\t|")
	fmt.Fprintln(w, "|---\t|---\t|")
	row := func(name, format string, args ...any) {
		fmt.Fprintf(w, "| %s\t| %s\t|\n", name, fmt.Sprintf(format, args...))
	}
	row("apply → first claim", "%s", seconds(r.firstClaim))
	row("apply → all pods Running", "%s", seconds(r.allRunning))
	row("claims vs the lower bound", "%d vs %d (%+.1f %%), %d of them being removed", r.claims, r.lowerBound, 100*float64(r.claims-r.lowerBound)/float64(r.lowerBound), r.going)
	row("nodes left partly filled", "%d (fewer than %d pods)", r.partlyFilled, r.perNode)
	row("once consolidation settled: claims / partly filled", "%d / %d", r.settledClaims, r.settledPartlyFilled)
	row("pods kwok left Pending until touched", "%d", r.kwokMissed)
	row("controller peak RSS", "%d MiB (anonymous %d MiB, the rest mapped code)", r.peakRSS>>20, r.peakAnon>>20)
	row("controller CPU, whole run", "%.1f s", r.totalCPU)
	row("controller CPU, idle", "%.3f cores over %s at %d nodes", r.idleCores, r.opts.idleWindow, r.idleNodes)
	row("reconciles while idle", "%s", r.idleReconciles)
	row("error-level log lines", "%d", r.errorLines)
	row("log lines about conflicts", "%d", r.conflictLines)
	row("nodeclaims_launched_total / claims made / nodes made", "%.0f / %d / %d", r.launched, r.claimsMade, r.nodesMade)
	row("scaled to 0 → first node removed", "%s", seconds(r.firstRemoved))
	row("→ all nodes removed", "%s", seconds(r.allRemoved))
	row("scaled to 0 → first node emptied (its last pod gone)", "%s", seconds(r.firstEmptied))
	row("emptied node → claim deleted, past consolidateAfter", "median %s, largest %s, over %d nodes", seconds(r.removalDelayMedian), seconds(r.removalDelayMax), r.emptiedRemoved)
	_ = w.Flush()
}

func seconds(d time.Duration) string {
	if d >= time.Minute {
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(math.Mod(d.Seconds(), 60)))
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

var lastProgress time.Time

func logProgress(since time.Time, s snapshot) {
	if time.Since(lastProgress) < 10*time.Second {
		return
	}
	lastProgress = time.Now()
	logf("%6.0fs  pods %d running / %d pending / %d terminating  claims %d  nodes %d (%d empty)", time.Since(since).Seconds(), s.running, s.pending, s.terminating, s.claims, s.nodes, s.empty)
}

func waitFor(ctx context.Context, what string, done func() (bool, error)) error {
	for {
		ok, err := done()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// pokeMissedByKwok annotates the pods kwok missed (watcher.missedByKwok),
// which kwok then plays, and says how many there were. It is called once
// no pod has started for a minute: under load kwok takes that long to
// start pods it has not missed.
func pokeMissedByKwok(ctx context.Context, kube client.Client, w *watcher) int {
	missed := w.missedByKwok(time.Minute)
	for _, pod := range missed {
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations["scale.claimscale.io/missed-by-kwok"] = time.Now().UTC().Format(time.RFC3339)
		if err := kube.Patch(ctx, pod, patch); err != nil {
			logf("touching pod %s, which kwok left Pending: %v", pod.Name, err)
		}
	}
	if len(missed) > 0 {
		logf("touched %d pods bound for over a minute that kwok left Pending", len(missed))
	}
	return len(missed)
}
