package provider

import (
	"context"
	"errors"
	"fmt"
)

// InstanceSuspended is the state of a machine that sleeps: stopped, with
// its disk, identity (providerID) and tags kept, and no Node. Get and List
// report it like any other machine of ours.
const InstanceSuspended InstanceState = "Suspended"

// PowerManager is implemented by a provider that can stop a machine and
// start it again with its disk, identity and tags: its pools may let
// machines sleep instead of deleting them (NodePool
// spec.disruption.sleep). Both calls are idempotent and refuse a machine
// without our cluster tag (Terminal); a machine that is gone is NotFound.
// Delete works on a sleeping machine as on a running one.
type PowerManager interface {
	// Suspend stops the machine, cleanly where the infrastructure can (an
	// ACPI shutdown with a timeout, then a hard stop). A machine already
	// stopped is success.
	Suspend(ctx context.Context, providerID string) error
	// Resume starts a stopped machine. A running machine is success. A
	// machine that cannot start where it is (its host has no memory free,
	// and a VM cannot take its local disk elsewhere) is
	// InsufficientCapacity: the caller deletes it and makes a new one.
	Resume(ctx context.Context, providerID string) error
}

// PowerCapability is implemented by a PowerManager that learns only at run
// time whether it can manage power: a plugin whose server may not
// implement the power calls, a wrapper around another provider.
type PowerCapability interface {
	CanManagePower(ctx context.Context) bool
}

// CanManagePower reports whether p can suspend and resume machines.
func CanManagePower(ctx context.Context, p Provider) bool {
	if capability, ok := p.(PowerCapability); ok {
		return capability.CanManagePower(ctx)
	}
	_, ok := p.(PowerManager)
	return ok
}

// NotSupportedError says the provider cannot do what was asked (a plugin
// whose server answers UNIMPLEMENTED to the power calls). The caller falls
// back to what works without it: a node that was to sleep is deleted.
type NotSupportedError struct{ Err error }

func (e *NotSupportedError) Error() string { return "not supported: " + e.Err.Error() }
func (e *NotSupportedError) Unwrap() error { return e.Err }

// NewNotSupported wraps err as a NotSupportedError.
func NewNotSupported(format string, args ...any) error {
	return &NotSupportedError{Err: fmt.Errorf(format, args...)}
}

// IsNotSupported reports whether err says the provider cannot do it.
func IsNotSupported(err error) bool {
	var target *NotSupportedError
	return errors.As(err, &target)
}
