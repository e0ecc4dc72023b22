package kubectlplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	resourceapiv1 "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/internal/scheduling"
)

// workload is what the files given to simulate -f would add to the
// cluster: the pods their controllers would make, pending, and the
// DaemonSets, which follow nodes instead.
type workload struct {
	pods       []*corev1.Pod
	daemonSets []*appsv1.DaemonSet
	// limitRanges of the files apply to their namespace's pods, with the
	// cluster's, as if applied together.
	limitRanges []corev1.LimitRange
	// skipped names the objects that make no pods (a Service, a
	// ConfigMap, a Namespace), so that the user sees they were read.
	skipped []string
	// The DRA objects of the files: templates the pods' claims are made
	// from, claims the pods name, and device classes, added to the
	// cluster's (a file's class replaces the cluster's of its name).
	claimTemplates []resourcev1.ResourceClaimTemplate
	claims         []resourcev1.ResourceClaim
	deviceClasses  []resourcev1.DeviceClass
}

// readWorkloads reads every path, as kubectl apply -f does: a file, a
// directory's .yaml, .yml and .json files (not its subdirectories), or
// "-" for stdin. Each may hold many documents, and `kind: List`.
func readWorkloads(paths []string, stdin io.Reader, namespace string) (*workload, error) {
	w := &workload{}
	for _, path := range paths {
		if path == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading stdin: %w", err)
			}
			if err := w.read("stdin", data, namespace); err != nil {
				return nil, err
			}
			continue
		}
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		files := []string{path}
		if info.IsDir() {
			entries, err := os.ReadDir(path)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", path, err)
			}
			files = files[:0]
			for _, entry := range entries {
				switch filepath.Ext(entry.Name()) {
				case ".yaml", ".yml", ".json":
					if !entry.IsDir() {
						files = append(files, filepath.Join(path, entry.Name()))
					}
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("%s: no .yaml, .yml or .json file in the directory", path)
			}
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", file, err)
			}
			if err := w.read(file, data, namespace); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// read adds the objects of one file's documents.
func (w *workload) read(source string, data []byte, namespace string) error {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		object := map[string]any{}
		if err := decoder.Decode(&object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decoding %s: %w", source, err)
		}
		if len(object) == 0 {
			continue
		}
		if err := w.add(source, &unstructured.Unstructured{Object: object}, namespace); err != nil {
			return err
		}
	}
}

// add turns one object into the pods it makes, or notes it as skipped.
func (w *workload) add(source string, object *unstructured.Unstructured, namespace string) error {
	gvk := object.GroupVersionKind()
	if gvk.Kind == "" {
		return fmt.Errorf("%s: an object without a kind", source)
	}
	if object.IsList() {
		return object.EachListItem(func(item runtime.Object) error {
			return w.add(source, item.(*unstructured.Unstructured), namespace)
		})
	}
	into := func(typed any) error {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object.Object, typed); err != nil {
			return fmt.Errorf("%s: decoding %s %s: %w", source, gvk.Kind, object.GetName(), err)
		}
		return nil
	}
	switch gvk.GroupKind().String() {
	case "Deployment.apps":
		var o appsv1.Deployment
		if err := into(&o); err != nil {
			return err
		}
		w.pods = append(w.pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Replicas))...)
	case "StatefulSet.apps":
		var o appsv1.StatefulSet
		if err := into(&o); err != nil {
			return err
		}
		w.pods = append(w.pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Replicas))...)
	case "ReplicaSet.apps":
		var o appsv1.ReplicaSet
		if err := into(&o); err != nil {
			return err
		}
		w.pods = append(w.pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Replicas))...)
	case "Job.batch":
		var o batchv1.Job
		if err := into(&o); err != nil {
			return err
		}
		w.pods = append(w.pods, podsOf(o.ObjectMeta, namespace, o.Spec.Template, replicas(o.Spec.Parallelism))...)
	case "CronJob.batch":
		// One run's pods: the runs of a schedule come one at a time.
		var o batchv1.CronJob
		if err := into(&o); err != nil {
			return err
		}
		w.pods = append(w.pods, podsOf(o.ObjectMeta, namespace, o.Spec.JobTemplate.Spec.Template, replicas(o.Spec.JobTemplate.Spec.Parallelism))...)
	case "Pod":
		var o corev1.Pod
		if err := into(&o); err != nil {
			return err
		}
		w.pods = append(w.pods, podsOf(o.ObjectMeta, namespace, corev1.PodTemplateSpec{ObjectMeta: o.ObjectMeta, Spec: o.Spec}, 1)...)
	case "DaemonSet.apps":
		var o appsv1.DaemonSet
		if err := into(&o); err != nil {
			return err
		}
		inNamespace(&o.ObjectMeta, namespace)
		o.UID = simulatedUID(o.ObjectMeta)
		w.daemonSets = append(w.daemonSets, &o)
	case "LimitRange":
		var o corev1.LimitRange
		if err := into(&o); err != nil {
			return err
		}
		inNamespace(&o.ObjectMeta, namespace)
		w.limitRanges = append(w.limitRanges, o)
	case "ResourceClaimTemplate.resource.k8s.io":
		var o resourcev1.ResourceClaimTemplate
		if err := into(&o); err != nil {
			return err
		}
		inNamespace(&o.ObjectMeta, namespace)
		// As the API server stores it: a request's allocation mode and
		// count defaulted.
		resourceapiv1.SetObjectDefaults_ResourceClaimTemplate(&o)
		w.claimTemplates = append(w.claimTemplates, o)
	case "ResourceClaim.resource.k8s.io":
		var o resourcev1.ResourceClaim
		if err := into(&o); err != nil {
			return err
		}
		inNamespace(&o.ObjectMeta, namespace)
		o.UID = simulatedUID(o.ObjectMeta)
		resourceapiv1.SetObjectDefaults_ResourceClaim(&o)
		w.claims = append(w.claims, o)
	case "DeviceClass.resource.k8s.io":
		var o resourcev1.DeviceClass
		if err := into(&o); err != nil {
			return err
		}
		w.deviceClasses = append(w.deviceClasses, o)
	default:
		what := gvk.Kind
		if name := object.GetName(); name != "" {
			what += " " + name
		}
		w.skipped = append(w.skipped, what)
	}
	return nil
}

