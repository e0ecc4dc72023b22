package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// placeholderPrefix names a Machine that has no providerID yet.
const placeholderPrefix = "clusterapi:///"

// Create makes the claim's Machine, or finds the one it has, and answers
// it once CAPI has given it a providerID.
func (p *Provider) Create(ctx context.Context, claim *v1alpha1.NodeClaim, _ provider.CreateOptions) (*provider.Instance, error) {
	shape, ok := p.shapeSettings(claim.Spec.Shape.Name)
	if !ok {
		return nil, provider.NewTerminal(fmt.Errorf("shape %s is not in clusterAPI.shapes of the NodeProvider", claim.Spec.Shape.Name))
	}
	machine, err := p.getMachine(ctx, claim.Name)
	switch {
	case err == nil:
		if err := p.checkOurs(machine, claim.Name); err != nil {
			return nil, err
		}
		if machine.GetDeletionTimestamp() != nil {
			return nil, provider.NewRetryable(fmt.Errorf("Machine %s/%s of claim %s is still being deleted", p.namespace, claim.Name, claim.Name), provisioningRetry)
		}
		if err := p.completeMachine(ctx, machine, shape); err != nil {
			return nil, err
		}
	case apierrors.IsNotFound(err):
		if machine, err = p.createMachine(ctx, claim, shape); err != nil {
			return nil, err
		}
	default:
		return nil, classify(fmt.Errorf("reading Machine %s/%s: %w", p.namespace, claim.Name, err))
	}
	return p.awaitProvisioned(ctx, machine)
}

func (p *Provider) checkOurs(machine *unstructured.Unstructured, claim string) error {
	labels := machine.GetLabels()
	if labels[v1alpha1.TagCluster] != p.clusterName || labels[v1alpha1.TagNodeClaim] != claim {
		return provider.NewTerminal(fmt.Errorf("Machine %s/%s exists and is not claim %s's of cluster %s", p.namespace, machine.GetName(), claim, p.clusterName))
	}
	return nil
}

func (p *Provider) getMachine(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	machine := &unstructured.Unstructured{}
	machine.SetGroupVersionKind(MachineKind)
	err := p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, machine)
	return machine, err
}

// createMachine makes the Machine first and then what it references, each
// owned by it: a claim deleted half-way leaves nothing behind that its
// Machine's deletion would not take along.
func (p *Provider) createMachine(ctx context.Context, claim *v1alpha1.NodeClaim, shape *v1alpha1.ClusterAPIShape) (*unstructured.Unstructured, error) {
	r, err := p.recipeOf(ctx, shape)
	if err != nil {
		return nil, err
	}
	// Templates are read first: a missing one fails the claim before
	// anything is made.
	infraTemplate, err := p.template(ctx, r.infrastructure)
	if err != nil {
		return nil, err
	}
	var bootstrapTemplate *unstructured.Unstructured
	if r.bootstrap != nil {
		if bootstrapTemplate, err = p.template(ctx, *r.bootstrap); err != nil {
			return nil, err
		}
	}
	infraGVK, err := p.gvkOf(r.infrastructure.APIGroup, strings.TrimSuffix(r.infrastructure.Kind, "Template"))
	if err != nil {
		return nil, err
	}
	labels := merge(r.labels, provider.Tags(p.clusterName, claim), map[string]string{LabelClusterName: p.cluster})
	machine := &unstructured.Unstructured{Object: map[string]any{}}
	machine.SetGroupVersionKind(MachineKind)
	machine.SetNamespace(p.namespace)
	machine.SetName(claim.Name)
	machine.SetLabels(labels)
	machine.SetAnnotations(merge(r.annotations, map[string]string{
		AnnotationTemplates: r.templatesKey(),
		annotationCPU:       claim.Spec.Shape.CPU.String(),
		annotationMemory:    claim.Spec.Shape.Memory.String(),
	}))
	spec := map[string]any{
		"clusterName": p.cluster,
		"infrastructureRef": map[string]any{
			"apiGroup": infraGVK.Group, "kind": infraGVK.Kind, "name": claim.Name,
		},
	}
	if r.bootstrap != nil {
		spec["bootstrap"] = map[string]any{"configRef": map[string]any{
			"apiGroup": r.bootstrap.APIGroup, "kind": strings.TrimSuffix(r.bootstrap.Kind, "Template"), "name": claim.Name,
		}}
	} else {
		// No bootstrap provider: the infrastructure joins the node by
		// itself, and CAPI wants to be told there is no data to wait for.
		spec["bootstrap"] = map[string]any{"dataSecretName": ""}
	}
	if r.version != "" {
		spec["version"] = r.version
	}
	if zone := claimZone(claim); zone != "" {
		spec["failureDomain"] = zone
	} else if r.failureDomain != "" {
		spec["failureDomain"] = r.failureDomain
	}
	machine.Object["spec"] = spec
	if err := p.kube.Create(ctx, machine); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, classify(fmt.Errorf("creating Machine %s/%s: %w", p.namespace, claim.Name, err))
		}
		// A concurrent Create of the same claim won; carry on with its
		// Machine, making what it may not have made yet.
		if machine, err = p.getMachine(ctx, claim.Name); err != nil {
			return nil, fmt.Errorf("reading Machine %s/%s: %w", p.namespace, claim.Name, err)
		}
		if err := p.checkOurs(machine, claim.Name); err != nil {
			return nil, err
		}
	}
	if _, err := p.clone(ctx, r.infrastructure, infraTemplate, machine); err != nil {
		return nil, err
	}
	if r.bootstrap != nil {
		if _, err := p.clone(ctx, *r.bootstrap, bootstrapTemplate, machine); err != nil {
			return nil, err
		}
	}
	return machine, nil
}

