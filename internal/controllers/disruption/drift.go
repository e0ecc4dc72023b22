package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/scheduling"
	"github.com/claimscale/claimscale/pkg/provider"
)

// AnnotationProviderHash records on a claim the hash of its NodeProvider's
// settings (ProviderHash) as they were when the claim was made, so a later
// change to them shows as drift.
const AnnotationProviderHash = v1alpha1.AnnotationProviderHash

// ProviderHash identifies the settings a NodeProvider makes machines with:
// the type and its settings block. Credentials are not part of it (a
// rotated secret makes no machine different), nor are the simulated
// provider's failure injection and boot delay, which describe the
// simulation rather than the machine.
func ProviderHash(nodeProvider *v1alpha1.NodeProvider) string {
	settings := struct {
		Type       v1alpha1.ProviderType        `json:"type"`
		Proxmox    *v1alpha1.ProxmoxSettings    `json:"proxmox,omitempty"`
		Cloudscale *v1alpha1.CloudscaleSettings `json:"cloudscale,omitempty"`
		Zones      []string                     `json:"zones,omitempty"`
		// A shape pointed at other CAPI templates makes other machines.
		ClusterAPI *v1alpha1.ClusterAPISettings `json:"clusterAPI,omitempty"`
	}{Type: nodeProvider.Spec.Type, Proxmox: nodeProvider.Spec.Proxmox, Cloudscale: cloudscaleForHash(nodeProvider.Spec.Cloudscale), ClusterAPI: nodeProvider.Spec.ClusterAPI}
	if nodeProvider.Spec.Simulated != nil {
		settings.Zones = nodeProvider.Spec.Simulated.Zones
	}
	hasher := fnv.New64a()
	// json.Marshal of these types cannot fail; maps are written sorted.
	encoded, _ := json.Marshal(settings)
	_, _ = hasher.Write(encoded)
	return fmt.Sprintf("%016x", hasher.Sum64())
}

// cloudscaleForHash is the part of cloudscale settings that makes servers
// what they are: the error patterns only classify the API's answers, and
// zones with one plain entry are the older single zone, so moving to them
// (or back) drifts no node.
func cloudscaleForHash(settings *v1alpha1.CloudscaleSettings) *v1alpha1.CloudscaleSettings {
	if settings == nil {
		return nil
	}
	s := *settings
	s.ErrorPatterns = nil
	if len(s.Zones) == 1 && s.Zone == "" && s.Zones[0].Interfaces == nil && s.Zones[0].ServerGroups == nil {
		s.Zone, s.Zones = s.Zones[0].Name, nil
	}
	return &s
}

// Drift reasons, as the Drifted condition's reason.
const (
	driftLabels        = v1alpha1.ReasonLabelsDrifted
	driftTaints        = v1alpha1.ReasonTaintsDrifted
	driftStartupTaints = v1alpha1.ReasonStartupTaintsDrifted
	driftKubelet       = v1alpha1.ReasonKubeletDrifted
	driftShape         = v1alpha1.ReasonShapeDrifted
	driftProvider      = v1alpha1.ReasonProviderDrifted
)

// driftOf says whether a claim no longer matches what its pool would make
// now, and which field moved: the pool's template (labels, taints, startup
// taints, kubelet settings; found through the template hash the claim
// recorded), the shapes the pool offers, or the provider's settings
// (providerHash is the current ProviderHash, "" when unknown). A claim
// that recorded no hash is not compared on that count.
func driftOf(claim *v1alpha1.NodeClaim, pool *v1alpha1.NodePool, providerHash string) (reason, message string) {
	if recorded := claim.Annotations[v1alpha1.AnnotationTemplateHash]; recorded != "" && recorded != pool.TemplateHash(claim.Spec.Shape) {
		field, reason := "spec.template.kubelet", driftKubelet
		switch {
		case !equality.Semantic.DeepEqual(templateLabelsOf(claim), nonNil(pool.Spec.Template.Labels)):
			field, reason = "spec.template.labels", driftLabels
		case !taintsEqual(claim.Spec.Taints, pool.Spec.Template.Taints):
			field, reason = "spec.template.taints", driftTaints
		case !taintsEqual(claim.Spec.StartupTaints, pool.Spec.Template.StartupTaints):
			field, reason = "spec.template.startupTaints", driftStartupTaints
		}
		return reason, fmt.Sprintf("%s of pool %s changed since the claim was made", field, pool.Name)
	}
	if !shapeOffered(pool, claim.Spec.Shape) {
		return driftShape, fmt.Sprintf("spec.shapes of pool %s no longer offer shape %s (%s cpu, %s memory)",
			pool.Name, claim.Spec.Shape.Name, claim.Spec.Shape.CPU.String(), claim.Spec.Shape.Memory.String())
	}
	if recorded := claim.Annotations[AnnotationProviderHash]; recorded != "" && providerHash != "" && recorded != providerHash {
		return driftProvider, fmt.Sprintf("the settings of NodeProvider %s changed since the claim was made", pool.Spec.ProviderRef.Name)
	}
	return "", ""
}

