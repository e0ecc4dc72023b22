package simulated

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// ProviderIDPrefix starts every providerID this provider returns.
const ProviderIDPrefix = "simulated://"

// DefaultBootDelay applies when the NodeProvider sets no bootDelay.
const DefaultBootDelay = 2 * time.Second

// DefaultStartDelay applies when the NodeProvider sets no startDelay:
// shorter than DefaultBootDelay, as starting a stopped machine is quicker
// than making one.
const DefaultStartDelay = time.Second

// ProviderID returns the providerID of a machine.
func ProviderID(machine string) string { return ProviderIDPrefix + machine }

// Config overrides defaults, for tests and end-to-end runs.
type Config struct {
	// Kube keeps the machine records (ConfigMaps, Secrets) and registers
	// their Nodes. Required: the simulated provider is the one provider
	// that keeps its machines in the cluster, so it gets its client here
	// rather than through provider.Options, which carries none.
	Kube client.Client
	// Clock decides when a machine's boot delay has passed and stamps its
	// creation time. Default: the real clock.
	Clock clock.PassiveClock
	// Rand decides the injected failures. Default: seeded at random. The
	// providers of one NewFactory share it under a lock; do not use it
	// elsewhere at the same time.
	Rand *rand.Rand
	// PollInterval between the registrar's passes. Default: 250ms.
	PollInterval time.Duration
	// ExternalRegistrar stops New from starting a registrar: the caller runs
	// NewRegistrar(...).Start itself, e.g. as a manager Runnable.
	ExternalRegistrar bool
	// RESTConfig reaches the API server; the registrar's kubelets
	// authenticate from it (its CA, none of its credentials) with the
	// bootstrap token of their user data. Needed only for machines created
	// with user data.
	RESTConfig *rest.Config
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 250 * time.Millisecond
	}
	return c
}

// dice rolls percentages for failure injection; math/rand's generators are
// not safe for concurrent use, and Create is called concurrently.
type dice struct {
	mu sync.Mutex
	r  *rand.Rand
}

