package clusterapi

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// recipe is what one shape's Machines are made from, resolved: the
// templates (from the NodeProvider or its MachineDeployment) and what the
// MachineDeployment adds.
type recipe struct {
	infrastructure v1alpha1.ClusterAPITemplateReference
	bootstrap      *v1alpha1.ClusterAPITemplateReference
	version        string
	failureDomain  string
	// machineDeployment is the MachineDeployment read, nil for templates
	// named directly.
	machineDeployment *unstructured.Unstructured
	// labels and annotations of the MachineDeployment's machine template.
	labels, annotations map[string]string
}

// templatesKey names the templates, for AnnotationTemplates.
func (r recipe) templatesKey() string {
	key := templateKey(r.infrastructure)
	if r.bootstrap != nil {
		key += "," + templateKey(*r.bootstrap)
	}
	return key
}

func templateKey(ref v1alpha1.ClusterAPITemplateReference) string {
	return ref.Kind + "." + ref.APIGroup + "/" + ref.Name
}

func (p *Provider) shapeSettings(name string) (*v1alpha1.ClusterAPIShape, bool) {
	for i := range p.settings.Shapes {
		if p.settings.Shapes[i].Name == name {
			return &p.settings.Shapes[i], true
		}
	}
	return nil, false
}

// recipeOf resolves a shape to its templates.
func (p *Provider) recipeOf(ctx context.Context, shape *v1alpha1.ClusterAPIShape) (recipe, error) {
	if shape.MachineDeployment == "" {
		if shape.InfrastructureTemplate == nil {
			return recipe{}, provider.NewTerminal(fmt.Errorf("shape %s names neither a machineDeployment nor an infrastructureTemplate", shape.Name))
		}
		return recipe{infrastructure: *shape.InfrastructureTemplate, bootstrap: shape.BootstrapConfigTemplate, version: shape.Version}, nil
	}
	md := &unstructured.Unstructured{}
	md.SetGroupVersionKind(MachineDeploymentKind)
	if err := p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: shape.MachineDeployment}, md); err != nil {
		if apierrors.IsNotFound(err) {
			return recipe{}, provider.NewTerminal(fmt.Errorf("MachineDeployment %s/%s of shape %s not found", p.namespace, shape.MachineDeployment, shape.Name))
		}
		return recipe{}, classify(fmt.Errorf("reading MachineDeployment %s/%s: %w", p.namespace, shape.MachineDeployment, err))
	}
	if cluster, _, _ := unstructured.NestedString(md.Object, "spec", "clusterName"); cluster != p.cluster {
		return recipe{}, provider.NewTerminal(fmt.Errorf("MachineDeployment %s/%s belongs to Cluster %q, not %s", p.namespace, shape.MachineDeployment, cluster, p.cluster))
	}
	r := recipe{machineDeployment: md}
	var ok bool
	if r.infrastructure, ok = refAt(md.Object, "spec", "template", "spec", "infrastructureRef"); !ok {
		return recipe{}, provider.NewTerminal(fmt.Errorf("MachineDeployment %s/%s has no spec.template.spec.infrastructureRef", p.namespace, shape.MachineDeployment))
	}
	if bootstrap, ok := refAt(md.Object, "spec", "template", "spec", "bootstrap", "configRef"); ok {
		r.bootstrap = &bootstrap
	}
	r.version, _, _ = unstructured.NestedString(md.Object, "spec", "template", "spec", "version")
	r.failureDomain, _, _ = unstructured.NestedString(md.Object, "spec", "template", "spec", "failureDomain")
	r.labels, _, _ = unstructured.NestedStringMap(md.Object, "spec", "template", "metadata", "labels")
	// Labels its selector matches would let the MachineDeployment's
	// MachineSets adopt the Machine and scale it away: they are not copied.
	selector, _, _ := unstructured.NestedStringMap(md.Object, "spec", "selector", "matchLabels")
	for key := range selector {
		delete(r.labels, key)
	}
	for _, key := range []string{"cluster.x-k8s.io/deployment-name", "cluster.x-k8s.io/set-name", "machine-template-hash"} {
		delete(r.labels, key)
	}
	r.annotations, _, _ = unstructured.NestedStringMap(md.Object, "spec", "template", "metadata", "annotations")
	return r, nil
}

