package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// mediaServer serves redfish seed images to BMCs. Every replica serves,
// leader or not: a BMC may be sent to any of them, and the seeds are read
// from the API server, not from the leader's memory.
type mediaServer struct {
	address string
	handler http.Handler
}

// NeedLeaderElection is false: see mediaServer.
func (*mediaServer) NeedLeaderElection() bool { return false }

func (m *mediaServer) Start(ctx context.Context) error {
	listener, err := net.Listen("tcp", m.address)
	if err != nil {
		return fmt.Errorf("listening for BMCs on %s (--redfish-media-bind-address): %w", m.address, err)
	}
	server := &http.Server{Handler: m.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving seed images on %s: %w", m.address, err)
	}
	return nil
}