// roll reports true percent times out of a hundred; 0 never, 100 always.
func (d *dice) roll(percent int32) bool {
	if percent <= 0 {
		return false
	}
	if percent >= 100 {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.r.Int32N(100) < percent
}

// settings are the NodeProvider's simulated settings, defaulted and checked.
type settings struct {
	bootDelay            time.Duration
	startDelay           time.Duration
	createFailurePercent int32
	neverRegisterPercent int32
	zones                []string
}

func parseSettings(np *v1alpha1.NodeProvider) (settings, error) {
	s := settings{bootDelay: DefaultBootDelay, startDelay: DefaultStartDelay}
	if np.Spec.Type != v1alpha1.ProviderTypeSimulated {
		return s, fmt.Errorf("nodeprovider %s has type %q, not %q", np.Name, np.Spec.Type, v1alpha1.ProviderTypeSimulated)
	}
	sim := np.Spec.Simulated
	if sim == nil {
		return s, nil
	}
	if sim.BootDelay != nil {
		if sim.BootDelay.Duration < 0 {
			return s, fmt.Errorf("nodeprovider %s: spec.simulated.bootDelay %s is negative", np.Name, sim.BootDelay.Duration)
		}
		s.bootDelay = sim.BootDelay.Duration
	}
	if sim.StartDelay != nil {
		if sim.StartDelay.Duration < 0 {
			return s, fmt.Errorf("nodeprovider %s: spec.simulated.startDelay %s is negative", np.Name, sim.StartDelay.Duration)
		}
		s.startDelay = sim.StartDelay.Duration
	}
	for field, v := range map[string]int32{
		"createFailurePercent": sim.CreateFailurePercent,
		"neverRegisterPercent": sim.NeverRegisterPercent,
	} {
		if v < 0 || v > 100 {
			return s, fmt.Errorf("nodeprovider %s: spec.simulated.%s %d is not between 0 and 100", np.Name, field, v)
		}
	}
	s.createFailurePercent = sim.CreateFailurePercent
	s.neverRegisterPercent = sim.NeverRegisterPercent
	s.zones = append([]string(nil), sim.Zones...)
	return s, nil
}

// Provider is the simulated provider.
type Provider struct {
	kube      client.Client
	namespace string
	cluster   string
	settings  settings
	clock     clock.PassiveClock
	dice      *dice
}

var _ provider.Provider = (*Provider)(nil)

// NewFactory returns the provider.Factory for type simulated, building
// providers with cfg (cfg.Kube is required). The ctx a factory is called
// with bounds the shared registrar it starts (see the package
// documentation).
func NewFactory(cfg Config) provider.Factory {
	cfg = cfg.withDefaults()
	shared := &dice{r: cfg.Rand}
	return func(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		return newProvider(ctx, np, opts, cfg, shared)
	}
}

// NewWithConfig is New with the defaults in cfg overridden.
func NewWithConfig(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options, cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	return newProvider(ctx, np, opts, cfg, &dice{r: cfg.Rand})
}

func newProvider(ctx context.Context, np *v1alpha1.NodeProvider, opts provider.Options, cfg Config, d *dice) (*Provider, error) {
	switch {
	case opts.ClusterName == "":
		return nil, provider.NewTerminal(fmt.Errorf("no cluster name: it goes into every machine's %s tag", v1alpha1.TagCluster))
	case cfg.Kube == nil:
		return nil, provider.NewTerminal(errors.New("no Kubernetes client: simulated machines are kept as ConfigMaps"))
	case opts.Namespace == "":
		return nil, provider.NewTerminal(errors.New("no namespace to keep simulated machines in"))
	}
	s, err := parseSettings(np)
	if err != nil {
		return nil, provider.NewTerminal(err)
	}
	p := &Provider{
		kube:      cfg.Kube,
		namespace: opts.Namespace,
		cluster:   opts.ClusterName,
		settings:  s,
		clock:     cfg.Clock,
		dice:      d,
	}
	if !cfg.ExternalRegistrar {
		startSharedRegistrar(ctx, cfg.Kube, opts.Namespace, opts.ClusterName, cfg)
	}
	return p, nil
}

// Create makes the machine record for a claim, or returns the one that
// exists. The registrar registers its Node once the boot delay has passed.
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, opts provider.CreateOptions) (*provider.Instance, error) {
	name := claim.Name
	if claim.Spec.Shape.CPU.Sign() <= 0 || claim.Spec.Shape.Memory.Sign() <= 0 {
		return nil, provider.NewTerminal(fmt.Errorf("claim %s: shape %s needs cpu and memory greater than zero", name, claim.Spec.Shape.Name))
	}
	if existing, err := p.existing(ctx, name); err != nil || existing != nil {
		return existing, err
	}
	// The failure is decided after the lookup, so a retry of a call that did
	// make its machine always finds it.
	if p.dice.roll(p.settings.createFailurePercent) {
		return nil, provider.NewRetryable(fmt.Errorf("simulated create failure for machine %s (createFailurePercent %d)", name, p.settings.createFailurePercent), 0)
	}
	kubelet, slices, err := p.poolTemplate(ctx, claim.Spec.NodePoolRef.Name, claim.Spec.Shape.Name)
	if err != nil {
		return nil, err
	}
	now := p.clock.Now()
	m := newMachine(claim, machineParams{
		cluster:       p.cluster,
		zone:          chooseZone(p.settings.zones, claim.Spec.Requirements.NodeSelector),
		kubelet:       kubelet,
		createdAt:     now,
		bootAt:        now.Add(p.settings.bootDelay),
		neverRegister: p.dice.roll(p.settings.neverRegisterPercent),
		userData:      len(opts.UserData) > 0,
		slices:        slices,
	})
	if m.userData {
		// The user data goes first, so a machine record never exists
		// without it.
		if err := p.keepUserData(ctx, m, opts.UserData); err != nil {
			return nil, err
		}
	}
	cm, err := m.configMap(p.namespace)
	if err != nil {
		return nil, provider.NewTerminal(fmt.Errorf("encoding machine %s: %w", name, err))
	}
	if err := p.kube.Create(ctx, cm); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating ConfigMap %s/%s for machine %s: %w", p.namespace, name, name, err)
		}
		// Another call for the same claim won the race: return its machine.
		existing, err := p.existing(ctx, name)
		if err != nil {
			return nil, err
		}
		if existing == nil {
			return nil, provider.NewRetryable(fmt.Errorf("machine %s exists but cannot be read yet", name), time.Second)
		}
		return existing, nil
	}
	wakeRegistrars(p.namespace, p.cluster)
	return m.instance(), nil
}