// completeMachine makes what an existing Machine of ours references but
// does not exist: a Create cut off between the Machine and its clones (a
// restart, a lost answer) is finished by the next Create, which finds the
// Machine; CAPI would otherwise wait for the missing objects for ever.
func (p *Provider) completeMachine(ctx context.Context, machine *unstructured.Unstructured, shape *v1alpha1.ClusterAPIShape) error {
	infraMissing, err := p.referenceMissing(ctx, machine, "spec", "infrastructureRef")
	if err != nil {
		return err
	}
	bootstrapMissing, err := p.referenceMissing(ctx, machine, "spec", "bootstrap", "configRef")
	if err != nil {
		return err
	}
	if !infraMissing && !bootstrapMissing {
		return nil
	}
	r, err := p.recipeOf(ctx, shape)
	if err != nil {
		return err
	}
	refs := []v1alpha1.ClusterAPITemplateReference{}
	if infraMissing {
		refs = append(refs, r.infrastructure)
	}
	if bootstrapMissing && r.bootstrap != nil {
		refs = append(refs, *r.bootstrap)
	}
	for _, ref := range refs {
		template, err := p.template(ctx, ref)
		if err != nil {
			return err
		}
		if _, err := p.clone(ctx, ref, template, machine); err != nil {
			return err
		}
	}
	return nil
}

// referenceMissing says whether the object the Machine references at
// fields is named but does not exist.
func (p *Provider) referenceMissing(ctx context.Context, machine *unstructured.Unstructured, fields ...string) (bool, error) {
	ref, _, _ := unstructured.NestedStringMap(machine.Object, fields...)
	if ref["name"] == "" {
		return false, nil
	}
	gvk, err := p.gvkOf(ref["apiGroup"], ref["kind"])
	if err != nil {
		return false, err
	}
	referenced := &unstructured.Unstructured{}
	referenced.SetGroupVersionKind(gvk)
	err = p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: ref["name"]}, referenced)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, classify(fmt.Errorf("reading %s %s/%s: %w", ref["kind"], p.namespace, ref["name"], err))
	}
	return false, nil
}

// claimZone is the zone the claim requires, if exactly one; it becomes the
// Machine's failure domain.
func claimZone(claim *v1alpha1.NodeClaim) string {
	for _, requirement := range claim.Spec.Requirements.NodeSelector {
		if requirement.Key == corev1.LabelTopologyZone && requirement.Operator == corev1.NodeSelectorOpIn && len(requirement.Values) == 1 {
			return requirement.Values[0]
		}
	}
	return ""
}

// awaitProvisioned waits a little for the Machine's providerID, and tells
// what CAPI reports when it does not come.
func (p *Provider) awaitProvisioned(ctx context.Context, machine *unstructured.Unstructured) (*provider.Instance, error) {
	deadline := time.Now().Add(p.wait)
	for {
		if err := p.failureOf(ctx, machine); err != nil {
			return nil, err
		}
		if id, _, _ := unstructured.NestedString(machine.Object, "spec", "providerID"); id != "" {
			return p.instanceOf(machine), nil
		}
		if !time.Now().Before(deadline) {
			return nil, provider.NewInProgress(fmt.Errorf("Machine %s/%s has no providerID yet: %s", p.namespace, machine.GetName(), waitingFor(machine)), provisioningRetry)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for Machine %s/%s: %w", p.namespace, machine.GetName(), ctx.Err())
		case <-time.After(p.poll):
		}
		fresh, err := p.getMachine(ctx, machine.GetName())
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, errors.New("Machine " + p.namespace + "/" + machine.GetName() + " was deleted while it was provisioning")
			}
			return nil, fmt.Errorf("reading Machine %s/%s: %w", p.namespace, machine.GetName(), err)
		}
		machine = fresh
	}
}

