package simulated

import (
	"testing"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// shapeSummary is a shape as the tests compare it.
type shapeSummary struct {
	name        string
	cpu, memory string
	price       float64
}

func summarize(shapes []provider.Shape) []shapeSummary {
	out := make([]shapeSummary, 0, len(shapes))
	for _, s := range shapes {
		cpu, memory := s.Capacity["cpu"], s.Capacity["memory"]
		out = append(out, shapeSummary{s.Name, cpu.String(), memory.String(), s.Price})
	}
	return out
}

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func TestShapes(t *testing.T) {
	tests := []struct {
		name    string
		shapes  v1alpha1.Shapes
		want    []shapeSummary
		wantErr string
	}{
		{
			name: "fixed shapes keep their price, or get one from their size",
			shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "small", CPU: q("2"), Memory: q("4Gi"), Price: "0.5"},
				{Name: "large", CPU: q("8"), Memory: q("32Gi")},
			}},
			want: []shapeSummary{{"small", "2", "4Gi", 0.5}, {"large", "8", "32Gi", 16}},
		},
		{
			name: "a fixed shape without cpu or memory is named in the error",
			shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "ok", CPU: q("2"), Memory: q("4Gi")},
				{Name: "no-memory", CPU: q("2")},
				{Name: "no-cpu", Memory: q("2Gi")},
			}},
			wantErr: "shapes.fixed no-memory, no-cpu lacks",
		},
		{
			name: "a fixed shape beyond any machine is refused",
			shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "huge", CPU: q("10P"), Memory: q("4Gi")},
			}},
			wantErr: "shape huge: cpu 10P is above the 10k a machine may have",
		},
		{
			name: "a fixed shape with a price that is no number is refused",
			shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "odd", CPU: q("2"), Memory: q("4Gi"), Price: "NaN"},
			}},
			wantErr: `shape odd: price "NaN"`,
		},
		{
			name: "a flexible range expands from its minimum on its step grid with its unit prices",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("4"), CPUStep: q("2"),
				MinMemory: resource.MustParse("2Gi"), MaxMemory: resource.MustParse("4Gi"), MemoryStep: q("2Gi"),
				PricePerCPU: "2", PricePerGiB: "1",
			}},
			want: []shapeSummary{
				{"flex-1-2Gi", "1", "2Gi", 4}, {"flex-1-4Gi", "1", "4Gi", 6},
				{"flex-2-2Gi", "2", "2Gi", 6}, {"flex-2-4Gi", "2", "4Gi", 8},
				{"flex-4-2Gi", "4", "2Gi", 10}, {"flex-4-4Gi", "4", "4Gi", 12},
			},
		},
		{
			name: "a flexible range defaults to steps of one core and one GiB",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("500m"), MaxCPU: resource.MustParse("1"),
				MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("1Gi"),
			}},
			want: []shapeSummary{{"flex-500m-1Gi", "500m", "1Gi", 0.75}, {"flex-1-1Gi", "1", "1Gi", 1.25}},
		},
		{
			name: "a flexible range narrower than its step offers its minimum, as scheduling sizes claims",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("3"), MaxCPU: resource.MustParse("3"), CPUStep: q("2"),
				MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("1Gi"),
			}},
			want: []shapeSummary{{"flex-3-1Gi", "3", "1Gi", 3.25}},
		},
		{
			name: "the flexible range that crashed the controller is refused, not expanded",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("1m"), MaxCPU: resource.MustParse("1e6"), CPUStep: q("1m"),
				MinMemory: resource.MustParse("1Mi"), MaxMemory: resource.MustParse("1Ei"), MemoryStep: q("1Mi"),
			}},
			wantErr: "maxCPU 1e6 is above the 10k a machine may have",
		},
		{
			name: "a flexible range whose minimum exceeds its maximum is an error",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("4"), MaxCPU: resource.MustParse("2"),
				MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("1Gi"),
			}},
			wantErr: "the minimum exceeds the maximum",
		},
		{
			name: "a flexible range with a zero step is an error",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("2"), CPUStep: q("0"),
				MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("1Gi"),
			}},
			wantErr: "cpuStep 0 must be greater than zero",
		},
	}
	p := &Provider{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.NodePoolSpec{Shapes: tt.shapes}}
			shapes, err := p.Shapes(t.Context(), pool)
			if tt.wantErr != "" {
				g.Expect(provider.IsTerminal(err)).To(gomega.BeTrue(), "error %v", err)
				g.Expect(err.Error()).To(gomega.ContainSubstring(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(summarize(shapes)).To(gomega.Equal(tt.want))
		})
	}
}

func TestFlexibleShapesAreCappedKeepingTheEnds(t *testing.T) {
	g := gomega.NewWithT(t)
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{
		Flexible: &v1alpha1.FlexibleShape{
			MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("64"),
			MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("512Gi"),
		},
	}}}
	shapes, err := (&Provider{}).Shapes(t.Context(), pool)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(len(shapes)).To(gomega.BeNumerically("<=", MaxFlexibleShapes))
	g.Expect(len(shapes)).To(gomega.BeNumerically(">=", MaxFlexibleShapes/4))
	names := map[string]bool{}
	for _, s := range shapes {
		names[s.Name] = true
	}
	for _, want := range []string{"flex-1-1Gi", "flex-64-512Gi", "flex-1-512Gi", "flex-64-1Gi"} {
		g.Expect(names).To(gomega.HaveKey(want))
	}
}

// The finest grid the bounds allow, a millicore by a byte up to the
// largest machine, has 10^7 by 7*10^13 points: thinning it must neither
// overflow their product nor take long.
func TestTheFinestFlexibleGridIsThinnedWithoutOverflow(t *testing.T) {
	g := gomega.NewWithT(t)
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{
		Flexible: &v1alpha1.FlexibleShape{
			MinCPU: resource.MustParse("1m"), MaxCPU: resource.MustParse(v1alpha1.MaxMachineCPU), CPUStep: q("1m"),
			MinMemory: resource.MustParse("1"), MaxMemory: resource.MustParse(v1alpha1.MaxMachineMemory), MemoryStep: q("1"),
		},
	}}}
	shapes, err := (&Provider{}).Shapes(t.Context(), pool)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(len(shapes)).To(gomega.BeNumerically("<=", MaxFlexibleShapes))
	g.Expect(len(shapes)).To(gomega.BeNumerically(">=", MaxFlexibleShapes/4))
	first, last := summarize(shapes[:1])[0], summarize(shapes[len(shapes)-1:])[0]
	g.Expect(first.cpu + " " + first.memory).To(gomega.Equal("1m 1"))
	g.Expect(last.cpu + " " + last.memory).To(gomega.Equal("10k 64Ti"))
}
