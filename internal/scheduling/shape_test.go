package scheduling

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/shapecatalog"
	"github.com/claimscale/claimscale/api/v1alpha1"
)

func TestPoolShapes(t *testing.T) {
	cpu4, mem8 := q("4"), q("8Gi")
	offered := []shapecatalog.Shape{
		{Name: "flex-4-8", Capacity: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("8Gi"), corev1.ResourceEphemeralStorage: q("50Gi")}, Price: 0.12},
		{Name: "flex-8-16", Capacity: corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("16Gi")}, Price: 0.24},
	}
	tests := []struct {
		name    string
		fixed   []v1alpha1.Shape
		want    []Shape
		wantErr bool
	}{
		{
			name:  "names alone resolve against the provider's catalog",
			fixed: []v1alpha1.Shape{{Name: "flex-4-8"}},
			want:  []Shape{{Name: "flex-4-8", CPU: q("4"), Memory: q("8Gi"), EphemeralStorage: q("50Gi"), Price: 0.12}},
		},
		{
			name:  "the pool's own price overrides the catalog's",
			fixed: []v1alpha1.Shape{{Name: "flex-8-16", Price: "0.2"}},
			want:  []Shape{{Name: "flex-8-16", CPU: q("8"), Memory: q("16Gi"), Price: 0.2}},
		},
		{
			name:  "a shape the catalog lacks needs cpu and memory, and is priced by size",
			fixed: []v1alpha1.Shape{{Name: "bucket", CPU: &cpu4, Memory: &mem8}},
			want:  []Shape{{Name: "bucket", CPU: q("4"), Memory: q("8Gi"), Price: 6}},
		},
		{
			name:    "a shape nobody knows the size of is an error",
			fixed:   []v1alpha1.Shape{{Name: "mystery"}},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			np := &v1alpha1.NodePool{ObjectMeta: metaName("p"), Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: tc.fixed}}}
			got, err := PoolShapes(np, offered)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if len(got.Fixed) != len(tc.want) {
				t.Fatalf("shapes = %v, want %v", got.Fixed, tc.want)
			}
			for i, w := range tc.want {
				g := got.Fixed[i]
				if g.Name != w.Name || g.CPU.Cmp(w.CPU) != 0 || g.Memory.Cmp(w.Memory) != 0 || g.EphemeralStorage.Cmp(w.EphemeralStorage) != 0 || g.Price != w.Price {
					t.Errorf("shape %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestPoolShapesFlexibleDefaults(t *testing.T) {
	np := &v1alpha1.NodePool{ObjectMeta: metaName("p"), Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{
		Flexible: &v1alpha1.FlexibleShape{MinCPU: q("1"), MaxCPU: q("8"), MinMemory: q("2Gi"), MaxMemory: q("32Gi"), PricePerCPU: "0.5"},
	}}}
	got, err := PoolShapes(np, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := got.Flexible
	if f == nil || f.CPUStep.Cmp(q("1")) != 0 || f.MemoryStep.Cmp(q("1Gi")) != 0 || f.PricePerCPU != 0.5 || f.PricePerGiB != shapecatalog.DefaultPricePerGiB {
		t.Fatalf("flexible = %+v, want steps 1 and 1Gi, 0.5 per cpu, default per GiB", f)
	}
}

func TestFlexibleGrid(t *testing.T) {
	f := &Flexible{
		MinCPU: q("1"), MaxCPU: q("16"), CPUStep: q("2"),
		MinMemory: q("1Gi"), MaxMemory: q("64Gi"), MemoryStep: q("4Gi"),
		PricePerCPU: 1, PricePerGiB: 0.25,
	}
	tests := []struct {
		name     string
		cpu, mem string
		want     string
		fits     bool
	}{
		{"the minimum holds what is below it", "500m", "512Mi", "flex-1-1Gi", true},
		{"sizes round up to the step grid", "3", "5Gi", "flex-4-8Gi", true},
		{"a size on the grid is taken as is", "4", "8Gi", "flex-4-8Gi", true},
		{"the maximum is the last grid point", "16", "64Gi", "flex-16-64Gi", true},
		{"beyond the maximum nothing fits", "17", "1Gi", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := f.Smallest(q(tc.cpu), q(tc.mem))
			if ok != tc.fits || got.Name != tc.want {
				t.Errorf("Smallest(%s, %s) = %q, %v; want %q, %v", tc.cpu, tc.mem, got.Name, ok, tc.want, tc.fits)
			}
			if ok && got.Price != float64(got.CPU.Value())+float64(got.Memory.Value())/(1<<30)*0.25 {
				t.Errorf("price %v does not follow the per-cpu and per-GiB prices", got.Price)
			}
		})
	}
	all := f.Expand()
	// cpu: 1, 2, 4, ..., 16 (9 points); memory: 1, 4, 8, ..., 64 (17 points).
	if len(all) != 9*17 {
		t.Errorf("Expand gave %d sizes, want %d", len(all), 9*17)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Price < all[i-1].Price {
			t.Fatalf("Expand not cheapest first at %d: %v after %v", i, all[i].Price, all[i-1].Price)
		}
	}
	if l := f.Largest(); l.CPU.Cmp(resource.MustParse("16")) != 0 || l.Memory.Cmp(resource.MustParse("64Gi")) != 0 {
		t.Errorf("Largest = %s", l.Name)
	}
}

// A pool's shapes must agree with what packing relies on; each way they
// can disagree is refused with an error naming the shape.
func TestPoolShapesRefusesInconsistentShapes(t *testing.T) {
	cpu4, mem8, huge := q("4"), q("8Gi"), q("1e18")
	tests := []struct {
		name     string
		fixed    []v1alpha1.Shape
		resolved []shapecatalog.Shape
		want     string
	}{
		{
			name:  "a name listed twice",
			fixed: []v1alpha1.Shape{{Name: "b", CPU: &cpu4, Memory: &mem8}, {Name: "b", CPU: &cpu4, Memory: &mem8}},
			want:  "shape b is listed twice",
		},
		{
			name:  "cpu beyond what the arithmetic represents",
			fixed: []v1alpha1.Shape{{Name: "big", CPU: &huge, Memory: &mem8}},
			want:  "shape big: cpu 1e18 must be a whole number of millicores",
		},
		{
			name:  "a shape without memory",
			fixed: []v1alpha1.Shape{{Name: "half", CPU: &cpu4}},
			want:  "shape half of pool p has no cpu or memory",
		},
		{
			name:  "a catalog naming one shape twice with different sizes",
			fixed: []v1alpha1.Shape{{Name: "s"}},
			resolved: []shapecatalog.Shape{
				{Name: "s", Capacity: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("8Gi")}},
				{Name: "s", Capacity: corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("8Gi")}},
			},
			want: "lists shape s twice with different sizes",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			np := &v1alpha1.NodePool{ObjectMeta: metaName("p"), Spec: v1alpha1.NodePoolSpec{Shapes: v1alpha1.Shapes{Fixed: tc.fixed}}}
			_, err := PoolShapes(np, tc.resolved)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Pools built by hand (as callers of Solve do) are checked the same way.
	dup := Cluster{Pools: []Pool{nodePool("p", []Shape{shape("a", "1", "1Gi", 1), shape("a", "2", "2Gi", 2)})}}
	if _, err := New(context.Background(), dup); err == nil || !strings.Contains(err.Error(), "shape a is listed twice") {
		t.Fatalf("New with a duplicate shape: err = %v", err)
	}
}

// A flexible range far larger than any grid can list expands to a bounded
// catalog with its smallest and largest sizes, without overflowing.
func TestFlexibleExpandIsBounded(t *testing.T) {
	f := &Flexible{
		MinCPU: q("1m"), MaxCPU: q("1e6"), CPUStep: q("1"),
		MinMemory: q("1Mi"), MaxMemory: q("1Ei"), MemoryStep: q("1Gi"),
		PricePerCPU: 1, PricePerGiB: 0.25,
	}
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	all := f.Expand()
	if len(all) != MaxExpandedShapes {
		t.Fatalf("Expand listed %d sizes, want %d", len(all), MaxExpandedShapes)
	}
	if all[0].CPU.Cmp(q("1m")) != 0 || all[0].Memory.Cmp(q("1Mi")) != 0 {
		t.Errorf("first size %s, want the minimum", all[0].Name)
	}
	if l := f.Largest(); l.CPU.Cmp(q("1e6")) != 0 || l.Memory.Cmp(q("1Ei")) != 0 {
		t.Errorf("largest size %s, want the maximum", l.Name)
	}
}
