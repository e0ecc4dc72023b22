// Package clusterapitest runs a small infrastructure and bootstrap provider
// of Cluster API for tests, on any API server with the Cluster API CRDs and
// the test providers' CRDs (CRDPaths) installed.
//
// It follows the v1beta2 provider contracts
// (https://cluster-api.sigs.k8s.io/developer/providers/contracts/infra-machine,
// .../bootstrap-config, .../infra-cluster) in the fields CAPI core reads:
//
//   - TestCluster (infrastructure.test.claimscale.io): status.initialization.provisioned
//     and spec.controlPlaneEndpoint.
//   - TestControlPlane (controlplane.test.claimscale.io): a control plane
//     that is already there (the test's API server):
//     status.initialization.controlPlaneInitialized and
//     spec.controlPlaneEndpoint, so the Machine controller goes on to
//     worker Machines (it holds them until the control plane is initialized).
//   - TestConfig (bootstrap.test.claimscale.io): a bootstrap data Secret of
//     type cluster.x-k8s.io/secret with key "value", named in
//     status.dataSecretName, and status.initialization.dataSecretCreated.
//   - TestMachine: once its Machine has bootstrap data (the contract: an
//     infrastructure provider waits for Machine.spec.bootstrap.dataSecretName),
//     spec.providerID, status.initialization.provisioned and an address; and,
//     with a workload client, a kwok Node with that providerID, sized by the
//     machine's spec.capacity (cpu, memory), as a booted kubelet would
//     register it.
//   - A TestMachine whose spec.failureReason is set fails instead, with
//     status.failureReason and status.failureMessage (the v1beta1 contract's
//     terminal failure fields, which CAPI still reads).
//
// With CoreStandIn it also does the one thing of CAPI's Machine controller
// the provider waits for (internal/controllers/machine/machine_controller_phases.go,
// reconcileInfrastructure): copy the infrastructure machine's providerID to
// Machine.spec.providerID and set the phase. That is for package tests that
// run no CAPI controllers; end-to-end tests run the real ones instead.
// Assumption: the stand-in sets the phase Provisioned at once; the real
// controller goes through Pending and Provisioning first.
package clusterapitest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Version of Cluster API whose CRDs the tests install (the version
// hack/tools.sh builds the core manager at).
const Version = "v1.14.2"

// Kinds of the test providers.
var (
	InfraGroup        = "infrastructure.test.claimscale.io"
	BootstrapGroup    = "bootstrap.test.claimscale.io"
	MachineKind       = schema.GroupVersionKind{Group: InfraGroup, Version: "v1alpha1", Kind: "TestMachine"}
	TemplateKind      = schema.GroupVersionKind{Group: InfraGroup, Version: "v1alpha1", Kind: "TestMachineTemplate"}
	ClusterKind       = schema.GroupVersionKind{Group: InfraGroup, Version: "v1alpha1", Kind: "TestCluster"}
	ConfigKind        = schema.GroupVersionKind{Group: BootstrapGroup, Version: "v1alpha1", Kind: "TestConfig"}
	ConfigTmplKind    = schema.GroupVersionKind{Group: BootstrapGroup, Version: "v1alpha1", Kind: "TestConfigTemplate"}
	ControlPlaneGroup = "controlplane.test.claimscale.io"
	ControlPlaneKind  = schema.GroupVersionKind{Group: ControlPlaneGroup, Version: "v1alpha1", Kind: "TestControlPlane"}
	capiMachine       = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
)

// CRDPaths are Cluster API's CRDs (from the module cache, downloaded
// through hack/capi when missing) and the test providers'. root is the
// repository root.
func CRDPaths(root string) ([]string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/cluster-api@"+Version)
	cmd.Dir = filepath.Join(root, "hack", "capi")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("downloading sigs.k8s.io/cluster-api@%s: %w", Version, err)
	}
	var module struct{ Dir string }
	if err := json.Unmarshal(out, &module); err != nil || module.Dir == "" {
		return nil, fmt.Errorf("finding sigs.k8s.io/cluster-api@%s in the module cache: %s", Version, out)
	}
	return []string{
		filepath.Join(module.Dir, "core", "config", "crd", "bases"),
		filepath.Join(root, "pkg", "provider", "clusterapi", "clusterapitest", "crds"),
	}, nil
}

