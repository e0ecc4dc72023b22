package simulated

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Registrar plays the kubelets of a cluster's simulated machines: it
// registers the Node of every machine whose boot time has passed. It keeps
// no state of its own (a machine's record says whether its Node was made),
// so any number of restarts, or two registrars at once, make each Node once.
type Registrar struct {
	kube      client.Client
	namespace string
	cluster   string
	clock     clock.PassiveClock
	interval  time.Duration
	config    *rest.Config
	// wake is signalled by Create in this process: a new machine to wait
	// for.
	wake chan struct{}
}

// idleRecheck is how often a registrar with no machine to wait for looks
// again without being woken: for machines another process made.
const idleRecheck = 5 * time.Second

// wakers are the wake channels of the registrars running in this process,
// by namespace and cluster, so Create can end a registrar's idle wait.
var wakers = struct {
	sync.Mutex
	byKey map[string]map[chan struct{}]bool
}{byKey: map[string]map[chan struct{}]bool{}}

func registrarKey(namespace, cluster string) string { return namespace + "/" + cluster }

// wakeRegistrars tells the registrars of namespace and cluster that a
// machine was made.
func wakeRegistrars(namespace, cluster string) {
	wakers.Lock()
	defer wakers.Unlock()
	for wake := range wakers.byKey[registrarKey(namespace, cluster)] {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// NewRegistrar returns the registrar for the machines of cluster kept in
// namespace. It uses cfg's Clock and PollInterval.
func NewRegistrar(kube client.Client, namespace, cluster string, cfg Config) *Registrar {
	cfg = cfg.withDefaults()
	return &Registrar{kube: kube, namespace: namespace, cluster: cluster, clock: cfg.Clock, interval: cfg.PollInterval, config: cfg.RESTConfig, wake: make(chan struct{}, 1)}
}

// Start registers due machines every poll interval until ctx ends. It is a
// manager.Runnable. With no machine left to wait for, it waits for Create
// to wake it (or idleRecheck): at a thousand registered machines a pass
// every poll interval was most of what an idle controller did.
func (r *Registrar) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("namespace", r.namespace, "cluster", r.cluster)
	key := registrarKey(r.namespace, r.cluster)
	wakers.Lock()
	if wakers.byKey[key] == nil {
		wakers.byKey[key] = map[chan struct{}]bool{}
	}
	wakers.byKey[key][r.wake] = true
	wakers.Unlock()
	defer func() {
		wakers.Lock()
		defer wakers.Unlock()
		delete(wakers.byKey[key], r.wake)
		if len(wakers.byKey[key]) == 0 {
			delete(wakers.byKey, key)
		}
	}()
	for {
		waiting, err := r.registerDue(ctx)
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "registering simulated machines")
		}
		// The poll runs on real time: it is how often the API server is
		// asked, not part of the simulation; the injected clock decides
		// what is due.
		next := r.interval
		if !waiting && err == nil {
			next = idleRecheck
		}
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.wake:
			// Create has just written the machine; the cache may not have
			// it yet, and its boot delay has yet to pass: poll again.
		case <-timer.C:
		}
		timer.Stop()
	}
}

// RegisterDue makes one pass: it registers the Node of every machine that is
// due and not yet registered.
func (r *Registrar) RegisterDue(ctx context.Context) error {
	_, err := r.registerDue(ctx)
	return err
}

