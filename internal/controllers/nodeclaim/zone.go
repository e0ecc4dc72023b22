package nodeclaim

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// claimZone is the one zone the claim's requirements put its machine in,
// or "" when they allow any or several: a capacity failure is then backed
// off in that zone only, and the next round can use the pool's other zones.
func claimZone(claim *v1alpha1.NodeClaim) string {
	for _, requirement := range claim.Spec.Requirements.NodeSelector {
		if requirement.Key == corev1.LabelTopologyZone && requirement.Operator == corev1.NodeSelectorOpIn && len(requirement.Values) == 1 {
			return requirement.Values[0]
		}
	}
	return ""
}

// inZone is " in zone <zone>" for messages, or nothing without a zone.
func inZone(zone string) string {
	if zone == "" {
		return ""
	}
	return " in zone " + zone
}
