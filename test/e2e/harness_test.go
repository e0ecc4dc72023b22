package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/externalgrpc"
	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/simulated"
)

func init() {
	// The controllers' logs go to stderr with E2E_LOGS set, for debugging,
	// and to whatever a test taps.
	if os.Getenv("E2E_LOGS") != "" {
		controllerLogs.tap(os.Stderr)
	}
	log.SetLogger(zap.New(zap.WriteTo(controllerLogs), zap.UseDevMode(true)))
}

// controllerLogs receives every log line of the in-process controllers.
var controllerLogs = &logTee{}

// logTee copies writes to the writers tapped into it.
type logTee struct {
	mu      sync.Mutex
	writers []io.Writer
}

func (l *logTee) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.writers {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

func (l *logTee) tap(w io.Writer) (untap func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writers = append(l.writers, w)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.writers = slices.DeleteFunc(l.writers, func(have io.Writer) bool { return have == w })
	}
}

// lockedBuffer is a buffer safe to write from the controllers and read
// from the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tapControllerLogs collects the controllers' logs until the test ends.
func tapControllerLogs(t *testing.T) *lockedBuffer {
	buf := &lockedBuffer{}
	t.Cleanup(controllerLogs.tap(buf))
	return buf
}

// operatorOptions tune the in-process controllers per test.
type operatorOptions struct {
	registry      *provider.Registry
	gcGracePeriod time.Duration
	// config reaches the API server; nil is the administrator's.
	config *rest.Config
	// leaderElection on, with its lease in the controller's namespace.
	leaderElection bool
	// mode is native unless set; externalGRPC configures the server of
	// the externalgrpc mode.
	mode         operator.Mode
	externalGRPC externalgrpc.Options
	// capacityClock times capacity backoffs; nil is the real clock.
	capacityClock clock.Clock
	// warmCapacityClock decides which capacity schedules are active; nil
	// is the real clock.
	warmCapacityClock clock.PassiveClock
	// metricsAddress serves metrics and decisions there over HTTPS to
	// authorized callers, as deployed; empty serves none.
	metricsAddress string
	// dryRun decides without acting.
	dryRun bool
	// simulatedKubeletsElsewhere leaves the simulated machines' Nodes to
	// a registrar the test runs, as make scale's controller does.
	simulatedKubeletsElsewhere bool
}

// startOperator runs claimscale's controllers against the test control
// plane until the returned stop function is called (or the test ends).
func startOperator(t *testing.T, opts operatorOptions) (stop func()) {
	t.Helper()
	if opts.registry == nil {
		opts.registry = operator.DefaultRegistry(env.Client)
	}
	if opts.gcGracePeriod == 0 {
		opts.gcGracePeriod = time.Minute
	}
	if opts.config == nil {
		opts.config = env.Config
	}
	if opts.mode == "" {
		opts.mode = operator.ModeNative
	}
	metrics := metricsserver.Options{BindAddress: "0"}
	if opts.metricsAddress != "" {
		metrics = operator.MetricsOptions(opts.metricsAddress, true)
	}
	mgr, err := ctrl.NewManager(opts.config, ctrl.Options{
		Scheme:                  scheme.New(),
		Cache:                   operator.CacheOptions(controllerNamespace),
		LeaderElection:          opts.leaderElection,
		LeaderElectionID:        "claimscale-" + clusterName,
		LeaderElectionNamespace: controllerNamespace,
		Metrics:                 metrics,
		HealthProbeBindAddress:  "0",
		// Each test starts its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := operator.Setup(ctx, mgr, operator.Options{
		Mode: opts.mode, ClusterName: clusterName, Namespace: controllerNamespace,
		BatchIdle: 500 * time.Millisecond, BatchMax: 3 * time.Second,
		GCInterval: time.Second, GCGracePeriod: opts.gcGracePeriod,
		Registry: opts.registry, ExternalGRPC: opts.externalGRPC,
		CapacityClock: opts.capacityClock, WarmCapacityClock: opts.warmCapacityClock,
		ExternalScalerInterval:     250 * time.Millisecond,
		DryRun:                     opts.dryRun,
		SimulatedKubeletsElsewhere: opts.simulatedKubeletsElsewhere,
	}); err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// scenario holds one test's provider, pool and namespace, all named after
// the test so tests never see each other's objects.
type scenario struct {
	t         *testing.T
	g         *WithT
	name      string
	namespace string
	ctx       context.Context
}

func newScenario(t *testing.T, name string) *scenario {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	s := &scenario{t: t, g: g, name: name, namespace: name, ctx: context.Background()}
	g.Expect(env.Client.Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return s
}

// createProvider makes the scenario's simulated NodeProvider.
func (s *scenario) createProvider(settings v1alpha1.SimulatedSettings) {
	if settings.BootDelay == nil {
		settings.BootDelay = &metav1.Duration{Duration: time.Second}
	}
	s.g.Expect(env.Client.Create(s.ctx, &v1alpha1.NodeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Spec:       v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &settings},
	})).To(Succeed())
}