// registerDue is RegisterDue, and reports whether a machine is left to
// register later (not booted yet, or its kubelet still joining).
func (r *Registrar) registerDue(ctx context.Context) (waiting bool, err error) {
	// While machines boot the pass runs every poll interval over every
	// machine and writes only the few it registers: it reads the cache's
	// own objects, and copies just those before changing them.
	cms, err := listMachines(ctx, r.kube, r.namespace, r.cluster, client.UnsafeDisableDeepCopy)
	if err != nil {
		return false, err
	}
	now := r.clock.Now()
	var errs []error
	for i := range cms {
		if cms[i].Data[dataRegisteredAt] != "" {
			// Registered: not worth parsing, four times a second, for
			// each of a thousand machines.
			continue
		}
		m, err := machineFromConfigMap(&cms[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m.deleting || m.neverRegister || m.suspended() || !m.registeredAt.IsZero() {
			// A stopped machine's kubelet is not running: its Node, which
			// the claim lifecycle deletes, does not come back until Resume.
			continue
		}
		// Until the cache shows it registered, and a pass more for a
		// machine registered now.
		waiting = true
		if now.Before(m.bootAt) {
			continue
		}
		if err := r.register(ctx, cms[i].DeepCopy(), m, now); err != nil {
			errs = append(errs, err)
		}
	}
	return waiting, errors.Join(errs...)
}

// register makes the machine's Node and then records that it did. A Node
// deleted afterwards is not made again, as a real machine's kubelet would
// not re-register it on its own.
func (r *Registrar) register(ctx context.Context, cm *corev1.ConfigMap, m *machine, now time.Time) error {
	node := m.node()
	// A machine without user data is registered by the registrar itself; one
	// with user data joins as its kubelet would, with its token.
	registerer := r.kube
	if m.userData && !r.joinedEarlier(ctx, m) {
		var secret corev1.Secret
		if err := r.kube.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: m.name}, &secret); err != nil {
			return fmt.Errorf("reading the user data of machine %s: %w", m.name, err)
		}
		kubelet := &bootstrapKubelet{kube: r.kube, config: r.config, secret: &secret, m: m, now: now}
		nodeClient, err := kubelet.join(ctx)
		if errors.Is(err, errWaitingForCertificate) {
			return nil
		}
		if err != nil {
			return err
		}
		registerer = nodeClient
	}
	err := registerer.Create(ctx, node)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Made by an earlier pass that could not record it, or by another
		// registrar.
		if err := r.kube.Get(ctx, client.ObjectKey{Name: m.name}, node); err != nil {
			return fmt.Errorf("reading Node %s of machine %s: %w", m.name, m.name, err)
		}
		if node.Spec.ProviderID != ProviderID(m.name) {
			return fmt.Errorf("machine %s cannot register: Node %s exists with providerID %q", m.name, m.name, node.Spec.ProviderID)
		}
		if node.DeletionTimestamp != nil {
			// A Node of an earlier machine of that name on its way out.
			return nil
		}
	case err != nil:
		return fmt.Errorf("registering Node %s of machine %s: %w", m.name, m.name, err)
	}
	if err := publishSlices(ctx, r.kube, m, node); err != nil {
		return err
	}

	// Locked to the record as read, so a Suspend since is seen: a stopped
	// machine has no Node, and the lifecycle may have deleted its Node
	// before this one was made.
	reread := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if reread {
			if err := r.kube.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
				return err
			}
		}
		reread = true
		if _, stopped := cm.Data[dataSuspendedAt]; stopped {
			return errStoppedWhileRegistering
		}
		patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cm.Data[dataRegisteredAt] = now.UTC().Format(time.RFC3339Nano)
		return r.kube.Patch(ctx, cm, patch)
	})
	if apierrors.IsNotFound(err) || errors.Is(err, errStoppedWhileRegistering) {
		// The machine was deleted (or stopped) while its Node was being
		// made, and Delete (or the lifecycle) may have looked for the Node
		// before it existed: remove it here so it cannot outlive its
		// machine (nor its machine's power).
		return deleteMachineNode(ctx, r.kube, m.name)
	}
	if err != nil {
		return fmt.Errorf("recording that machine %s registered: %w", m.name, err)
	}
	return nil
}

// errStoppedWhileRegistering: the machine was suspended while its Node
// was being made.
var errStoppedWhileRegistering = errors.New("machine stopped while its Node registered")

// joinedEarlier reports whether the machine's Node exists already: an
// earlier pass joined but could not record it, and the token it joined with
// may be revoked by now, as it is once the Node registered.
func (r *Registrar) joinedEarlier(ctx context.Context, m *machine) bool {
	var node corev1.Node
	err := r.kube.Get(ctx, client.ObjectKey{Name: m.name}, &node)
	return err == nil && node.Spec.ProviderID == ProviderID(m.name)
}

// registrars holds the registrars New started, one per namespace and
// cluster name.
var registrars = struct {
	sync.Mutex
	byKey map[string]*sharedRegistrar
}{byKey: map[string]*sharedRegistrar{}}

type sharedRegistrar struct {
	// users counts the live contexts given to New for this key.
	users  int
	cancel context.CancelFunc
}

// startSharedRegistrar makes sure a registrar runs for the namespace and
// cluster while ctx is live. The registrar is built from the first caller's
// client and config and stops when the last caller's context ends.
func startSharedRegistrar(ctx context.Context, kube client.Client, namespace, cluster string, cfg Config) {
	key := registrarKey(namespace, cluster)
	registrars.Lock()
	defer registrars.Unlock()
	shared, ok := registrars.byKey[key]
	if !ok {
		// The registrar's own context: it outlives the first caller's when
		// later callers are still live.
		runCtx, cancel := context.WithCancel(log.IntoContext(context.Background(), log.FromContext(ctx).WithName("simulated-registrar")))
		shared = &sharedRegistrar{cancel: cancel}
		registrars.byKey[key] = shared
		go func() { _ = NewRegistrar(kube, namespace, cluster, cfg).Start(runCtx) }()
	}
	shared.users++
	context.AfterFunc(ctx, func() {
		registrars.Lock()
		defer registrars.Unlock()
		shared.users--
		if shared.users == 0 {
			shared.cancel()
			if registrars.byKey[key] == shared {
				delete(registrars.byKey, key)
			}
		}
	})
}