// Providers reconciles the test providers' objects.
type Providers struct {
	// Management holds the Machines and the provider objects.
	Management client.Client
	// Workload gets a kwok Node per provisioned machine; nil for none.
	Workload client.Client
	// CoreStandIn copies providerIDs to Machines (see the package doc).
	CoreStandIn bool
	// Interval between passes (100ms when zero).
	Interval time.Duration
}

// Run reconciles until ctx ends.
func (p *Providers) Run(ctx context.Context) {
	interval := p.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		_ = p.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Pass reconciles every object once.
func (p *Providers) Pass(ctx context.Context) error {
	for _, step := range []func(context.Context) error{p.clusters, p.controlPlanes, p.configs, p.machines} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p *Providers) list(ctx context.Context, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := p.Management.List(ctx, list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (p *Providers) clusters(ctx context.Context) error {
	return p.markInitialized(ctx, ClusterKind, "provisioned")
}

func (p *Providers) controlPlanes(ctx context.Context) error {
	return p.markInitialized(ctx, ControlPlaneKind, "controlPlaneInitialized")
}

// markInitialized gives each object of kind a control-plane endpoint (CAPI
// requires one before it goes on) and sets status.initialization.<field>,
// the contract's sign that the provider finished.
func (p *Providers) markInitialized(ctx context.Context, kind schema.GroupVersionKind, field string) error {
	objects, err := p.list(ctx, kind)
	if err != nil {
		return err
	}
	for i := range objects {
		c := &objects[i]
		if done, _, _ := unstructured.NestedBool(c.Object, "status", "initialization", field); done {
			continue
		}
		if _, found, _ := unstructured.NestedMap(c.Object, "spec", "controlPlaneEndpoint"); !found {
			patch := client.MergeFrom(c.DeepCopy())
			_ = unstructured.SetNestedMap(c.Object, map[string]any{"host": "127.0.0.1", "port": int64(6443)}, "spec", "controlPlaneEndpoint")
			if err := p.Management.Patch(ctx, c, patch); err != nil {
				return err
			}
		}
		patch := client.MergeFrom(c.DeepCopy())
		_ = unstructured.SetNestedField(c.Object, true, "status", "initialization", field)
		if err := p.Management.Status().Patch(ctx, c, patch); err != nil {
			return err
		}
	}
	return nil
}

func (p *Providers) configs(ctx context.Context) error {
	configs, err := p.list(ctx, ConfigKind)
	if err != nil {
		return err
	}
	for i := range configs {
		c := &configs[i]
		if created, _, _ := unstructured.NestedBool(c.Object, "status", "initialization", "dataSecretCreated"); created {
			continue
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.GetNamespace(), Name: c.GetName() + "-bootstrap",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: c.GetAPIVersion(), Kind: c.GetKind(), Name: c.GetName(), UID: c.GetUID()}}},
			Type: "cluster.x-k8s.io/secret",
			Data: map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
		}
		if err := p.Management.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		patch := client.MergeFrom(c.DeepCopy())
		_ = unstructured.SetNestedField(c.Object, secret.Name, "status", "dataSecretName")
		_ = unstructured.SetNestedField(c.Object, true, "status", "initialization", "dataSecretCreated")
		if err := p.Management.Status().Patch(ctx, c, patch); err != nil {
			return err
		}
	}
	return nil
}

// ProviderIDOf is the providerID the test provider gives a machine.
func ProviderIDOf(namespace, name string) string {
	return "clusterapi-test://" + namespace + "/" + name
}

