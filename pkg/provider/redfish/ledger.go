package redfish

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// LabelLease marks a ConfigMap as the lease of a server; its value is the
// NodeProvider's name.
const LabelLease = "claimscale.io/redfish-lease"

// lease is the record that a server is on for one of our claims. A
// server has no tags of its own, so the lease is its ownership tag: it is
// written before the server is powered on and removed only once it is
// off, so a server that is on without one was not powered on by us and
// is never powered off. Each lease is a ConfigMap of its own, created
// (never updated into being), so two controllers cannot take one server.
type lease struct {
	// Cluster is the cluster whose claim it is: two clusters may share an
	// inventory (and its room), never a server.
	Cluster     string
	Server      string
	UUID        string
	Claim       string
	Pool        string
	PoweredOnAt time.Time
	// Asleep: the claim's machine was suspended; the server is off and
	// stays ours.
	Asleep bool

	object *corev1.ConfigMap
}

// ledger keeps the leases of one NodeProvider in the controller's
// namespace.
type ledger struct {
	kube         client.Client
	namespace    string
	cluster      string
	nodeProvider string
}

func (l *ledger) name(server string) string {
	return "redfish-" + l.nodeProvider + "-" + server
}

// leases returns every lease of the NodeProvider's servers, this
// cluster's and others', by server.
func (l *ledger) leases(ctx context.Context) (map[string]*lease, error) {
	var list corev1.ConfigMapList
	if err := l.kube.List(ctx, &list, client.InNamespace(l.namespace), client.MatchingLabels{LabelLease: l.nodeProvider}); err != nil {
		return nil, fmt.Errorf("listing the leases of NodeProvider %s: %w", l.nodeProvider, err)
	}
	leases := map[string]*lease{}
	for i := range list.Items {
		cm := &list.Items[i]
		poweredOnAt, _ := time.Parse(time.RFC3339, cm.Data["poweredOnAt"])
		leases[cm.Data["server"]] = &lease{
			Cluster: cm.Annotations[v1alpha1.TagCluster], Server: cm.Data["server"], UUID: cm.Data["uuid"], Claim: cm.Data["claim"], Pool: cm.Data["pool"],
			PoweredOnAt: poweredOnAt, Asleep: cm.Data["asleep"] == "true", object: cm,
		}
	}
	return leases, nil
}

// take records the lease; a server already leased is a conflict the
// caller answers by choosing another.
func (l *ledger) take(ctx context.Context, taken *lease) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: l.namespace, Name: l.name(taken.Server),
			Labels:      map[string]string{LabelLease: l.nodeProvider},
			Annotations: map[string]string{v1alpha1.TagCluster: l.cluster},
		},
		Data: leaseData(taken),
	}
	if err := l.kube.Create(ctx, cm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return errLeased
		}
		return fmt.Errorf("recording the lease of server %s for claim %s: %w", taken.Server, taken.Claim, err)
	}
	taken.object = cm
	return nil
}

// update writes a changed lease (asleep, powered on again).
func (l *ledger) update(ctx context.Context, changed *lease) error {
	cm := changed.object.DeepCopy()
	cm.Data = leaseData(changed)
	if err := l.kube.Update(ctx, cm); err != nil {
		return fmt.Errorf("updating the lease of server %s: %w", changed.Server, err)
	}
	changed.object = cm
	return nil
}

// release removes the lease of a server that is off again.
func (l *ledger) release(ctx context.Context, released *lease) error {
	err := l.kube.Delete(ctx, released.object, client.Preconditions{UID: &released.object.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing the lease of server %s: %w", released.Server, err)
	}
	return nil
}

func leaseData(l *lease) map[string]string {
	asleep := "false"
	if l.Asleep {
		asleep = "true"
	}
	return map[string]string{
		"server": l.Server, "uuid": l.UUID, "claim": l.Claim, "pool": l.Pool,
		"poweredOnAt": l.PoweredOnAt.UTC().Format(time.RFC3339), "asleep": asleep,
	}
}

var errLeased = provider.NewRetryable(fmt.Errorf("the server was leased by another call"), 0)
