package scheduling

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeports"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeunschedulable"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/tainttoleration"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumebinding"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// The plugins whose Filter decides where a pod may go, in the kube-scheduler's
// default order. The volume plugins skip themselves for pods without
// persistent volumes.
var filterPlugins = []string{
	names.NodeUnschedulable,
	names.TaintToleration,
	names.NodeAffinity,
	names.NodePorts,
	names.NodeResourcesFit,
	names.NodeVolumeLimits,
	names.VolumeBinding,
	names.PodTopologySpread,
	names.InterPodAffinity,
}

// staticPlugins look only at the node object and the pod, never at other
// pods, so their verdict for a node never changes while packing and can be
// cached per equivalence class and node template.
var staticPlugins = []string{
	names.NodeUnschedulable,
	names.TaintToleration,
	names.NodeAffinity,
}

// frameworks are the scheduler frameworks over one snapshot: the full
// filter set, and the static subset; and, built the first time a pod has
// ResourceClaims, the full set with DynamicResources and DynamicResources
// alone (for template nodes).
type frameworks struct {
	full   framework.Framework
	static framework.Framework
	// withDRA and draOnly are nil until a pod with ResourceClaims asks:
	// pods without claims never run DynamicResources, so they pay nothing
	// for it.
	withDRA, draOnly framework.Framework
}

func newFrameworks(ctx context.Context, snap *Snapshot, objs objectStore) (*frameworks, error) {
	full, err := newFramework(ctx, snap, objs, profile{name: "claimscale", filters: filterPlugins})
	if err != nil {
		return nil, err
	}
	static, err := newFramework(ctx, snap, objs, profile{name: "claimscale", filters: staticPlugins})
	if err != nil {
		return nil, err
	}
	return &frameworks{full: full, static: static}, nil
}

// draFrameworks builds the frameworks that run DynamicResources over the
// snapshot's DRA state: every filter and DynamicResources's Reserve, which
// keeps the devices a placed pod was given; and DynamicResources alone.
// Each has a profile name of its own: the plugin indexes the (never
// started) pod informer under its profile's name.
func (f *frameworks) draFrameworks(ctx context.Context, snap *Snapshot, objs objectStore) error {
	if f.withDRA != nil {
		return nil
	}
	dra := snap.dra
	withDRA, err := newFramework(ctx, snap, objs, profile{
		name: "claimscale-dra", filters: append(slices.Clone(filterPlugins), names.DynamicResources),
		reserve: []string{names.DynamicResources}, dra: dra,
	})
	if err != nil {
		return err
	}
	draOnly, err := newFramework(ctx, snap, objs, profile{name: "claimscale-devices", filters: []string{names.DynamicResources}, dra: dra})
	if err != nil {
		return err
	}
	f.withDRA, f.draOnly = withDRA, draOnly
	return nil
}

// profile is what a framework runs.
type profile struct {
	name    string
	filters []string
	reserve []string
	dra     fwk.SharedDRAManager
}

// metricsRecorder is the one recorder every framework built here shares.
// NewFramework starts a recorder goroutine per framework that flushes
// every second until the context given to NewFramework ends; a simulator
// is built several times a round on a context that lives as long as the
// controller, so each would leave a goroutine behind, and at a thousand
// nodes those goroutines alone kept the controller busy. So frameworks are
// built on a context that ends once they are built (none of the plugins
// keeps it: they take the context of each call), which stops that
// goroutine, and record through this one instead.
var metricsRecorder = sync.OnceValue(func() *schedmetrics.MetricAsyncRecorder {
	// The framework records metrics on every call; without registration
	// they are nil and panic.
	schedmetrics.Register()
	// A nil stop channel never closes: the recorder lives with the process.
	return schedmetrics.NewMetricsAsyncRecorder(1000, time.Second, nil)
})

