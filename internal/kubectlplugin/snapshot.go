package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/decisions"
)

// snapshotVersion is the format of a snapshot file.
const snapshotVersion = "claimscale.io/snapshot/v1"

// Snapshot is what a simulation reads, written to a file so that anyone
// can replay it without the cluster. It holds no Secret, and pods and
// DaemonSets are stripped to what scheduling reads: no environment,
// commands, images or volumes other than claims.
type Snapshot struct {
	Version       string                  `json:"version"`
	Taken         metav1.Time             `json:"taken"`
	Offers        []decisions.PoolOffer   `json:"offers"`
	NodePools     []v1alpha1.NodePool     `json:"nodePools"`
	NodeProviders []v1alpha1.NodeProvider `json:"nodeProviders"`
	NodeClaims    []v1alpha1.NodeClaim    `json:"nodeClaims"`
	Nodes         []corev1.Node           `json:"nodes"`
	Pods          []corev1.Pod            `json:"pods"`
	DaemonSets    []appsv1.DaemonSet      `json:"daemonSets"`
	// PodDisruptionBudgets hold nodes back in simulate --scale-down.
	PodDisruptionBudgets []policyv1.PodDisruptionBudget `json:"podDisruptionBudgets,omitempty"`
	// LimitRanges default and bound the requests of a workload's pods in
	// simulate -f.
	LimitRanges []corev1.LimitRange `json:"limitRanges,omitempty"`
	// ResourceSlices, ResourceClaims and DeviceClasses: the devices, for
	// pods with ResourceClaims.
	ResourceSlices []resourcev1.ResourceSlice `json:"resourceSlices,omitempty"`
	ResourceClaims []resourcev1.ResourceClaim `json:"resourceClaims,omitempty"`
	DeviceClasses  []resourcev1.DeviceClass   `json:"deviceClasses,omitempty"`
	// ResourceClaimTemplates make the claims of simulate -f's pods.
	ResourceClaimTemplates []resourcev1.ResourceClaimTemplate `json:"resourceClaimTemplates,omitempty"`
}

func newSnapshotCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot > cluster.json",
		Short: "Write what a simulation needs (no Secrets; pods stripped to what scheduling reads), to replay it with simulate --from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube, err := o.kubeClient()
			if err != nil {
				return err
			}
			endpoint, err := o.endpointClient(cmd.Context())
			if err != nil {
				return err
			}
			defer endpoint.Close()
			snapshot := Snapshot{Version: snapshotVersion, Taken: metav1.Now()}
			if err := endpoint.get(cmd.Context(), "pools", &snapshot.Offers); err != nil {
				return fmt.Errorf("reading what each pool can make: %w", err)
			}
			if err := takeSnapshot(cmd.Context(), kube, &snapshot); err != nil {
				return err
			}
			encoder := json.NewEncoder(o.streams.Out)
			encoder.SetIndent("", " ")
			return encoder.Encode(snapshot)
		},
	}
}

func takeSnapshot(ctx context.Context, kube client.Reader, s *Snapshot) error {
	var pools v1alpha1.NodePoolList
	var providers v1alpha1.NodeProviderList
	var claims v1alpha1.NodeClaimList
	var nodes corev1.NodeList
	var pods corev1.PodList
	var daemonSets appsv1.DaemonSetList
	var budgets policyv1.PodDisruptionBudgetList
	var limitRanges corev1.LimitRangeList
	for _, list := range []client.ObjectList{&pools, &providers, &claims, &nodes, &pods, &daemonSets, &budgets, &limitRanges} {
		if err := kube.List(ctx, list); err != nil {
			return fmt.Errorf("listing %T: %w", list, err)
		}
	}
	s.NodePools, s.NodeProviders, s.NodeClaims, s.Nodes = pools.Items, providers.Items, claims.Items, nodes.Items
	for i := range nodes.Items {
		s.Nodes[i].ManagedFields = nil
	}
	for i := range pods.Items {
		s.Pods = append(s.Pods, stripPod(&pods.Items[i]))
	}
	for i := range budgets.Items {
		budget := budgets.Items[i]
		budget.ManagedFields, budget.Annotations = nil, nil
		s.PodDisruptionBudgets = append(s.PodDisruptionBudgets, budget)
	}
	for i := range limitRanges.Items {
		lr := limitRanges.Items[i]
		lr.ManagedFields, lr.Annotations = nil, nil
		s.LimitRanges = append(s.LimitRanges, lr)
	}
	for i := range daemonSets.Items {
		ds := daemonSets.Items[i]
		ds.ManagedFields, ds.Annotations = nil, nil
		ds.Spec.Template.Spec = stripPodSpec(ds.Spec.Template.Spec)
		s.DaemonSets = append(s.DaemonSets, ds)
	}
	return takeDevices(ctx, kube, s)
}

// takeDevices adds the DRA objects; a cluster that does not serve
// resource.k8s.io/v1 has none.
func takeDevices(ctx context.Context, kube client.Reader, s *Snapshot) error {
	var slices resourcev1.ResourceSliceList
	var claims resourcev1.ResourceClaimList
	var classes resourcev1.DeviceClassList
	var templates resourcev1.ResourceClaimTemplateList
	for _, list := range []client.ObjectList{&slices, &claims, &classes, &templates} {
		if err := kube.List(ctx, list); err != nil {
			if meta.IsNoMatchError(err) {
				return nil
			}
			return fmt.Errorf("listing %T: %w", list, err)
		}
	}
	for _, sl := range slices.Items {
		sl.ManagedFields = nil
		s.ResourceSlices = append(s.ResourceSlices, sl)
	}
	for _, c := range claims.Items {
		c.ManagedFields, c.Annotations = nil, nil
		s.ResourceClaims = append(s.ResourceClaims, c)
	}
	for _, c := range classes.Items {
		c.ManagedFields, c.Annotations = nil, nil
		s.DeviceClasses = append(s.DeviceClasses, c)
	}
	for _, t := range templates.Items {
		t.ManagedFields, t.Annotations = nil, nil
		s.ResourceClaimTemplates = append(s.ResourceClaimTemplates, t)
	}
	return nil
}