// waitingFor says what the Machine waits for, from its v1beta2
// conditions (the first of InfrastructureReady, BootstrapConfigReady that
// is not True).
func waitingFor(machine *unstructured.Unstructured) string {
	phase, _, _ := unstructured.NestedString(machine.Object, "status", "phase")
	for _, conditionType := range []string{"InfrastructureReady", "BootstrapConfigReady"} {
		if c := conditionOf(machine, conditionType); c != nil && c["status"] != "True" {
			return fmt.Sprintf("%s is %v (%v: %v)", conditionType, c["status"], c["reason"], c["message"])
		}
	}
	if phase == "" {
		return "the Machine controller has not reconciled it yet"
	}
	return "phase " + phase
}

func conditionOf(obj *unstructured.Unstructured, conditionType string) map[string]any {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if condition, ok := c.(map[string]any); ok && condition["type"] == conditionType {
			return condition
		}
	}
	return nil
}

// capacityFailure matches failure reasons and messages that say the
// infrastructure is out of room or quota. Infrastructure providers word
// them freely (CAPI's MachineStatusError has InsufficientResourcesError;
// clouds say quota, capacity, exhausted), so this is a pattern, not a list.
var capacityFailure = regexp.MustCompile(`(?i)insufficient|capacity|quota|exhaust|out of (stock|resources|memory)|no (free|available|space)|not enough`)

// failureOf reads the failure CAPI reports for a Machine or its
// infrastructure machine: failureReason/failureMessage (v1beta1 contract,
// status.deprecated.v1beta1 in v1beta2), or the Failed phase.
func (p *Provider) failureOf(ctx context.Context, machine *unstructured.Unstructured) error {
	reason, message := failureFields(machine)
	if reason == "" && message == "" {
		if ref, ok := refAt(machine.Object, "spec", "infrastructureRef"); ok {
			if gvk, err := p.gvkOf(ref.APIGroup, ref.Kind); err == nil {
				infra := &unstructured.Unstructured{}
				infra.SetGroupVersionKind(gvk)
				if err := p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: ref.Name}, infra); err == nil {
					reason, message = failureFields(infra)
				}
			}
		}
	}
	if phase, _, _ := unstructured.NestedString(machine.Object, "status", "phase"); reason == "" && message == "" && phase == "Failed" {
		reason, message = "Failed", waitingFor(machine)
	}
	if reason == "" && message == "" {
		return nil
	}
	err := fmt.Errorf("Cluster API reports Machine %s/%s failed: %s: %s", p.namespace, machine.GetName(), reason, message)
	if capacityFailure.MatchString(reason + " " + message) {
		return provider.NewInsufficientCapacity(err)
	}
	return provider.NewTerminal(err)
}

func failureFields(obj *unstructured.Unstructured) (reason, message string) {
	for _, path := range [][]string{{"status"}, {"status", "deprecated", "v1beta1"}} {
		r, _, _ := unstructured.NestedString(obj.Object, append(append([]string{}, path...), "failureReason")...)
		m, _, _ := unstructured.NestedString(obj.Object, append(append([]string{}, path...), "failureMessage")...)
		if r != "" || m != "" {
			return r, m
		}
	}
	return "", ""
}

// instanceOf is a Machine as the provider contract sees it.
func (p *Provider) instanceOf(machine *unstructured.Unstructured) *provider.Instance {
	labels := machine.GetLabels()
	instance := &provider.Instance{
		ProviderID: providerIDOf(machine),
		Name:       machine.GetName(),
		Capacity:   corev1.ResourceList{},
		Labels:     map[string]string{},
		Tags: map[string]string{
			v1alpha1.TagCluster:   labels[v1alpha1.TagCluster],
			v1alpha1.TagNodePool:  labels[v1alpha1.TagNodePool],
			v1alpha1.TagNodeClaim: labels[v1alpha1.TagNodeClaim],
		},
		State:     InstanceStateOf(machine),
		CreatedAt: machine.GetCreationTimestamp().Time,
	}
	annotations := machine.GetAnnotations()
	for name, key := range map[corev1.ResourceName]string{corev1.ResourceCPU: annotationCPU, corev1.ResourceMemory: annotationMemory} {
		if q, err := resource.ParseQuantity(annotations[key]); err == nil {
			instance.Capacity[name] = q
		}
	}
	zone, _, _ := unstructured.NestedString(machine.Object, "status", "failureDomain")
	if zone == "" {
		zone, _, _ = unstructured.NestedString(machine.Object, "spec", "failureDomain")
	}
	if zone != "" {
		instance.Labels[corev1.LabelTopologyZone] = zone
	}
	return instance
}