func newFramework(ctx context.Context, snap *Snapshot, objs objectStore, prof profile) (framework.Framework, error) {
	recorder := metricsRecorder()

	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	registry := frameworkruntime.Registry{
		names.PrioritySort:      queuesort.New,
		names.DefaultBinder:     defaultbinder.New,
		names.NodeUnschedulable: frameworkruntime.FactoryAdapter(fts, nodeunschedulable.New),
		names.TaintToleration:   frameworkruntime.FactoryAdapter(fts, tainttoleration.New),
		names.NodeAffinity:      frameworkruntime.FactoryAdapter(fts, nodeaffinity.New),
		names.NodePorts:         frameworkruntime.FactoryAdapter(fts, nodeports.New),
		names.NodeResourcesFit:  frameworkruntime.FactoryAdapter(fts, noderesources.NewFit),
		names.NodeVolumeLimits:  frameworkruntime.FactoryAdapter(fts, nodevolumelimits.NewCSI),
		names.VolumeBinding:     frameworkruntime.FactoryAdapter(fts, volumebinding.New),
		names.PodTopologySpread: frameworkruntime.FactoryAdapter(fts, podtopologyspread.New),
		names.InterPodAffinity:  frameworkruntime.FactoryAdapter(fts, interpodaffinity.New),
		names.DynamicResources:  frameworkruntime.FactoryAdapter(fts, dynamicresources.New),
	}

	defaults, err := latest.Default()
	if err != nil {
		return nil, fmt.Errorf("loading kube-scheduler defaults: %w", err)
	}
	want := make(map[string]bool, len(prof.filters))
	set, reserve := config.PluginSet{}, config.PluginSet{}
	for _, n := range prof.filters {
		want[n] = true
		set.Enabled = append(set.Enabled, config.Plugin{Name: n})
	}
	for _, n := range prof.reserve {
		reserve.Enabled = append(reserve.Enabled, config.Plugin{Name: n})
	}
	profile := &config.KubeSchedulerProfile{
		SchedulerName: prof.name,
		Plugins: &config.Plugins{
			QueueSort: config.PluginSet{Enabled: []config.Plugin{{Name: names.PrioritySort}}},
			PreFilter: set,
			Filter:    set,
			Reserve:   reserve,
			Bind:      config.PluginSet{Enabled: []config.Plugin{{Name: names.DefaultBinder}}},
		},
	}
	for _, pc := range defaults.Profiles[0].PluginConfig {
		if want[pc.Name] {
			profile.PluginConfig = append(profile.PluginConfig, pc)
		}
	}
	buildCtx, built := context.WithCancel(ctx)
	defer built()
	opts := []frameworkruntime.Option{
		frameworkruntime.WithSnapshotSharedLister(snap),
		frameworkruntime.WithInformerFactory(objs.factory),
		frameworkruntime.WithSharedCSIManager(objs),
		frameworkruntime.WithParallelism(goruntime.GOMAXPROCS(0)),
		frameworkruntime.WithMetricsRecorder(recorder),
	}
	if prof.dra != nil {
		opts = append(opts, frameworkruntime.WithSharedDRAManager(prof.dra))
	}
	f, err := frameworkruntime.NewFramework(buildCtx, registry, profile, opts...)
	if err != nil {
		return nil, fmt.Errorf("building scheduler framework: %w", err)
	}
	return f, nil
}

// objectStore holds the objects the plugins look up by name (namespaces for
// namespace selectors, the storage objects for the volume plugins). It uses
// an informer factory only as a typed, indexed store: the informers are
// filled by hand, never started, and have no client.
type objectStore struct {
	factory informers.SharedInformerFactory
	csi     map[string]*storagev1.CSINode
}

func newObjectStore(c *Cluster) (objectStore, error) {
	f := informers.NewSharedInformerFactory(nil, 0)
	add := func(what string, inf cache.SharedIndexInformer, objs []any) error {
		for _, o := range objs {
			if err := inf.GetIndexer().Add(o); err != nil {
				return fmt.Errorf("storing %s: %w", what, err)
			}
		}
		return nil
	}
	s := objectStore{factory: f, csi: map[string]*storagev1.CSINode{}}
	for _, step := range []struct {
		what string
		inf  cache.SharedIndexInformer
		objs []any
	}{
		{"namespaces", f.Core().V1().Namespaces().Informer(), toAny(c.Namespaces)},
		{"persistent volume claims", f.Core().V1().PersistentVolumeClaims().Informer(), toAny(c.Storage.PersistentVolumeClaims)},
		{"persistent volumes", f.Core().V1().PersistentVolumes().Informer(), toAny(c.Storage.PersistentVolumes)},
		{"storage classes", f.Storage().V1().StorageClasses().Informer(), toAny(c.Storage.StorageClasses)},
		{"CSI nodes", f.Storage().V1().CSINodes().Informer(), toAny(c.Storage.CSINodes)},
		{"CSI drivers", f.Storage().V1().CSIDrivers().Informer(), toAny(c.Storage.CSIDrivers)},
	} {
		if err := add(step.what, step.inf, step.objs); err != nil {
			return objectStore{}, err
		}
	}
	for _, n := range c.Storage.CSINodes {
		s.csi[n.Name] = n
	}
	return s, nil
}

func toAny[T any](in []T) []any {
	out := make([]any, len(in))
	for i := range in {
		out[i] = in[i]
	}
	return out
}

// CSINodes implements fwk.CSIManager for NodeVolumeLimits.
func (s objectStore) CSINodes() fwk.CSINodeLister { return csiNodes(s.csi) }

type csiNodes map[string]*storagev1.CSINode

func (c csiNodes) List() ([]*storagev1.CSINode, error) {
	out := make([]*storagev1.CSINode, 0, len(c))
	for _, n := range c {
		out = append(out, n)
	}
	return out, nil
}

func (c csiNodes) Get(name string) (*storagev1.CSINode, error) {
	if n, ok := c[name]; ok {
		return n, nil
	}
	return nil, apierrors.NewNotFound(storagev1.Resource("csinodes"), name)
}
