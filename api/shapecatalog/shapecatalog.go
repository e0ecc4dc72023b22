// Package shapecatalog is the vocabulary of machine sizes that providers and the
// scheduling core share: the Shape a provider offers, the price a size has
// when neither the pool nor the provider names one, the flexible range's
// grid (Grid) and the name a size of it is given. It imports nothing of
// ours but the API types, so the scheduling core and every provider may use
// it without depending on each other.
package shapecatalog

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Shape is a machine size a provider can make.
type Shape struct {
	Name string
	// Capacity: cpu and memory, and ephemeral-storage where the provider
	// knows the root disk.
	Capacity corev1.ResourceList
	// Price per hour; zero when unknown.
	Price float64
	// Inventory marks a shape of a fixed inventory of machines (servers
	// powered on and off, not made): only Available of them are free now,
	// and provisioning makes no more claims of the shape than that. A
	// cloud's shapes leave it unset: their count is not known ahead.
	Inventory bool
	Available int
	// Taken says, for an inventory shape with none available, what holds
	// its machines ("r640-01 on for claim web-x, r640-02 on without a
	// claim"), for the pods that find none free.
	Taken string
}

// Default prices for sizes whose pool and provider name none: one unit per
// core and a quarter unit per GiB of memory per hour, the rule the NodePool
// API documents, so that "cheapest" still means "smallest".
const (
	DefaultPricePerCPU = 1.0
	DefaultPricePerGiB = 0.25
)

const gib = 1 << 30

// SizePrice is the hourly price of a size at the given unit prices.
func SizePrice(cpu, memory resource.Quantity, perCPU, perGiB float64) float64 {
	return float64(cpu.MilliValue())/1000*perCPU + float64(memory.Value())/gib*perGiB
}

// DefaultSizePrice is SizePrice at the default unit prices.
func DefaultSizePrice(cpu, memory resource.Quantity) float64 {
	return SizePrice(cpu, memory, DefaultPricePerCPU, DefaultPricePerGiB)
}

// FlexibleName is the name of a size of a flexible range, as claims and
// the node.kubernetes.io/instance-type label carry it: flex-<cpu>-<memory>
// (flex-2-4Gi, flex-1500m-3Gi).
func FlexibleName(cpu, memory resource.Quantity) string {
	return fmt.Sprintf("flex-%s-%s", cpu.String(), memory.String())
}
