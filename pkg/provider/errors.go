package provider

import (
	"errors"
	"fmt"
	"time"
)

// The error kinds a provider returns. Callers decide with errors.As / the
// Is* helpers, never by matching text.
//
//   - NotFound: the machine does not exist (Delete treats it as done).
//   - InsufficientCapacity: the provider is out of capacity or quota for
//     that shape; provisioning backs the pool and shape off.
//   - Terminal: retrying will not help (bad credentials, invalid settings).
//   - NotSupported: the provider cannot do it at all (power.go).
//   - InProgress: nothing failed; the machine is still being made and
//     cannot be reported yet (a Proxmox clone task running, a Cluster API
//     Machine without a providerID). Create is asked again after a wait.
//   - anything else is retryable, with backoff; Retryable carries a hint.

// NotFoundError says a machine does not exist.
type NotFoundError struct{ Err error }

func (e *NotFoundError) Error() string { return "machine not found: " + e.Err.Error() }
func (e *NotFoundError) Unwrap() error { return e.Err }

// InsufficientCapacityError says the provider cannot make this shape now.
type InsufficientCapacityError struct{ Err error }

func (e *InsufficientCapacityError) Error() string {
	return "insufficient capacity: " + e.Err.Error()
}
func (e *InsufficientCapacityError) Unwrap() error { return e.Err }

// TerminalError says retrying will not help.
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// RetryableError is a transient error with an optional wait the provider
// asked for (Retry-After).
type RetryableError struct {
	Err   error
	After time.Duration
}

func (e *RetryableError) Error() string { return e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// InProgressError says the machine is being made: nothing failed, and
// Create answers it once asked again after After.
type InProgressError struct {
	Err   error
	After time.Duration
}

func (e *InProgressError) Error() string { return e.Err.Error() }
func (e *InProgressError) Unwrap() error { return e.Err }

// NewInProgress wraps err, which says what is still being done, as an
// InProgressError that asks to be called again after after.
func NewInProgress(err error, after time.Duration) error {
	return &InProgressError{Err: err, After: after}
}

// IsInProgress reports whether err says the machine is still being made.
func IsInProgress(err error) bool {
	var target *InProgressError
	return errors.As(err, &target)
}

// NewNotFound wraps err as a NotFoundError.
func NewNotFound(format string, args ...any) error {
	return &NotFoundError{Err: fmt.Errorf(format, args...)}
}

// NewInsufficientCapacity wraps err as an InsufficientCapacityError.
func NewInsufficientCapacity(err error) error { return &InsufficientCapacityError{Err: err} }

// NewTerminal wraps err as a TerminalError.
func NewTerminal(err error) error { return &TerminalError{Err: err} }

// NewRetryable wraps err as a RetryableError that asks to wait at least after.
func NewRetryable(err error, after time.Duration) error {
	return &RetryableError{Err: err, After: after}
}

// IsNotFound reports whether err says the machine does not exist.
func IsNotFound(err error) bool {
	var target *NotFoundError
	return errors.As(err, &target)
}

// IsInsufficientCapacity reports whether err says the provider is out of
// capacity or quota.
func IsInsufficientCapacity(err error) bool {
	var target *InsufficientCapacityError
	return errors.As(err, &target)
}

// IsTerminal reports whether retrying err cannot help.
func IsTerminal(err error) bool {
	var target *TerminalError
	return errors.As(err, &target)
}

// IsRetryable reports whether err is worth retrying with backoff.
func IsRetryable(err error) bool {
	return err != nil && !IsNotFound(err) && !IsInsufficientCapacity(err) && !IsTerminal(err) && !IsNotSupported(err)
}

// RetryAfter returns the wait a RetryableError or an InProgressError asked
// for, or zero.
func RetryAfter(err error) time.Duration {
	var retryable *RetryableError
	if errors.As(err, &retryable) {
		return retryable.After
	}
	var inProgress *InProgressError
	if errors.As(err, &inProgress) {
		return inProgress.After
	}
	return 0
}