// refAt reads a v1beta2 ContractVersionedObjectReference.
func refAt(obj map[string]any, fields ...string) (v1alpha1.ClusterAPITemplateReference, bool) {
	ref, found, _ := unstructured.NestedStringMap(obj, fields...)
	if !found || ref["kind"] == "" || ref["name"] == "" {
		return v1alpha1.ClusterAPITemplateReference{}, false
	}
	return v1alpha1.ClusterAPITemplateReference{APIGroup: ref["apiGroup"], Kind: ref["kind"], Name: ref["name"]}, true
}

// gvkOf finds the served version of a group and kind.
func (p *Provider) gvkOf(group, kind string) (schema.GroupVersionKind, error) {
	mapping, err := p.kube.RESTMapper().RESTMapping(schema.GroupKind{Group: group, Kind: kind})
	if err != nil {
		if meta.IsNoMatchError(err) {
			return schema.GroupVersionKind{}, provider.NewTerminal(fmt.Errorf("kind %s.%s is not served by the management cluster: is its provider installed?", kind, group))
		}
		return schema.GroupVersionKind{}, fmt.Errorf("finding kind %s.%s: %w", kind, group, err)
	}
	return mapping.GroupVersionKind, nil
}

// template reads a template in the Cluster's namespace.
func (p *Provider) template(ctx context.Context, ref v1alpha1.ClusterAPITemplateReference) (*unstructured.Unstructured, error) {
	gvk, err := p.gvkOf(ref.APIGroup, ref.Kind)
	if err != nil {
		return nil, err
	}
	template := &unstructured.Unstructured{}
	template.SetGroupVersionKind(gvk)
	if err := p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: ref.Name}, template); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, provider.NewTerminal(fmt.Errorf("%s %s/%s not found", ref.Kind, p.namespace, ref.Name))
		}
		return nil, classify(fmt.Errorf("reading %s %s/%s: %w", ref.Kind, p.namespace, ref.Name, err))
	}
	return template, nil
}

// clone makes the object a template stands for, as CAPI's MachineSet
// controller does (internal/util/external, CreateFromTemplate): the
// template's spec.template.spec and metadata, the cloned-from
// annotations, the Machine as owner; named and tagged like the Machine.
func (p *Provider) clone(ctx context.Context, ref v1alpha1.ClusterAPITemplateReference, template, machine *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	kind := strings.TrimSuffix(ref.Kind, "Template")
	gvk, err := p.gvkOf(ref.APIGroup, kind)
	if err != nil {
		return nil, err
	}
	spec, _, _ := unstructured.NestedMap(template.Object, "spec", "template", "spec")
	labels, _, _ := unstructured.NestedStringMap(template.Object, "spec", "template", "metadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(template.Object, "spec", "template", "metadata", "annotations")
	obj := &unstructured.Unstructured{Object: map[string]any{}}
	if spec != nil {
		obj.Object["spec"] = spec
	}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(p.namespace)
	obj.SetName(machine.GetName())
	obj.SetLabels(merge(labels, machine.GetLabels()))
	obj.SetAnnotations(merge(annotations, map[string]string{
		annotationClonedFromName:  ref.Name,
		annotationClonedFromGroup: ref.Kind + "." + ref.APIGroup,
	}))
	obj.SetOwnerReferences(machineOwner(machine))
	if err := p.kube.Create(ctx, obj); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, classify(fmt.Errorf("creating %s %s/%s from %s: %w", kind, p.namespace, obj.GetName(), ref.Name, err))
		}
		// A retry, or a racing Create of the same claim: adopt it when it
		// is the claim's.
		existing := &unstructured.Unstructured{}
		existing.SetGroupVersionKind(gvk)
		if err := p.kube.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
			return nil, fmt.Errorf("reading %s %s/%s: %w", kind, p.namespace, obj.GetName(), err)
		}
		if existing.GetLabels()[v1alpha1.TagNodeClaim] != machine.GetLabels()[v1alpha1.TagNodeClaim] ||
			existing.GetLabels()[v1alpha1.TagCluster] != p.clusterName {
			return nil, provider.NewTerminal(fmt.Errorf("%s %s/%s exists and is not this claim's", kind, p.namespace, obj.GetName()))
		}
		return existing, nil
	}
	return obj, nil
}

func machineOwner(machine *unstructured.Unstructured) []metav1.OwnerReference {
	controller := true
	return []metav1.OwnerReference{{
		APIVersion: MachineKind.GroupVersion().String(), Kind: MachineKind.Kind,
		Name: machine.GetName(), UID: machine.GetUID(), Controller: &controller,
	}}
}

// merge returns the union of maps, later ones winning.
func merge(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