// templateLabelsOf is what the claim recorded of its pool's template
// labels: its labels but ours (template labels may not use our domain).
func templateLabelsOf(claim *v1alpha1.NodeClaim) map[string]string {
	out := map[string]string{}
	for key, value := range claim.Labels {
		if !strings.HasPrefix(key, "claimscale.io/") {
			out[key] = value
		}
	}
	return out
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func taintsEqual(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}

// shapeOffered says whether the pool still makes machines of the claim's
// shape: a fixed shape of that name, size and devices (where the pool
// names them; else the provider's catalog does), or a point on its
// flexible grid. A pool whose shapes cannot be read is given the benefit of the
// doubt.
func shapeOffered(pool *v1alpha1.NodePool, shape v1alpha1.ClaimShape) bool {
	if pool.Spec.Shapes.Flexible != nil {
		shapes, err := scheduling.PoolShapes(pool, nil)
		if err != nil || shapes.Flexible == nil {
			return true
		}
		smallest, ok := shapes.Flexible.Smallest(shape.CPU, shape.Memory)
		return ok && smallest.CPU.Cmp(shape.CPU) == 0 && smallest.Memory.Cmp(shape.Memory) == 0
	}
	for _, offered := range pool.Spec.Shapes.Fixed {
		if offered.Name != shape.Name {
			continue
		}
		return (offered.CPU == nil || offered.CPU.Cmp(shape.CPU) == 0) &&
			(offered.Memory == nil || offered.Memory.Cmp(shape.Memory) == 0) &&
			(len(offered.ExtendedResources) == 0 || sameDevices(offered.ExtendedResources, shape.ExtendedResources))
	}
	return false
}

// considerDrift takes a node whose claim is Drifted (the observer keeps
// the condition from driftOf and the provider) as drift's candidate.
func (r *round) considerDrift(c *candidate, blockReason, why string) {
	if meta.IsStatusConditionTrue(c.claim.Status.Conditions, v1alpha1.ConditionDrifted) {
		r.classify(c, v1alpha1.DisruptionReasonDrifted, &r.drifted, blockReason, why, "drifted")
	}
}

// drift replaces nodes whose claim is Drifted, within the Drifted budget,
// cheapest to disrupt first.
func (r *round) drift(ctx context.Context) (*command, error) {
	for _, c := range r.drifted {
		if r.ledger.remaining(c.pool.pool.Name, v1alpha1.DisruptionReasonDrifted) <= 0 ||
			r.memory.skip(c.claim.UID, v1alpha1.DisruptionReasonDrifted, r.s.fingerprint, r.s.now) {
			continue
		}
		if settled, err := r.settled(ctx); err != nil || !settled {
			return nil, err
		}
		condition := meta.FindStatusCondition(c.claim.Status.Conditions, v1alpha1.ConditionDrifted)
		cmd, refused, err := r.whatIf.replacement(ctx, v1alpha1.DisruptionReasonDrifted, c, "node "+c.node.Name+" drifted: "+condition.Message)
		if err != nil {
			return nil, err
		}
		if cmd != nil {
			r.ledger.take(c.pool.pool.Name, 1)
			return cmd, nil
		}
		r.memory.remember(c.claim.UID, v1alpha1.DisruptionReasonDrifted, r.s.fingerprint, r.s.now)
		r.refuse(c, eventBlocked, refused.record, "drifted, but "+refused.note)
	}
	return nil, nil
}

// checksDrift says whether p, or the provider it wraps, tells drift of its
// own: the wrapper every provider is handed out in answers Drifted for any.
func checksDrift(p provider.Provider) bool {
	for {
		if _, ok := p.(provider.DriftChecker); !ok {
			return false
		}
		wrapper, ok := p.(interface{ Unwrap() provider.Provider })
		if !ok {
			return true
		}
		p = wrapper.Unwrap()
	}
}

// providerDrift asks the claim's provider whether its machine drifted from
// what the provider itself makes now (provider.DriftChecker); a provider
// that cannot say, or an error, is no drift.
func (o *observer) providerDrift(ctx context.Context, providerName string, claim *v1alpha1.NodeClaim) (reason, message string) {
	if o.providers == nil || providerName == "" {
		return "", ""
	}
	p, err := o.providers.ForProviderName(ctx, providerName)
	if err != nil {
		return "", ""
	}
	checker, ok := p.(provider.DriftChecker)
	if !ok || !checksDrift(p) {
		return "", ""
	}
	o.providerDriftAsked = true
	reason, message, err = checker.Drifted(ctx, claim)
	if err != nil {
		log.FromContext(ctx).V(1).Info("asking the provider about drift failed", "nodeClaim", claim.Name, "error", err.Error())
		return "", ""
	}
	return reason, message
}

// sameDevices says whether two lists of extended resources hold the same
// counts.
func sameDevices(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		if other, ok := b[name]; !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
}