// keepUserData writes the machine's user-data Secret, replacing the data of
// one an earlier attempt left.
func (p *Provider) keepUserData(ctx context.Context, m *machine, userData []byte) error {
	secret := userDataSecret(p.namespace, m, userData)
	err := p.kube.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		var have corev1.Secret
		if err := p.kube.Get(ctx, client.ObjectKeyFromObject(secret), &have); err != nil {
			return fmt.Errorf("reading the user-data Secret of machine %s: %w", m.name, err)
		}
		if have.Labels[LabelMachine] != "true" || have.Annotations[v1alpha1.TagCluster] != p.cluster {
			return provider.NewTerminal(fmt.Errorf("Secret %s/%s exists and is not a simulated machine's of cluster %s", p.namespace, m.name, p.cluster))
		}
		have.Data = secret.Data
		err = p.kube.Update(ctx, &have)
	}
	if err != nil {
		return fmt.Errorf("writing the user-data Secret of machine %s: %w", m.name, err)
	}
	return nil
}

// existing returns the machine named name, nil if there is none, and an
// error if a ConfigMap of that name is not a machine of this cluster.
func (p *Provider) existing(ctx context.Context, name string) (*provider.Instance, error) {
	var cm corev1.ConfigMap
	err := p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s for machine %s: %w", p.namespace, name, name, err)
	}
	if !p.owns(&cm) {
		return nil, provider.NewTerminal(fmt.Errorf("ConfigMap %s/%s exists and is not a simulated machine of cluster %s", p.namespace, name, p.cluster))
	}
	m, err := machineFromConfigMap(&cm)
	if err != nil {
		return nil, provider.NewTerminal(err)
	}
	return m.instance(), nil
}

// poolTemplate returns the kubelet settings of the claim's pool, which
// decide the Node's pods and allocatable, and the template ResourceSlices
// of its shape, which the machine's simulated DRA driver publishes; a
// missing pool gets the defaults and no slices.
func (p *Provider) poolTemplate(ctx context.Context, poolName, shape string) (v1alpha1.KubeletConfiguration, []v1alpha1.TemplateResourceSlice, error) {
	var pool v1alpha1.NodePool
	err := p.kube.Get(ctx, client.ObjectKey{Name: poolName}, &pool)
	if apierrors.IsNotFound(err) {
		return v1alpha1.KubeletConfiguration{}, nil, nil
	}
	if err != nil {
		return v1alpha1.KubeletConfiguration{}, nil, fmt.Errorf("reading nodepool %s for its kubelet settings: %w", poolName, err)
	}
	var slices []v1alpha1.TemplateResourceSlice
	for _, s := range pool.Spec.Shapes.Fixed {
		if s.Name == shape {
			slices = s.ResourceSlices
		}
	}
	return pool.Spec.Template.Kubelet, slices, nil
}

// owns reports whether a ConfigMap is a machine of this cluster. The exact
// cluster name is in the annotation; the label may be a hash of it.
func (p *Provider) owns(cm *corev1.ConfigMap) bool {
	return cm.Labels[LabelMachine] == "true" && cm.Annotations[v1alpha1.TagCluster] == p.cluster
}

// Delete removes a machine's record and its Node. A machine that is gone is
// success; one that is not this cluster's is refused.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	name, err := parseProviderID(providerID)
	if err != nil {
		return err
	}
	var cm corev1.ConfigMap
	err = p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		// The record may be gone from an earlier call that failed before
		// the Node went: finish that.
	case err != nil:
		return fmt.Errorf("reading ConfigMap %s/%s for machine %s: %w", p.namespace, name, name, err)
	case !p.owns(&cm):
		return provider.NewTerminal(fmt.Errorf("refusing to delete machine %s: ConfigMap %s/%s carries no %s tag for cluster %s", name, p.namespace, name, v1alpha1.TagCluster, p.cluster))
	default:
		// The record goes first: the registrar checks it after making a Node
		// and removes a Node whose record is gone, so no Node outlives it.
		err := p.kube.Delete(ctx, &cm, client.Preconditions{UID: &cm.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ConfigMap %s/%s of machine %s: %w", p.namespace, name, name, err)
		}
	}
	if err := deleteUserData(ctx, p.kube, p.namespace, p.cluster, name); err != nil {
		return err
	}
	return deleteMachineNode(ctx, p.kube, name)
}