// createPool makes the scenario's pool; mutate adjusts the defaults: one
// shape of 4 cpu and 16Gi, nodes removed 5s after they empty.
func (s *scenario) createPool(mutate func(*v1alpha1.NodePool)) *v1alpha1.NodePool {
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: s.name},
			Template: v1alpha1.NodeTemplate{
				Labels: map[string]string{"scenario": s.name},
			},
			Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "c4", CPU: qty("4"), Memory: qty("16Gi"), Price: "0.1"},
			}},
			Limits: &v1alpha1.Limits{Nodes: ptr(int32(20))},
			Disruption: v1alpha1.Disruption{
				ConsolidationPolicy: v1alpha1.ConsolidationWhenEmpty,
				ConsolidateAfter:    &metav1.Duration{Duration: 5 * time.Second},
				Budgets:             []v1alpha1.Budget{{Nodes: "100%"}},
			},
		},
	}
	if mutate != nil {
		mutate(pool)
	}
	s.g.Expect(env.Client.Create(s.ctx, pool)).To(Succeed())
	return pool
}

// createDeployment makes a Deployment whose pods land only on the
// scenario's pool (by its template label) and request cpu each.
func (s *scenario) createDeployment(name string, replicas int32, cpu string, mutate func(*appsv1.Deployment)) *appsv1.Deployment {
	deployment := s.deploymentObject(name, replicas, cpu)
	if mutate != nil {
		mutate(deployment)
	}
	s.g.Expect(env.Client.Create(s.ctx, deployment)).To(Succeed())
	return deployment
}

// deploymentObject is the Deployment createDeployment makes, unwritten.
func (s *scenario) deploymentObject(name string, replicas int32, cpu string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	deployment := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"scenario": s.name},
					Tolerations:  []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "app", Image: "registry.example/app:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi"),
						}},
					}},
				},
			},
		},
	}
	return deployment
}

func (s *scenario) scale(deployment *appsv1.Deployment, replicas int32) {
	s.g.Eventually(func() error {
		if err := env.Client.Get(s.ctx, client.ObjectKeyFromObject(deployment), deployment); err != nil {
			return err
		}
		deployment.Spec.Replicas = ptr(replicas)
		return env.Client.Update(s.ctx, deployment)
	}).Should(Succeed())
}

// claims returns the scenario pool's claims.
func (s *scenario) claims() []v1alpha1.NodeClaim {
	var list v1alpha1.NodeClaimList
	s.g.Expect(env.Client.List(s.ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: s.name})).To(Succeed())
	return list.Items
}

// nodes returns the scenario pool's nodes.
func (s *scenario) nodes() []corev1.Node {
	var list corev1.NodeList
	s.g.Expect(env.Client.List(s.ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: s.name})).To(Succeed())
	return list.Items
}

