package plugin

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// An error keeps its kind, and a retryable error its wait, across the
// wire: what the plugin's provider said is what claimscale acts on.
func TestErrorsKeepTheirKindAcrossTheWire(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		is    func(error) bool
		after time.Duration
	}{
		{"not found", provider.NewNotFound("machine %s", "m1"), provider.IsNotFound, 0},
		{"insufficient capacity", provider.NewInsufficientCapacity(errors.New("zone full")), provider.IsInsufficientCapacity, 0},
		{"terminal", provider.NewTerminal(errors.New("bad token")), provider.IsTerminal, 0},
		{"retryable with a wait", provider.NewRetryable(errors.New("throttled"), 7*time.Second), func(err error) bool {
			return provider.IsRetryable(err) && !provider.IsInProgress(err)
		}, 7 * time.Second},
		{"in progress with a wait", provider.NewInProgress(errors.New("clone task running"), 5*time.Second), provider.IsInProgress, 5 * time.Second},
		{"in progress without a wait", provider.NewInProgress(errors.New("clone task running"), 0), provider.IsInProgress, 0},
		{"an error of no kind is retryable", errors.New("socket closed"), provider.IsRetryable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			back := errorOf("calling", statusOf(tt.err), false)
			if !tt.is(back) {
				t.Fatalf("%v came back as %v, of another kind", tt.err, back)
			}
			if got := provider.RetryAfter(back); got != tt.after {
				t.Errorf("the wait came back as %s, want %s", got, tt.after)
			}
			var unreachable *UnreachableError
			if errors.As(back, &unreachable) {
				t.Errorf("an answer of the plugin came back as unreachable: %v", back)
			}
		})
	}
}

// A provider that cannot do a power call answers UNIMPLEMENTED, which the
// client reads back as not supported for the power calls (claimscale then
// deletes instead) and as terminal for the others, as before.
func TestNotSupportedIsUnimplementedOnTheWire(t *testing.T) {
	wire := statusOf(provider.NewNotSupported("no power calls"))
	if code := status.Code(wire); code != codes.Unimplemented {
		t.Fatalf("not supported went out as %s, want UNIMPLEMENTED", code)
	}
	if back := powerErrorOf("suspending", wire, false); !provider.IsNotSupported(back) {
		t.Fatalf("UNIMPLEMENTED to a power call came back as %v, want not supported", back)
	}
	if back := errorOf("creating", wire, false); !provider.IsTerminal(back) {
		t.Fatalf("UNIMPLEMENTED to another call came back as %v, want terminal", back)
	}
}

func TestAnInstanceSurvivesTheWire(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := &provider.Instance{
		ProviderID: "simulated://m1", Name: "m1",
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("6Gi"), "nvidia.com/gpu": resource.MustParse("2")},
		Labels:   map[string]string{corev1.LabelTopologyZone: "a"},
		Tags:     map[string]string{v1alpha1.TagCluster: "c1", v1alpha1.TagNodeClaim: "m1"},
		State:    provider.InstanceRunning, CreatedAt: created,
	}
	out, err := instanceFromWire(instanceToWire(in))
	if err != nil {
		t.Fatal(err)
	}
	if out.ProviderID != in.ProviderID || out.Name != in.Name || out.State != in.State || !out.CreatedAt.Equal(created) ||
		out.Tags[v1alpha1.TagCluster] != "c1" || out.Labels[corev1.LabelTopologyZone] != "a" ||
		!out.Capacity.Cpu().Equal(*in.Capacity.Cpu()) || !out.Capacity.Memory().Equal(*in.Capacity.Memory()) ||
		!out.Capacity.Name("nvidia.com/gpu", resource.DecimalSI).Equal(resource.MustParse("2")) {
		t.Fatalf("instance came back as %+v, want %+v", out, in)
	}
}