// stripPod keeps what scheduling and provisioning read of a pod.
func stripPod(pod *corev1.Pod) corev1.Pod {
	out := corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, Labels: pod.Labels,
			OwnerReferences: pod.OwnerReferences, DeletionTimestamp: pod.DeletionTimestamp, CreationTimestamp: pod.CreationTimestamp,
		},
		Spec: stripPodSpec(pod.Spec),
		Status: corev1.PodStatus{
			Phase: pod.Status.Phase, Conditions: pod.Status.Conditions, NominatedNodeName: pod.Status.NominatedNodeName,
			// Which ResourceClaim each of its claims from a template is.
			ResourceClaimStatuses: pod.Status.ResourceClaimStatuses,
		},
	}
	if value, ok := pod.Annotations[v1alpha1.AnnotationDoNotDisrupt]; ok {
		out.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: value}
	}
	// Mirror pods belong to their node.
	if value, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[corev1.MirrorPodAnnotationKey] = value
	}
	return out
}

func stripPodSpec(spec corev1.PodSpec) corev1.PodSpec {
	strip := func(containers []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, 0, len(containers))
		for _, c := range containers {
			out = append(out, corev1.Container{Name: c.Name, Resources: c.Resources, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
		}
		return out
	}
	var volumes []corev1.Volume
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim, Ephemeral: v.Ephemeral}})
		}
	}
	return corev1.PodSpec{
		NodeName: spec.NodeName, NodeSelector: spec.NodeSelector, Affinity: spec.Affinity, Tolerations: spec.Tolerations,
		Containers: strip(spec.Containers), InitContainers: strip(spec.InitContainers), Overhead: spec.Overhead,
		TopologySpreadConstraints: spec.TopologySpreadConstraints, Priority: spec.Priority, PriorityClassName: spec.PriorityClassName,
		SchedulingGates: spec.SchedulingGates, ResourceClaims: spec.ResourceClaims, Volumes: volumes, HostNetwork: spec.HostNetwork,
		SchedulerName: spec.SchedulerName, Resources: spec.Resources,
	}
}

// readSnapshot reads a snapshot file.
func readSnapshot(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	if s.Version != snapshotVersion {
		return nil, fmt.Errorf("%s: version %q, want %q (written by another claimscale release?)", path, s.Version, snapshotVersion)
	}
	return &s, nil
}

// snapshotReader serves a snapshot as the client a simulation reads.
type snapshotReader struct{ s *Snapshot }

func (r snapshotReader) Get(_ context.Context, key client.ObjectKey, object client.Object, _ ...client.GetOption) error {
	if provider, ok := object.(*v1alpha1.NodeProvider); ok {
		for i := range r.s.NodeProviders {
			if r.s.NodeProviders[i].Name == key.Name {
				r.s.NodeProviders[i].DeepCopyInto(provider)
				return nil
			}
		}
	}
	return fmt.Errorf("%T %s is not in the snapshot", object, key)
}

func (r snapshotReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var listOptions client.ListOptions
	listOptions.ApplyOptions(opts)
	switch l := list.(type) {
	case *corev1.LimitRangeList:
		for _, lr := range r.s.LimitRanges {
			if listOptions.Namespace == "" || lr.Namespace == listOptions.Namespace {
				l.Items = append(l.Items, lr)
			}
		}
	case *v1alpha1.NodePoolList:
		l.Items = append([]v1alpha1.NodePool(nil), r.s.NodePools...)
	case *v1alpha1.NodeProviderList:
		l.Items = append([]v1alpha1.NodeProvider(nil), r.s.NodeProviders...)
	case *v1alpha1.NodeClaimList:
		l.Items = append([]v1alpha1.NodeClaim(nil), r.s.NodeClaims...)
	case *corev1.NodeList:
		l.Items = append([]corev1.Node(nil), r.s.Nodes...)
	case *corev1.PodList:
		l.Items = append([]corev1.Pod(nil), r.s.Pods...)
	case *appsv1.DaemonSetList:
		l.Items = append([]appsv1.DaemonSet(nil), r.s.DaemonSets...)
	case *policyv1.PodDisruptionBudgetList:
		l.Items = append([]policyv1.PodDisruptionBudget(nil), r.s.PodDisruptionBudgets...)
	case *resourcev1.ResourceSliceList:
		l.Items = append([]resourcev1.ResourceSlice(nil), r.s.ResourceSlices...)
	case *resourcev1.ResourceClaimList:
		l.Items = append([]resourcev1.ResourceClaim(nil), r.s.ResourceClaims...)
	case *resourcev1.DeviceClassList:
		l.Items = append([]resourcev1.DeviceClass(nil), r.s.DeviceClasses...)
	case *resourcev1.ResourceClaimTemplateList:
		l.Items = append([]resourcev1.ResourceClaimTemplate(nil), r.s.ResourceClaimTemplates...)
	default:
		return fmt.Errorf("%T is not in a snapshot", list)
	}
	return nil
}