// deleteUserData deletes a machine's user-data Secret, if it has one.
func deleteUserData(ctx context.Context, kube client.Client, namespace, cluster, name string) error {
	var secret corev1.Secret
	err := kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the user-data Secret of machine %s: %w", name, err)
	}
	if secret.Labels[LabelMachine] != "true" || secret.Annotations[v1alpha1.TagCluster] != cluster {
		return nil
	}
	err = kube.Delete(ctx, &secret, client.Preconditions{UID: &secret.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the user-data Secret of machine %s: %w", name, err)
	}
	return nil
}

// deleteMachineNode deletes the Node a machine registered, if there is one.
// A Node of that name that another machine or kubelet made is left alone.
func deleteMachineNode(ctx context.Context, kube client.Client, name string) error {
	if err := deleteMachineSlices(ctx, kube, name); err != nil {
		return err
	}
	var node corev1.Node
	err := kube.Get(ctx, client.ObjectKey{Name: name}, &node)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Node %s of machine %s: %w", name, name, err)
	}
	if node.Spec.ProviderID != ProviderID(name) || node.Labels[v1alpha1.LabelNodeClaim] == "" {
		return nil
	}
	err = kube.Delete(ctx, &node, client.Preconditions{UID: &node.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s of machine %s: %w", name, name, err)
	}
	return nil
}

// Get returns one machine of this cluster, or a NotFound error.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	name, err := parseProviderID(providerID)
	if err != nil {
		return nil, err
	}
	var cm corev1.ConfigMap
	err = p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, &cm)
	if apierrors.IsNotFound(err) || (err == nil && !p.owns(&cm)) {
		return nil, provider.NewNotFound("simulated machine %s of cluster %s", name, p.cluster)
	}
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s for machine %s: %w", p.namespace, name, name, err)
	}
	m, err := machineFromConfigMap(&cm)
	if err != nil {
		return nil, provider.NewTerminal(err)
	}
	return m.instance(), nil
}

// List returns the machines tagged for this cluster.
func (p *Provider) List(ctx context.Context) ([]*provider.Instance, error) {
	cms, err := listMachines(ctx, p.kube, p.namespace, p.cluster)
	if err != nil {
		return nil, err
	}
	instances := make([]*provider.Instance, 0, len(cms))
	for i := range cms {
		m, err := machineFromConfigMap(&cms[i])
		if err != nil {
			return nil, provider.NewTerminal(err)
		}
		instances = append(instances, m.instance())
	}
	return instances, nil
}

// listMachines returns the machine ConfigMaps of a cluster.
func listMachines(ctx context.Context, kube client.Client, namespace, cluster string, opts ...client.ListOption) ([]corev1.ConfigMap, error) {
	var list corev1.ConfigMapList
	opts = append(opts, client.InNamespace(namespace), client.MatchingLabels{
		LabelMachine:        "true",
		v1alpha1.TagCluster: labelValue(cluster),
	})
	err := kube.List(ctx, &list, opts...)
	if err != nil {
		return nil, fmt.Errorf("listing simulated machines of cluster %s in namespace %s: %w", cluster, namespace, err)
	}
	owned := list.Items[:0]
	for _, cm := range list.Items {
		// The label may be a hash shared by another name: the annotation
		// decides.
		if cm.Annotations[v1alpha1.TagCluster] == cluster {
			owned = append(owned, cm)
		}
	}
	return owned, nil
}

func parseProviderID(providerID string) (string, error) {
	name, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok || name == "" {
		return "", provider.NewTerminal(fmt.Errorf("providerID %q is not a simulated one (%s<machine>)", providerID, ProviderIDPrefix))
	}
	return name, nil
}