func (p *Providers) machines(ctx context.Context) error {
	machines, err := p.list(ctx, MachineKind)
	if err != nil {
		return err
	}
	for i := range machines {
		m := &machines[i]
		if m.GetDeletionTimestamp() != nil {
			continue
		}
		owner, err := p.ownerMachine(ctx, m)
		if err != nil || owner == nil {
			continue
		}
		if reason, _, _ := unstructured.NestedString(m.Object, "spec", "failureReason"); reason != "" {
			if err := p.fail(ctx, m, reason); err != nil {
				return err
			}
			continue
		}
		if !p.CoreStandIn {
			if data, _, _ := unstructured.NestedString(owner.Object, "spec", "bootstrap", "dataSecretName"); data == "" {
				continue
			}
		}
		providerID := ProviderIDOf(m.GetNamespace(), m.GetName())
		if provisioned, _, _ := unstructured.NestedBool(m.Object, "status", "initialization", "provisioned"); !provisioned {
			patch := client.MergeFrom(m.DeepCopy())
			_ = unstructured.SetNestedField(m.Object, providerID, "spec", "providerID")
			if err := p.Management.Patch(ctx, m, patch); err != nil {
				return err
			}
			patch = client.MergeFrom(m.DeepCopy())
			_ = unstructured.SetNestedField(m.Object, true, "status", "initialization", "provisioned")
			_ = unstructured.SetNestedSlice(m.Object, []any{map[string]any{"type": "InternalIP", "address": "127.0.0.1"}}, "status", "addresses")
			if err := p.Management.Status().Patch(ctx, m, patch); err != nil {
				return err
			}
		}
		if p.Workload != nil {
			if err := p.registerNode(ctx, m, owner, providerID); err != nil {
				return err
			}
		}
		if p.CoreStandIn {
			if id, _, _ := unstructured.NestedString(owner.Object, "spec", "providerID"); id == "" {
				patch := client.MergeFrom(owner.DeepCopy())
				_ = unstructured.SetNestedField(owner.Object, providerID, "spec", "providerID")
				if err := p.Management.Patch(ctx, owner, patch); err != nil {
					return err
				}
				patch = client.MergeFrom(owner.DeepCopy())
				_ = unstructured.SetNestedField(owner.Object, "Provisioned", "status", "phase")
				if err := p.Management.Status().Patch(ctx, owner, patch); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (p *Providers) fail(ctx context.Context, m *unstructured.Unstructured, reason string) error {
	if current, _, _ := unstructured.NestedString(m.Object, "status", "failureReason"); current == reason {
		return nil
	}
	message, _, _ := unstructured.NestedString(m.Object, "spec", "failureMessage")
	patch := client.MergeFrom(m.DeepCopy())
	_ = unstructured.SetNestedField(m.Object, reason, "status", "failureReason")
	_ = unstructured.SetNestedField(m.Object, message, "status", "failureMessage")
	return p.Management.Status().Patch(ctx, m, patch)
}

// ownerMachine is the Machine that owns an infrastructure machine.
func (p *Providers) ownerMachine(ctx context.Context, m *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for _, ref := range m.GetOwnerReferences() {
		if ref.Kind != "Machine" || !strings.HasPrefix(ref.APIVersion, "cluster.x-k8s.io/") {
			continue
		}
		owner := &unstructured.Unstructured{}
		owner.SetGroupVersionKind(capiMachine)
		if err := p.Management.Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: ref.Name}, owner); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return owner, nil
	}
	return nil, nil
}

// registerNode makes the kwok Node a booted machine's kubelet would.
func (p *Providers) registerNode(ctx context.Context, m, owner *unstructured.Unstructured, providerID string) error {
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		value, _, _ := unstructured.NestedString(m.Object, "spec", "capacity", string(name))
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return fmt.Errorf("TestMachine %s/%s: spec.capacity.%s %q: %w", m.GetNamespace(), m.GetName(), name, value, err)
		}
		capacity[name] = q
	}
	labels := map[string]string{corev1.LabelHostname: owner.GetName(), "type": "kwok"}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: owner.GetName(), Labels: labels,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:   corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if err := p.Workload.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", node.Name, err)
	}
	return nil
}
