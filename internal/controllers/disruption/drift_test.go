package disruption

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestDriftOf(t *testing.T) {
	four, sixteen := resource.MustParse("4"), resource.MustParse("16Gi")
	basePool := func() *v1alpha1.NodePool {
		return &v1alpha1.NodePool{
			ObjectMeta: metav1.ObjectMeta{Name: "pool"},
			Spec: v1alpha1.NodePoolSpec{
				ProviderRef: v1alpha1.ProviderReference{Name: "provider"},
				Template: v1alpha1.NodeTemplate{
					Labels: map[string]string{"team": "a"},
					Taints: []corev1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}},
				},
				Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c4", CPU: &four, Memory: &sixteen}}},
			},
		}
	}
	shape := v1alpha1.ClaimShape{Name: "c4", CPU: four, Memory: sixteen}
	// claimOf records what the pool makes now, as provisioning would.
	claimOf := func(pool *v1alpha1.NodePool, shape v1alpha1.ClaimShape) *v1alpha1.NodeClaim {
		return &v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name:   "claim",
				Labels: map[string]string{"team": "a", v1alpha1.LabelNodePool: "pool", "claimscale.io/nodeprovider": "provider"},
				Annotations: map[string]string{
					v1alpha1.AnnotationTemplateHash: pool.TemplateHash(shape),
					AnnotationProviderHash:          "provider-hash",
				},
			},
			Spec: v1alpha1.NodeClaimSpec{Shape: shape, Taints: append([]corev1.Taint(nil), pool.Spec.Template.Taints...)},
		}
	}
	tests := []struct {
		name         string
		change       func(*v1alpha1.NodePool)
		claim        func(*v1alpha1.NodeClaim)
		providerHash string
		want         string
	}{
		{name: "an unchanged pool has not drifted", want: ""},
		{name: "a changed label drifts", change: func(p *v1alpha1.NodePool) { p.Spec.Template.Labels["team"] = "b" }, want: driftLabels},
		{name: "an added label drifts", change: func(p *v1alpha1.NodePool) { p.Spec.Template.Labels["tier"] = "v2" }, want: driftLabels},
		{name: "a changed taint drifts", change: func(p *v1alpha1.NodePool) { p.Spec.Template.Taints[0].Value = "b" }, want: driftTaints},
		{
			name: "an added startup taint drifts",
			change: func(p *v1alpha1.NodePool) {
				p.Spec.Template.StartupTaints = []corev1.Taint{{Key: "cni", Effect: corev1.TaintEffectNoSchedule}}
			},
			want: driftStartupTaints,
		},
		{name: "changed kubelet settings drift", change: func(p *v1alpha1.NodePool) { p.Spec.Template.Kubelet.MaxPods = ptr(int32(50)) }, want: driftKubelet},
		{
			name:   "a shape the pool no longer offers drifts",
			change: func(p *v1alpha1.NodePool) { p.Spec.Shapes.Fixed[0].Name = "c8" },
			want:   driftShape,
		},
		{
			name: "a shape the pool now sizes differently drifts",
			change: func(p *v1alpha1.NodePool) {
				eight := resource.MustParse("8")
				p.Spec.Shapes.Fixed[0].CPU = &eight
			},
			want: driftShape,
		},
		{
			name: "a shape that gains a GPU drifts",
			change: func(p *v1alpha1.NodePool) {
				p.Spec.Shapes.Fixed[0].ExtendedResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
			},
			want: driftShape,
		},
		{
			name: "a shape whose GPU count changes drifts",
			change: func(p *v1alpha1.NodePool) {
				p.Spec.Shapes.Fixed[0].ExtendedResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
			},
			claim: func(c *v1alpha1.NodeClaim) {
				// Made when the shape had one GPU.
				c.Spec.Shape.ExtendedResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
				c.Annotations[v1alpha1.AnnotationTemplateHash] = basePool().TemplateHash(c.Spec.Shape)
			},
			want: driftShape,
		},
		{
			name: "a size off a flexible pool's range drifts",
			change: func(p *v1alpha1.NodePool) {
				p.Spec.Shapes = v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
					MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("2"), MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("32Gi"),
				}}
			},
			want: driftShape,
		},
		{
			name: "a size on a flexible pool's grid has not drifted",
			change: func(p *v1alpha1.NodePool) {
				p.Spec.Shapes = v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
					MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("8"), MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("32Gi"),
				}}
			},
			want: "",
		},
		{name: "changed provider settings drift", providerHash: "other-hash", want: driftProvider},
		{
			name:         "a claim that recorded no provider hash is not compared on it",
			claim:        func(c *v1alpha1.NodeClaim) { delete(c.Annotations, AnnotationProviderHash) },
			providerHash: "other-hash",
			want:         "",
		},
		{
			name:   "a claim that recorded no template hash is not compared on it",
			change: func(p *v1alpha1.NodePool) { p.Spec.Template.Labels["team"] = "b" },
			claim:  func(c *v1alpha1.NodeClaim) { delete(c.Annotations, v1alpha1.AnnotationTemplateHash) },
			want:   "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := basePool()
			claim := claimOf(pool, shape)
			if tt.claim != nil {
				tt.claim(claim)
			}
			if tt.change != nil {
				tt.change(pool)
			}
			providerHash := tt.providerHash
			if providerHash == "" {
				providerHash = "provider-hash"
			}
			reason, message := driftOf(claim, pool, providerHash)
			if reason != tt.want {
				t.Fatalf("drift %q (%s), want %q", reason, message, tt.want)
			}
			if reason != "" && message == "" {
				t.Fatal("drift without a message naming the field")
			}
		})
	}
}