func TestAClaimAndAPoolSurviveTheWire(t *testing.T) {
	claim := &v1alpha1.NodeClaim{Spec: v1alpha1.NodeClaimSpec{
		NodePoolRef: v1alpha1.NodePoolReference{Name: "workers"},
		Shape: v1alpha1.ClaimShape{Name: "c4", CPU: resource.MustParse("4"), Memory: resource.MustParse("16Gi"),
			ExtendedResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		Requirements: v1alpha1.NodeClaimRequirements{NodeSelector: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}},
		}},
	}}
	claim.Name = "workers-x1"
	req := createRequest("c1", "np", claim, provider.CreateOptions{UserData: []byte("#cloud-config")})
	if req.GetZone() != "b" || req.GetTags()[v1alpha1.TagNodeClaim] != "workers-x1" || string(req.GetUserData()) != "#cloud-config" {
		t.Fatalf("create request %v lacks the zone, the tags or the user data", req)
	}
	back, err := claimFromWire(req)
	if err != nil {
		t.Fatal(err)
	}
	if back.Name != claim.Name || back.Spec.NodePoolRef != claim.Spec.NodePoolRef || !back.Spec.Shape.CPU.Equal(claim.Spec.Shape.CPU) ||
		len(back.Spec.Requirements.NodeSelector) != 1 || back.Spec.Requirements.NodeSelector[0].Values[0] != "b" ||
		!equality.Semantic.DeepEqual(back.Spec.Shape.ExtendedResources, claim.Spec.Shape.ExtendedResources) {
		t.Fatalf("claim came back as %+v", back.Spec)
	}

	gpus := corev1.ResourceList{"example.com/fpga": resource.MustParse("2")}
	fixed := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "fpga-2", ExtendedResources: gpus}}}}}
	fixedBack, err := poolFromWire(shapesRequest("c1", "np", fixed))
	if err != nil {
		t.Fatal(err)
	}
	if len(fixedBack.Spec.Shapes.Fixed) != 1 || !equality.Semantic.DeepEqual(fixedBack.Spec.Shapes.Fixed[0].ExtendedResources, gpus) {
		t.Fatalf("fixed shapes came back as %+v", fixedBack.Spec.Shapes.Fixed)
	}

	step := resource.MustParse("2")
	pool := &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
		MinCPU: resource.MustParse("2"), MaxCPU: resource.MustParse("8"), CPUStep: &step,
		MinMemory: resource.MustParse("4Gi"), MaxMemory: resource.MustParse("32Gi"), PricePerCPU: "0.01",
	}}}}
	pool.Name = "flex"
	poolBack, err := poolFromWire(shapesRequest("c1", "np", pool))
	if err != nil {
		t.Fatal(err)
	}
	f := poolBack.Spec.Shapes.Flexible
	if poolBack.Name != "flex" || f == nil || !f.MaxCPU.Equal(pool.Spec.Shapes.Flexible.MaxCPU) || f.CPUStep == nil || !f.CPUStep.Equal(step) ||
		f.MemoryStep != nil || f.PricePerCPU != "0.01" {
		t.Fatalf("pool came back as %+v", poolBack.Spec.Shapes)
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	req := createRequest("c1", "np", &v1alpha1.NodeClaim{Spec: v1alpha1.NodeClaimSpec{NodePoolRef: v1alpha1.NodePoolReference{Name: "p"}}}, provider.CreateOptions{})
	req.ClaimName = "x"
	req.Shape.Cpu = "lots"
	if _, err := claimFromWire(req); err == nil {
		t.Fatal("a shape cpu of \"lots\" was taken")
	}
	req.Shape.Cpu, req.ClaimName = "2", ""
	if _, err := claimFromWire(req); err == nil {
		t.Fatal("a create without a claim name was taken")
	}
	req.ClaimName = "x"
	for name, count := range map[string]string{"cpu": "1", "kubernetes.io/gpu": "1", "example.com/gpu": "some"} {
		req.Shape.Extended = map[string]string{name: count}
		if _, err := claimFromWire(req); err == nil {
			t.Fatalf("a shape with extended resource %s: %q was taken", name, count)
		}
	}
}
