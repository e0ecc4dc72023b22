package proxmox_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func TestShapes(t *testing.T) {
	tests := []struct {
		name   string
		shapes v1alpha1.Shapes
		// want lists name=cpu/memory@price of the shapes; wantCount and
		// wantIncludes are used for large grids instead.
		want         []string
		wantCount    int
		wantIncludes []string
		wantError    string
	}{
		{
			name: "fixed shapes keep their names and prices",
			shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{
				{Name: "small", CPU: q("2"), Memory: q("4Gi"), Price: "0.02"},
				{Name: "large", CPU: q("8"), Memory: q("32Gi")},
			}},
			want: []string{"small=2/4Gi@0.02", "large=8/32Gi@16"},
		},
		{
			name:   "fractional CPU is rounded up to whole cores",
			shapes: v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "odd", CPU: q("1500m"), Memory: q("1536Mi")}}},
			want:   []string{"odd=2/1536Mi@2.375"},
		},
		{
			name:      "a fixed shape without memory names the shape",
			shapes:    v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "small", CPU: q("2"), Memory: q("4Gi")}, {Name: "mystery", CPU: q("2")}}},
			wantError: `shape "mystery" of NodePool workers needs cpu and memory`,
		},
		{
			name: "a flexible range is expanded on its steps",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("2"), MaxCPU: resource.MustParse("4"), CPUStep: q("2"),
				MinMemory: resource.MustParse("4Gi"), MaxMemory: resource.MustParse("8Gi"), MemoryStep: q("4Gi"),
				PricePerCPU: "0.01", PricePerGiB: "0.005",
			}},
			want: []string{"flex-2-4Gi=2/4Gi@0.04", "flex-2-8Gi=2/8Gi@0.06", "flex-4-4Gi=4/4Gi@0.06", "flex-4-8Gi=4/8Gi@0.08"},
		},
		{
			// The claims of this range are sized 500m and 1500m; their VMs
			// get 1 and 2 cores, and 1536Mi of memory becomes 1536Mi.
			name: "a flexible range off whole cores is rounded up to the VM's cores, named and priced as rounded",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("500m"), MaxCPU: resource.MustParse("2"),
				MinMemory: resource.MustParse("1536Mi"), MaxMemory: resource.MustParse("1536Mi"),
			}},
			want: []string{"flex-1-1536Mi=1/1536Mi@1.375", "flex-2-1536Mi=2/1536Mi@2.375"},
		},
		{
			name: "a fine flexible range is thinned, keeping its smallest and largest size",
			shapes: v1alpha1.Shapes{Flexible: &v1alpha1.FlexibleShape{
				MinCPU: resource.MustParse("1"), MaxCPU: resource.MustParse("64"),
				MinMemory: resource.MustParse("1Gi"), MaxMemory: resource.MustParse("512Gi"), MemoryStep: q("512Mi"),
			}},
			wantCount:    256,
			wantIncludes: []string{"flex-1-1Gi", "flex-64-512Gi"},
		},
	}
	api := fakeAPI(t)
	p := newProvider(t, api, cloneProvider(api.Endpoint()))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "workers"}, Spec: v1alpha1.NodePoolSpec{Shapes: tt.shapes}}
			shapes, err := p.Shapes(context.Background(), pool)
			if tt.wantError != "" {
				if !provider.IsTerminal(err) || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("Shapes error = %v, want a terminal error containing %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("Shapes: %v", err)
			}
			var got []string
			names := map[string]bool{}
			for _, s := range shapes {
				cpu, mem := s.Capacity[corev1.ResourceCPU], s.Capacity[corev1.ResourceMemory]
				got = append(got, s.Name+"="+cpu.String()+"/"+mem.String()+"@"+trimFloat(s.Price))
				names[s.Name] = true
			}
			if tt.want != nil && strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("shapes = %v, want %v", got, tt.want)
			}
			if tt.wantCount != 0 && (len(shapes) > tt.wantCount || len(shapes) < tt.wantCount/4) {
				t.Errorf("%d shapes, want at most %d and not far fewer", len(shapes), tt.wantCount)
			}
			for _, n := range tt.wantIncludes {
				if !names[n] {
					t.Errorf("shape %s is missing", n)
				}
			}
		})
	}
}

// trimFloat prints a price to four places without trailing zeros.
func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(f, 'f', 4, 64), "0"), ".")
}