// machines returns the simulated machines of the scenario's pool.
func (s *scenario) machines() []corev1.ConfigMap {
	return machinesOf(s.g, client.MatchingLabels{simulated.LabelMachine: "true", v1alpha1.TagNodePool: s.name})
}

func machinesOf(g *WithT, selector client.MatchingLabels) []corev1.ConfigMap {
	var list corev1.ConfigMapList
	g.Expect(env.Client.List(context.Background(), &list, client.InNamespace(controllerNamespace), selector)).To(Succeed())
	return list.Items
}

// pods returns the pods of the scenario's namespace with a label app=name.
func (s *scenario) pods(app string) []corev1.Pod {
	var list corev1.PodList
	s.g.Expect(env.Client.List(s.ctx, &list, client.InNamespace(s.namespace), client.MatchingLabels{"app": app})).To(Succeed())
	return list.Items
}

// runningPods counts the pods of an app that are Running on a node.
func (s *scenario) runningPods(app string) int {
	running := 0
	for _, pod := range s.pods(app) {
		if pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero() {
			running++
		}
	}
	return running
}

// readyClaims counts the pool's claims with Ready=True.
func (s *scenario) readyClaims() int {
	ready := 0
	for _, claim := range s.claims() {
		for _, condition := range claim.Status.Conditions {
			if condition.Type == v1alpha1.ConditionReady && condition.Status == metav1.ConditionTrue {
				ready++
			}
		}
	}
	return ready
}

// cleanup removes the scenario's workloads and waits until the pool has
// no claims, nodes or machines left, then removes the pool and provider.
func (s *scenario) cleanup() {
	s.t.Helper()
	g := s.g
	g.Expect(client.IgnoreNotFound(env.Client.Delete(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.namespace}}))).To(Succeed())
	var deployments appsv1.DeploymentList
	g.Expect(env.Client.List(s.ctx, &deployments, client.InNamespace(s.namespace))).To(Succeed())
	for i := range deployments.Items {
		g.Expect(client.IgnoreNotFound(env.Client.Delete(s.ctx, &deployments.Items[i]))).To(Succeed())
	}
	for _, claim := range s.claims() {
		g.Expect(client.IgnoreNotFound(env.Client.Delete(s.ctx, &claim))).To(Succeed())
	}
	g.Eventually(func() int { return len(s.claims()) + len(s.nodes()) + len(s.machines()) }).Should(BeZero(),
		"claims, nodes and machines of pool %s left after cleanup", s.name)
	g.Expect(client.IgnoreNotFound(env.Client.Delete(s.ctx, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: s.name}}))).To(Succeed())
	g.Expect(client.IgnoreNotFound(env.Client.Delete(s.ctx, &v1alpha1.NodeProvider{ObjectMeta: metav1.ObjectMeta{Name: s.name}}))).To(Succeed())
}

// grantClusterRole makes role and binds it, under its own name, to the
// ServiceAccount account of the controller's namespace, both removed when
// the test ends.
func grantClusterRole(ctx context.Context, t *testing.T, role *rbacv1.ClusterRole, account string) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: controllerNamespace}},
	}
	for _, object := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, object); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), object) })
	}
}

// eventsOf returns the reasons and notes of the events about an object.
func eventsOf(g *WithT, kind, name string) []string {
	var list corev1.EventList
	g.Expect(env.Client.List(context.Background(), &list)).To(Succeed())
	var found []string
	for _, event := range list.Items {
		if event.InvolvedObject.Kind == kind && event.InvolvedObject.Name == name {
			found = append(found, event.Reason+": "+event.Message)
		}
	}
	return found
}

func containsAny(lines []string, substring string) bool {
	for _, line := range lines {
		if strings.Contains(line, substring) {
			return true
		}
	}
	return false
}

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func ptr[T any](v T) *T { return &v }