// A flexible pool's claims drift by size, never by the name their shape
// carries: a Proxmox node made when the provider named its grid
// c<cores>-m<memory> (c4-m16Gi), and one named as the one grid names it
// now (flex-4-16Gi), are both still offered, so an upgrade replaces none.
func TestFlexibleClaimsDriftBySizeNotByShapeName(t *testing.T) {
	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
			MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("8"), MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("32Gi"),
		}}},
	}
	for _, tt := range []struct {
		name, cpu, memory string
		want              string
	}{
		{"c4-m16Gi", "4", "16Gi", ""},
		{"flex-4-16Gi", "4", "16Gi", ""},
		{"flex-4500m-16Gi", "4500m", "16Gi", driftShape},
	} {
		shape := v1alpha1.ClaimShape{Name: tt.name, CPU: resource.MustParse(tt.cpu), Memory: resource.MustParse(tt.memory)}
		claim := &v1alpha1.NodeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "claim", Annotations: map[string]string{v1alpha1.AnnotationTemplateHash: pool.TemplateHash(shape)}},
			Spec:       v1alpha1.NodeClaimSpec{Shape: shape},
		}
		if reason, message := driftOf(claim, pool, ""); reason != tt.want {
			t.Errorf("claim of shape %s: drift %q (%s), want %q", tt.name, reason, message, tt.want)
		}
	}
}

func TestProviderHash(t *testing.T) {
	base := func() *v1alpha1.NodeProvider {
		return &v1alpha1.NodeProvider{Spec: v1alpha1.NodeProviderSpec{
			Type:                 v1alpha1.ProviderTypeCloudscale,
			CredentialsSecretRef: &v1alpha1.SecretReference{Name: "token", Namespace: "system"},
			Cloudscale:           &v1alpha1.CloudscaleSettings{Zone: "lpg1", Image: "debian-12"},
		}}
	}
	tests := []struct {
		name    string
		change  func(*v1alpha1.NodeProvider)
		changes bool
	}{
		{"another image changes it", func(p *v1alpha1.NodeProvider) { p.Spec.Cloudscale.Image = "debian-13" }, true},
		{"other credentials do not", func(p *v1alpha1.NodeProvider) { p.Spec.CredentialsSecretRef.Name = "rotated" }, false},
		{"cloudscale error patterns do not", func(p *v1alpha1.NodeProvider) {
			p.Spec.Cloudscale.ErrorPatterns = []v1alpha1.CloudscaleErrorPattern{{Pattern: "no hosts", Kind: v1alpha1.CloudscaleErrorInsufficientCapacity}}
		}, false},
		{"the single cloudscale zone written as zones does not", func(p *v1alpha1.NodeProvider) {
			p.Spec.Cloudscale.Zone, p.Spec.Cloudscale.Zones = "", []v1alpha1.CloudscaleZone{{Name: "lpg1"}}
		}, false},
		{"another cloudscale zone does", func(p *v1alpha1.NodeProvider) {
			p.Spec.Cloudscale.Zone, p.Spec.Cloudscale.Zones = "", []v1alpha1.CloudscaleZone{{Name: "lpg1"}, {Name: "rma1"}}
		}, true},
		{"the simulated provider's zones change it", func(p *v1alpha1.NodeProvider) {
			p.Spec = v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &v1alpha1.SimulatedSettings{Zones: []string{"a"}}}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := base()
			tt.change(changed)
			if got := ProviderHash(base()) != ProviderHash(changed); got != tt.changes {
				t.Fatalf("hash changed: %v, want %v", got, tt.changes)
			}
		})
	}
	simulated := func(settings v1alpha1.SimulatedSettings) string {
		return ProviderHash(&v1alpha1.NodeProvider{Spec: v1alpha1.NodeProviderSpec{Type: v1alpha1.ProviderTypeSimulated, Simulated: &settings}})
	}
	if simulated(v1alpha1.SimulatedSettings{}) != simulated(v1alpha1.SimulatedSettings{CreateFailurePercent: 30, BootDelay: &metav1.Duration{}}) {
		t.Fatal("the simulated provider's failure injection and boot delay changed the hash")
	}
}
