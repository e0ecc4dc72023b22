package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// The Cluster API core kinds this provider reads and writes (v1beta2, the
// storage version since CAPI v1.11).
var (
	GroupVersion          = schema.GroupVersion{Group: "cluster.x-k8s.io", Version: "v1beta2"}
	MachineKind           = GroupVersion.WithKind("Machine")
	ClusterKind           = GroupVersion.WithKind("Cluster")
	MachineDeploymentKind = GroupVersion.WithKind("MachineDeployment")
)

// Labels and annotations of the CAPI contract.
const (
	LabelClusterName          = "cluster.x-k8s.io/cluster-name"
	annotationClonedFromName  = "cluster.x-k8s.io/cloned-from-name"
	annotationClonedFromGroup = "cluster.x-k8s.io/cloned-from-groupkind"
	// cluster-autoscaler's clusterapi provider reads a node group's size
	// for scale from zero from these (cluster-autoscaler/cloudprovider/
	// clusterapi/README.md, "Scale from zero support").
	annotationCACPU    = "capacity.cluster-autoscaler.kubernetes.io/cpu"
	annotationCAMemory = "capacity.cluster-autoscaler.kubernetes.io/memory"
)

// Annotations claimscale puts on its Machines.
const (
	// AnnotationTemplates records the templates a Machine was cloned from,
	// so a shape whose MachineDeployment moved to new templates shows the
	// Machine as made from old ones.
	AnnotationTemplates = "claimscale.io/clusterapi-templates"
	annotationCPU       = "claimscale.io/cpu"
	annotationMemory    = "claimscale.io/memory"
)

// Default waits.
const (
	DefaultProvisionWait = 5 * time.Second
	defaultPollInterval  = 250 * time.Millisecond
	// A Machine still provisioning is looked at again after this long.
	provisioningRetry = 10 * time.Second
)

// Config is what the factory needs besides the NodeProvider.
type Config struct {
	// Kube reaches the cluster claimscale runs in: the management cluster
	// when the NodeProvider names no kubeconfig. It must not be a cached
	// client (Machines are read back right after their create).
	Kube client.Client
	// ProvisionWait is how long Create waits for a new Machine's
	// providerID before answering a retryable error (DefaultProvisionWait
	// when zero).
	ProvisionWait time.Duration
	// PollInterval of that wait (250ms when zero).
	PollInterval time.Duration
	// Clock times how long what Drifted read is trusted (the real clock
	// when nil).
	Clock clock.PassiveClock
}

// Provider makes CAPI Machines for claims.
type Provider struct {
	kube        client.Client
	clusterName string
	namespace   string
	cluster     string
	settings    v1alpha1.ClusterAPISettings
	wait, poll  time.Duration
	clock       clock.PassiveClock
	drift       driftMemory
}

var _ provider.Provider = (*Provider)(nil)

// NewFactory returns the factory of clusterapi providers.
func NewFactory(cfg Config) provider.Factory {
	return func(ctx context.Context, nodeProvider *v1alpha1.NodeProvider, opts provider.Options) (provider.Provider, error) {
		return New(ctx, cfg, nodeProvider, opts)
	}
}

// New builds the provider of a clusterapi NodeProvider and checks that its
// Cluster exists.
func New(ctx context.Context, cfg Config, nodeProvider *v1alpha1.NodeProvider, opts provider.Options) (*Provider, error) {
	settings := nodeProvider.Spec.ClusterAPI
	if settings == nil {
		return nil, provider.NewTerminal(errors.New("spec.clusterAPI is not set"))
	}
	if opts.ClusterName == "" {
		return nil, provider.NewTerminal(errors.New("no cluster name: it tags every Machine"))
	}
	kube := cfg.Kube
	if nodeProvider.Spec.CredentialsSecretRef != nil {
		var err error
		if kube, err = managementClient(opts.Credentials); err != nil {
			return nil, err
		}
	}
	if kube == nil {
		return nil, provider.NewTerminal(errors.New("no client for the management cluster"))
	}
	p := &Provider{
		kube: kube, clusterName: opts.ClusterName,
		namespace: settings.Cluster.Namespace, cluster: settings.Cluster.Name,
		settings: *settings.DeepCopy(),
		wait:     cfg.ProvisionWait, poll: cfg.PollInterval,
		clock: cfg.Clock,
		drift: driftMemory{machines: map[string]machineTemplates{}, deployments: map[string]deploymentTemplates{}},
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.wait <= 0 {
		p.wait = DefaultProvisionWait
	}
	if p.poll <= 0 {
		p.poll = defaultPollInterval
	}
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(ClusterKind)
	if err := kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.cluster}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, provider.NewTerminal(fmt.Errorf("Cluster API Cluster %s/%s not found", p.namespace, p.cluster))
		}
		return nil, classify(fmt.Errorf("reading Cluster API Cluster %s/%s: %w", p.namespace, p.cluster, err))
	}
	return p, nil
}

// managementClient reaches the management cluster through the kubeconfig
// in the credentials Secret. Errors name the key, never the content.
func managementClient(credentials map[string][]byte) (client.Client, error) {
	kubeconfig := credentials["kubeconfig"]
	if len(kubeconfig) == 0 {
		kubeconfig = credentials["value"]
	}
	if len(kubeconfig) == 0 {
		return nil, provider.NewTerminal(errors.New(`the credentials Secret has no kubeconfig (key "kubeconfig" or "value") for the management cluster`))
	}
	config, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, provider.NewTerminal(errors.New("the kubeconfig in the credentials Secret cannot be read as a kubeconfig"))
	}
	kube, err := client.New(config, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("building a client for the management cluster at %s: %w", config.Host, err)
	}
	return kube, nil
}

// classify gives an API error its provider kind: forbidden, invalid and
// unknown-kind errors are settings a person must fix; the rest may pass.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return provider.NewTerminal(err)
	case isNoMatch(err):
		return provider.NewTerminal(err)
	}
	return err
}
