package externalgrpc

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// serverTLS is the server's side of mutual TLS: its own certificate, kept
// current by a certwatcher, and the CA that client certificates must chain
// to, re-read when its file changes. Both are read per handshake, so a
// renewed certificate or CA applies to the next connection without a
// restart.
type serverTLS struct {
	certs    *certwatcher.CertWatcher
	clientCA *clientCA
}

func newServerTLS(certFile, keyFile, clientCAFile string, logger logr.Logger) (*serverTLS, error) {
	if certFile == "" || keyFile == "" || clientCAFile == "" {
		return nil, fmt.Errorf("mutual TLS needs a server certificate, its key and the CA of client certificates (--grpc-cert, --grpc-key, --grpc-client-ca), or --grpc-insecure for plaintext")
	}
	certs, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the gRPC server certificate: %w", err)
	}
	clientCA := &clientCA{path: clientCAFile, logger: logger}
	if _, err := clientCA.load(); err != nil {
		return nil, err
	}
	return &serverTLS{certs: certs, clientCA: clientCA}, nil
}

// config demands and verifies a client certificate, over TLS 1.3 at the
// least.
func (s *serverTLS) config() *tls.Config {
	perConnection := func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{
			MinVersion:     tls.VersionTLS13,
			ClientAuth:     tls.RequireAndVerifyClientCert,
			ClientCAs:      s.clientCA.pool(),
			GetCertificate: s.certs.GetCertificate,
			// The config returned here replaces the one gRPC set up, ALPN
			// included; gRPC clients refuse a server that does not offer h2.
			NextProtos: []string{"h2"},
		}, nil
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ClientAuth:         tls.RequireAndVerifyClientCert,
		GetCertificate:     s.certs.GetCertificate,
		GetConfigForClient: perConnection,
	}
}

// clientCA is the CA bundle client certificates are verified against,
// re-read when the file's content changes and kept as it was when the new
// content is unreadable.
type clientCA struct {
	path   string
	logger logr.Logger

	mu      sync.Mutex
	content []byte
	current *x509.CertPool
}

func (c *clientCA) pool() *x509.CertPool {
	pool, err := c.load()
	if err != nil {
		c.logger.Error(err, "keeping the previous client CA")
	}
	return pool
}

// load re-reads the file (a handshake is rare next to a file read) and
// parses it only when it changed.
func (c *clientCA) load() (*x509.CertPool, error) {
	content, err := os.ReadFile(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return c.current, fmt.Errorf("reading the client CA %s: %w", c.path, err)
	}
	if c.current != nil && bytes.Equal(content, c.content) {
		return c.current, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(content) {
		return c.current, fmt.Errorf("the client CA %s holds no PEM certificate", c.path)
	}
	if c.current != nil {
		c.logger.Info("client CA changed; new connections are verified against it", "path", c.path)
	}
	c.content, c.current = content, pool
	return pool, nil
}
