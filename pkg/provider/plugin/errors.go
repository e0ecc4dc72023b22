package plugin

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/claimscale/claimscale/pkg/provider"
)

// The google.rpc.ErrorInfo that marks an UNAVAILABLE answer as a machine
// still being made (provider.InProgressError).
const (
	errorInfoDomain     = "claimscale.io"
	errorInfoInProgress = "IN_PROGRESS"
)

// statusOf is the gRPC status a Server answers for a provider's error, as
// the proto documents: the kind in the code, a retryable error's wait in a
// google.rpc.RetryInfo detail, a machine still being made in an ErrorInfo.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isProviderError(err) {
		return err
	}
	var code codes.Code
	switch {
	case provider.IsNotFound(err):
		code = codes.NotFound
	case provider.IsInsufficientCapacity(err):
		code = codes.ResourceExhausted
	case provider.IsTerminal(err):
		code = codes.FailedPrecondition
	case provider.IsNotSupported(err):
		code = codes.Unimplemented
	default:
		code = codes.Unavailable
	}
	st := status.New(code, err.Error())
	if code != codes.Unavailable {
		return st.Err()
	}
	var details []protoadapt.MessageV1
	if after := provider.RetryAfter(err); after > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(after)})
	}
	if provider.IsInProgress(err) {
		details = append(details, &errdetails.ErrorInfo{Domain: errorInfoDomain, Reason: errorInfoInProgress})
	}
	if len(details) > 0 {
		if detailed, detailErr := st.WithDetails(details...); detailErr == nil {
			st = detailed
		}
	}
	return st.Err()
}

func isProviderError(err error) bool {
	var notFound *provider.NotFoundError
	var capacity *provider.InsufficientCapacityError
	var terminal *provider.TerminalError
	var retryable *provider.RetryableError
	var inProgress *provider.InProgressError
	var notSupported *provider.NotSupportedError
	return errors.As(err, &notFound) || errors.As(err, &capacity) || errors.As(err, &terminal) || errors.As(err, &retryable) || errors.As(err, &inProgress) || errors.As(err, &notSupported)
}

// errorOf turns a plugin's answer into the provider error of its kind.
// what says which call it was ("creating the machine of claim a").
// UNIMPLEMENTED is terminal here; to the power calls it means the plugin
// cannot manage power (powerErrorOf).
func errorOf(what string, err error, unreachable bool) error {
	st, _ := status.FromError(err)
	wrapped := fmt.Errorf("%s: the plugin answered %s: %s", what, st.Code(), st.Message())
	switch st.Code() {
	case codes.NotFound:
		return &provider.NotFoundError{Err: wrapped}
	case codes.ResourceExhausted:
		return provider.NewInsufficientCapacity(wrapped)
	case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.OutOfRange:
		return provider.NewTerminal(wrapped)
	}
	if unreachable {
		wrapped = &UnreachableError{Err: fmt.Errorf("%s: the plugin cannot be reached (%s): %s", what, st.Code(), st.Message()), timeout: st.Code() == codes.DeadlineExceeded}
	}
	var after time.Duration
	inProgress := false
	for _, detail := range st.Details() {
		switch info := detail.(type) {
		case *errdetails.RetryInfo:
			if info.GetRetryDelay() != nil {
				after = info.GetRetryDelay().AsDuration()
			}
		case *errdetails.ErrorInfo:
			inProgress = inProgress || (info.GetDomain() == errorInfoDomain && info.GetReason() == errorInfoInProgress)
		}
	}
	if inProgress && !unreachable {
		return provider.NewInProgress(wrapped, after)
	}
	return provider.NewRetryable(wrapped, after)
}

// powerErrorOf is errorOf for Suspend and Resume: UNIMPLEMENTED says the
// plugin cannot manage power (provider.NotSupportedError), and claimscale
// deletes instead.
func powerErrorOf(what string, err error, unreachable bool) error {
	if st, _ := status.FromError(err); st.Code() == codes.Unimplemented {
		return provider.NewNotSupported("%s: the plugin answered %s: %s", what, st.Code(), st.Message())
	}
	return errorOf(what, err, unreachable)
}

// UnreachableError says the plugin did not answer: no connection, or no
// answer in time. It is a net.Error, which claimscale reads as a
// NodeProvider that is Unreachable.
type UnreachableError struct {
	Err     error
	timeout bool
}

func (e *UnreachableError) Error() string   { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error   { return e.Err }
func (e *UnreachableError) Timeout() bool   { return e.timeout }
func (e *UnreachableError) Temporary() bool { return true }
