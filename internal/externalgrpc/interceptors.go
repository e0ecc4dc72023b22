package externalgrpc

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/claimscale/claimscale/internal/metrics"
)

// interceptors wrap every call, outermost first: metrics per method and
// code, a request log at debug level, the logger in the context for the
// handlers, and panic recovery innermost, so a panic is counted and logged
// as the codes.Internal it becomes and the process lives on.
func interceptors(logger logr.Logger) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(
		metrics.GRPCServer.UnaryServerInterceptor(),
		logging.UnaryServerInterceptor(requestLogger(logger),
			logging.WithLogOnEvents(logging.FinishCall),
			logging.WithLevels(levelOf),
		),
		withLogger(logger),
		recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(func(ctx context.Context, recovered any) error {
			method, _ := grpc.Method(ctx)
			logger.Error(fmt.Errorf("%v", recovered), "panic while handling a call", "method", method, "stack", string(debug.Stack()))
			return status.Errorf(codes.Internal, "internal error handling %s", method)
		})),
	)
}

// levelOf keeps failures the server is to blame for visible and every
// other call at debug level: cluster-autoscaler calls several times a
// second, and Unimplemented is an everyday answer.
func levelOf(code codes.Code) logging.Level {
	switch code {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return logging.LevelError
	}
	return logging.LevelDebug
}

// requestLogger writes the logging interceptor's lines to logr: errors at
// the default verbosity, everything else at V(1).
func requestLogger(logger logr.Logger) logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, level logging.Level, message string, fields ...any) {
		if level >= logging.LevelError {
			logger.Info(message, fields...)
			return
		}
		logger.V(1).Info(message, fields...)
	})
}

// withLogger puts the server's logger, named after the method, in the
// handlers' context.
func withLogger(logger logr.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, request any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(log.IntoContext(ctx, logger.WithValues("method", info.FullMethod)), request)
	}
}
