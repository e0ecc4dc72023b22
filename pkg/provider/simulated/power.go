package simulated

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

var _ provider.PowerManager = (*Provider)(nil)

// Suspend stops a machine: its record says since when, its kubelet stops,
// and the registrar does not make its Node again while it is stopped. The
// Node it has is left to the claim lifecycle, which deletes it after the
// stop, as it would a real machine's NotReady Node. A stopped machine is
// success; one that is not this cluster's is refused; one that is gone is
// NotFound.
func (p *Provider) Suspend(ctx context.Context, providerID string) error {
	return p.power(ctx, providerID, "suspending", func(m *machine, now time.Time) bool {
		if m.suspended() {
			return false
		}
		m.suspendedAt = now.UTC().Round(0)
		return true
	})
}

// Resume starts a stopped machine: its kubelet registers the same Node
// again (same name and providerID, its own credentials) once the
// NodeProvider's startDelay has passed. A running machine is success.
func (p *Provider) Resume(ctx context.Context, providerID string) error {
	err := p.power(ctx, providerID, "resuming", func(m *machine, now time.Time) bool {
		if !m.suspended() {
			return false
		}
		m.suspendedAt = time.Time{}
		m.resumedAt = now.UTC().Round(0)
		m.bootAt = now.Add(p.settings.startDelay).UTC().Round(0)
		m.registeredAt = time.Time{}
		return true
	})
	if err == nil {
		wakeRegistrars(p.namespace, p.cluster)
	}
	return err
}

// power changes a machine of this cluster by change, which reports
// whether it changed anything, and writes the record back locked to the
// version it read, so two calls at once cannot both act on a stale one.
func (p *Provider) power(ctx context.Context, providerID, doing string, change func(*machine, time.Time) bool) error {
	name, err := parseProviderID(providerID)
	if err != nil {
		return err
	}
	var cm corev1.ConfigMap
	err = p.kube.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return provider.NewNotFound("simulated machine %s of cluster %s", name, p.cluster)
	case err != nil:
		return fmt.Errorf("%s machine %s: reading ConfigMap %s/%s: %w", doing, name, p.namespace, name, err)
	case !p.owns(&cm):
		return provider.NewTerminal(fmt.Errorf("refusing %s machine %s: ConfigMap %s/%s carries no %s tag for cluster %s", doing, name, p.namespace, name, v1alpha1.TagCluster, p.cluster))
	case cm.DeletionTimestamp != nil:
		return provider.NewNotFound("simulated machine %s of cluster %s is being deleted", name, p.cluster)
	}
	m, err := machineFromConfigMap(&cm)
	if err != nil {
		return provider.NewTerminal(err)
	}
	if !change(m, p.clock.Now()) {
		return nil
	}
	updated, err := m.configMap(p.namespace)
	if err != nil {
		return provider.NewTerminal(fmt.Errorf("%s machine %s: encoding its record: %w", doing, name, err))
	}
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	cm.Data = updated.Data
	if err := p.kube.Patch(ctx, &cm, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return provider.NewNotFound("simulated machine %s of cluster %s", name, p.cluster)
		}
		// A conflict is another writer (the registrar recording the Node):
		// asked again, the call reads the record anew.
		return fmt.Errorf("%s machine %s: writing ConfigMap %s/%s: %w", doing, name, p.namespace, name, err)
	}
	return nil
}