// skippedNote says which objects of the files make no pods, in one line.
func (w *workload) skippedNote() string {
	if len(w.skipped) == 0 {
		return ""
	}
	skipped := append([]string(nil), w.skipped...)
	sort.Strings(skipped)
	return fmt.Sprintf("skipped %d %s that make no pods: %s", len(skipped), plural(len(skipped), "object", "objects"), strings.Join(skipped, ", "))
}

func replicas(n *int32) int {
	if n == nil {
		return 1
	}
	return int(*n)
}

// podsOf makes n pending pods of a template, named after their owner.
func podsOf(owner metav1.ObjectMeta, namespace string, template corev1.PodTemplateSpec, n int) []*corev1.Pod {
	if owner.Namespace != "" {
		namespace = owner.Namespace
	}
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
		pod.Name = fmt.Sprintf("%s-%d", owner.Name, i)
		pod.Namespace = namespace
		pod.UID = simulatedUID(pod.ObjectMeta)
		pod.Status.Phase = corev1.PodPending
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		pods = append(pods, pod)
	}
	return pods
}

// plural picks the word for n things.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// claimsFor makes the ResourceClaims the ResourceClaim controller would
// make for a pod's claims from templates, as it names them in the pod's
// status, and says which template is missing. Templates come from the
// files, else from the cluster.
func (w *workload) claimsFor(pod *corev1.Pod, cluster []resourcev1.ResourceClaimTemplate) ([]*resourcev1.ResourceClaim, error) {
	var out []*resourcev1.ResourceClaim
	for _, ref := range pod.Spec.ResourceClaims {
		if ref.ResourceClaimTemplateName == nil {
			continue
		}
		template, ok := findTemplate(w.claimTemplates, pod.Namespace, *ref.ResourceClaimTemplateName)
		if !ok {
			if template, ok = findTemplate(cluster, pod.Namespace, *ref.ResourceClaimTemplateName); !ok {
				return nil, fmt.Errorf("its claim %s names ResourceClaimTemplate %s/%s, which is neither in the files nor in the cluster", ref.Name, pod.Namespace, *ref.ResourceClaimTemplateName)
			}
		}
		name := pod.Name + "-" + ref.Name
		claim := &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: pod.Namespace, UID: types.UID("simulated-" + pod.Namespace + "-" + name),
				Labels: template.Spec.Labels, Annotations: template.Spec.Annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			},
			Spec: *template.Spec.Spec.DeepCopy(),
		}
		out = append(out, claim)
		pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: ref.Name, ResourceClaimName: ptr.To(name)})
	}
	return out, nil
}

func findTemplate(templates []resourcev1.ResourceClaimTemplate, namespace, name string) (resourcev1.ResourceClaimTemplate, bool) {
	for _, t := range templates {
		if t.Namespace == namespace && t.Name == name {
			return t, true
		}
	}
	return resourcev1.ResourceClaimTemplate{}, false
}

// withDevices adds the files' claims and device classes to the cluster's.
func (w *workload) withDevices(dra scheduling.DRA) scheduling.DRA {
	out := scheduling.DRA{ResourceSlices: dra.ResourceSlices, ResourceClaims: slices.Clone(dra.ResourceClaims)}
	for i := range w.claims {
		out.ResourceClaims = append(out.ResourceClaims, &w.claims[i])
	}
	replaced := map[string]bool{}
	for i := range w.deviceClasses {
		replaced[w.deviceClasses[i].Name] = true
		out.DeviceClasses = append(out.DeviceClasses, &w.deviceClasses[i])
	}
	for _, c := range dra.DeviceClasses {
		if !replaced[c.Name] {
			out.DeviceClasses = append(out.DeviceClasses, c)
		}
	}
	return out
}

// clusterTemplates reads the cluster's ResourceClaimTemplates when a pod
// of the files makes its claims from a template the files lack.
func (w *workload) clusterTemplates(ctx context.Context, kube client.Reader) ([]resourcev1.ResourceClaimTemplate, error) {
	needed := false
	for _, pod := range w.pods {
		for _, ref := range pod.Spec.ResourceClaims {
			if ref.ResourceClaimTemplateName != nil {
				if _, ok := findTemplate(w.claimTemplates, pod.Namespace, *ref.ResourceClaimTemplateName); !ok {
					needed = true
				}
			}
		}
	}
	if !needed {
		return nil, nil
	}
	var list resourcev1.ResourceClaimTemplateList
	if err := kube.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing ResourceClaimTemplates: %w", err)
	}
	return list.Items, nil
}

// inNamespace puts an object of the files that names no namespace into the
// one simulate was given, as kubectl apply would.
func inNamespace(object *metav1.ObjectMeta, namespace string) {
	if object.Namespace == "" {
		object.Namespace = namespace
	}
}

// simulatedUID is the object's UID, or one made up from its name where it
// has none (the files' objects were never created), for what refers to it
// by UID: owner references, a claim's reservedFor.
func simulatedUID(object metav1.ObjectMeta) types.UID {
	if object.UID != "" {
		return object.UID
	}
	return types.UID("simulated-" + object.Namespace + "-" + object.Name)
}
