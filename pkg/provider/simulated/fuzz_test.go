package simulated

import (
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/claimscale/claimscale/api/v1alpha1"
)

// The fuzz targets below take the values a user writes into a NodePool.
// Their seed corpora (testdata/fuzz/<target>) run with every go test and
// hold the inputs that once crashed the controller; go test -fuzz=<target>
// searches for more.

// longExponent matches the quantities the API server refuses by pattern
// (hack/crdbounds): exponents of three digits or more. Parsing one of ten
// digits (1e3333333336) alone takes minutes.
var longExponent = regexp.MustCompile(`[eE][+-]?[0-9]{3}`)

// FuzzFlexibleShapes: any flexible range yields an error or at most
// MaxFlexibleShapes distinct shapes inside the range, including both of
// its ends; never a panic, an overflow or a huge allocation.
func FuzzFlexibleShapes(f *testing.F) {
	f.Fuzz(func(t *testing.T, minCPU, maxCPU, cpuStep, minMemory, maxMemory, memoryStep string) {
		quantities := map[string]resource.Quantity{}
		for name, s := range map[string]string{
			"minCPU": minCPU, "maxCPU": maxCPU, "cpuStep": cpuStep,
			"minMemory": minMemory, "maxMemory": maxMemory, "memoryStep": memoryStep,
		} {
			if longExponent.MatchString(s) {
				t.Skip() // the API server refuses it
			}
			q, err := resource.ParseQuantity(s)
			if err != nil {
				t.Skip() // the API server admits only quantities
			}
			quantities[name] = q
		}
		cpuStepQ, memoryStepQ := quantities["cpuStep"], quantities["memoryStep"]
		flex := &v1alpha1.FlexibleShape{
			MinCPU: quantities["minCPU"], MaxCPU: quantities["maxCPU"], CPUStep: &cpuStepQ,
			MinMemory: quantities["minMemory"], MaxMemory: quantities["maxMemory"], MemoryStep: &memoryStepQ,
		}
		shapes, err := flexibleShapes(flex)
		if err != nil {
			return
		}
		if len(shapes) == 0 || len(shapes) > MaxFlexibleShapes {
			t.Fatalf("%d shapes, want 1 to %d", len(shapes), MaxFlexibleShapes)
		}
		names := map[string]bool{}
		for _, s := range shapes {
			cpu, memory := s.Capacity.Cpu(), s.Capacity.Memory()
			if cpu.Cmp(flex.MinCPU) < 0 || cpu.Cmp(flex.MaxCPU) > 0 || memory.Cmp(flex.MinMemory) < 0 || memory.Cmp(flex.MaxMemory) > 0 {
				t.Fatalf("shape %s lies outside the range", s.Name)
			}
			if names[s.Name] {
				t.Fatalf("shape %s listed twice", s.Name)
			}
			names[s.Name] = true
		}
		first, last := shapes[0].Capacity, shapes[len(shapes)-1].Capacity
		if first.Cpu().MilliValue() != flex.MinCPU.MilliValue() || first.Memory().Value() != flex.MinMemory.Value() {
			t.Fatalf("first shape %s is not the range's minimum", shapes[0].Name)
		}
		// A range that expands is in whole millicores and bytes.
		maxMilli, maxBytes := flex.MaxCPU.MilliValue(), flex.MaxMemory.Value()
		if last.Cpu().MilliValue()+cpuStepQ.MilliValue() <= maxMilli || last.Memory().Value()+memoryStepQ.Value() <= maxBytes {
			t.Fatalf("last shape %s is not the range's largest size", shapes[len(shapes)-1].Name)
		}
	})
}

// FuzzFixedShapes: a fixed shape yields an error or itself with a finite
// price that is not negative.
func FuzzFixedShapes(f *testing.F) {
	f.Fuzz(func(t *testing.T, cpu, memory, price string) {
		if longExponent.MatchString(cpu) || longExponent.MatchString(memory) {
			t.Skip() // the API server refuses them
		}
		cpuQ, err := resource.ParseQuantity(cpu)
		if err != nil {
			t.Skip()
		}
		memoryQ, err := resource.ParseQuantity(memory)
		if err != nil {
			t.Skip()
		}
		shapes, err := fixedShapes([]v1alpha1.Shape{{Name: "fuzz", CPU: &cpuQ, Memory: &memoryQ, Price: price}})
		if err != nil {
			return
		}
		if len(shapes) != 1 {
			t.Fatalf("%d shapes, want 1", len(shapes))
		}
		if p := shapes[0].Price; !(p >= 0) || p > 1e300 {
			t.Fatalf("price %v", p)
		}
	})
}

// FuzzThresholdQuantity: an eviction threshold reserves nothing, or
// between zero and the whole capacity when it is a percentage.
func FuzzThresholdQuantity(f *testing.F) {
	f.Fuzz(func(t *testing.T, threshold, capacity string) {
		if longExponent.MatchString(capacity) {
			t.Skip() // the API server refuses it
		}
		capacityQ, err := resource.ParseQuantity(capacity)
		if err != nil || capacityQ.Sign() < 0 {
			t.Skip() // capacities are the shapes', which the API bounds
		}
		q, ok := thresholdQuantity(threshold, capacityQ)
		if !ok {
			return
		}
		if q.Sign() < 0 {
			t.Fatalf("threshold %q of %s reserves %s", threshold, capacity, q.String())
		}
		if len(threshold) > 0 && threshold[len(threshold)-1] == '%' && q.Cmp(capacityQ) > 0 {
			t.Fatalf("threshold %q of %s reserves %s, more than the capacity", threshold, capacity, q.String())
		}
		// And the machine's allocatable stays within its capacity.
		_, allocatable := nodeResources(resource.MustParse("2"), capacityQ, v1alpha1.KubeletConfiguration{
			EvictionHard: map[string]v1alpha1.EvictionThreshold{"memory.available": v1alpha1.EvictionThreshold(threshold)},
			KubeReserved: corev1.ResourceList{corev1.ResourceMemory: q},
		})
		if m := allocatable.Memory(); m.Sign() < 0 || m.Cmp(capacityQ) > 0 {
			t.Fatalf("allocatable memory %s of capacity %s", m.String(), capacity)
		}
	})
}