func providerIDOf(machine *unstructured.Unstructured) string {
	if id, _, _ := unstructured.NestedString(machine.Object, "spec", "providerID"); id != "" {
		return id
	}
	return placeholderPrefix + machine.GetNamespace() + "/" + machine.GetName()
}

// InstanceStateOf maps a Machine's phase to an instance state.
func InstanceStateOf(machine *unstructured.Unstructured) provider.InstanceState {
	if machine.GetDeletionTimestamp() != nil {
		return provider.InstanceDeleting
	}
	switch phase, _, _ := unstructured.NestedString(machine.Object, "status", "phase"); phase {
	case "Running", "Provisioned":
		return provider.InstanceRunning
	case "Deleting", "Deleted":
		return provider.InstanceDeleting
	}
	return provider.InstanceCreating
}

// List returns this cluster's claimscale Machines of the Cluster.
func (p *Provider) List(ctx context.Context) ([]*provider.Instance, error) {
	machines, err := p.ourMachines(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*provider.Instance, 0, len(machines))
	for i := range machines {
		out = append(out, p.instanceOf(&machines[i]))
	}
	return out, nil
}

func (p *Provider) ourMachines(ctx context.Context) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(MachineKind.GroupVersion().WithKind("MachineList"))
	if err := p.kube.List(ctx, list, client.InNamespace(p.namespace),
		client.MatchingLabels{v1alpha1.TagCluster: p.clusterName, LabelClusterName: p.cluster}); err != nil {
		return nil, classify(fmt.Errorf("listing Machines of Cluster %s/%s: %w", p.namespace, p.cluster, err))
	}
	return list.Items, nil
}

// find returns the Machine a providerID names, ours or not; NotFound when
// there is none.
func (p *Provider) find(ctx context.Context, providerID string) (*unstructured.Unstructured, error) {
	if rest, ok := strings.CutPrefix(providerID, placeholderPrefix); ok {
		namespace, name, ok := strings.Cut(rest, "/")
		if !ok || namespace == "" || name == "" {
			return nil, provider.NewTerminal(fmt.Errorf("providerID %q is not %s<namespace>/<name>", providerID, placeholderPrefix))
		}
		if namespace != p.namespace {
			return nil, provider.NewNotFound("no Machine %s in the Cluster's namespace %s", providerID, p.namespace)
		}
		machine, err := p.getMachine(ctx, name)
		if apierrors.IsNotFound(err) {
			return nil, provider.NewNotFound("Machine %s/%s", namespace, name)
		}
		if err != nil {
			return nil, classify(fmt.Errorf("reading Machine %s/%s: %w", namespace, name, err))
		}
		return machine, nil
	}
	if !strings.Contains(providerID, "://") {
		return nil, provider.NewTerminal(fmt.Errorf("%q is not a providerID", providerID))
	}
	// spec.providerID has no field selector: list the namespace.
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(MachineKind.GroupVersion().WithKind("MachineList"))
	if err := p.kube.List(ctx, list, client.InNamespace(p.namespace)); err != nil {
		return nil, classify(fmt.Errorf("listing Machines in %s: %w", p.namespace, err))
	}
	for i := range list.Items {
		if id, _, _ := unstructured.NestedString(list.Items[i].Object, "spec", "providerID"); id == providerID {
			return &list.Items[i], nil
		}
	}
	return nil, provider.NewNotFound("no Machine in %s has providerID %s", p.namespace, providerID)
}

// Get returns one of this cluster's Machines.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	machine, err := p.find(ctx, providerID)
	if err != nil {
		return nil, err
	}
	if machine.GetLabels()[v1alpha1.TagCluster] != p.clusterName {
		return nil, provider.NewNotFound("Machine %s/%s is not cluster %s's", p.namespace, machine.GetName(), p.clusterName)
	}
	return p.instanceOf(machine), nil
}

// Delete deletes one of this cluster's Machines; CAPI removes its
// infrastructure machine, bootstrap config and Node.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	machine, err := p.find(ctx, providerID)
	if provider.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if machine.GetLabels()[v1alpha1.TagCluster] != p.clusterName {
		return provider.NewTerminal(fmt.Errorf("refusing to delete Machine %s/%s: it has no %s=%s label", p.namespace, machine.GetName(), v1alpha1.TagCluster, p.clusterName))
	}
	p.forgetMachine(machine.GetName())
	if machine.GetDeletionTimestamp() != nil {
		return nil
	}
	// Preconditions: a Machine recreated under the same name since it was
	// read is not this one.
	uid := machine.GetUID()
	if err := p.kube.Delete(ctx, machine, client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return classify(fmt.Errorf("deleting Machine %s/%s: %w", p.namespace, machine.GetName(), err))
	}
	return nil
}

func isNoMatch(err error) bool { return meta.IsNoMatchError(err) }
