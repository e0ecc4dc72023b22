package cloudscale_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/claimscale/claimscale/pkg/provider"
	"github.com/claimscale/claimscale/pkg/provider/cloudscale"
)

// An API that refuses connections is unreachable, not an API error: the
// error stays a net.Error (with the token removed from its message), so
// claimscale reports the NodeProvider Unreachable and stops calling it.
func TestAnEndpointThatRefusesConnectionsIsUnreachable(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := closed.Addr().String()
	_ = closed.Close()
	settings := baseSettings()
	settings.UserDataSecretRef = nil
	p, err := cloudscale.NewWithConfig(t.Context(), nodeProvider(settings), provider.Options{
		ClusterName: testCluster,
		Credentials: map[string][]byte{cloudscale.CredentialToken: []byte(testToken), cloudscale.CredentialAPIURL: []byte("http://" + address)},
	}, cloudscale.Config{MaxTries: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.List(t.Context())
	var netErr net.Error
	if !provider.IsRetryable(err) || !errors.As(err, &netErr) || strings.Contains(err.Error(), testToken) {
		t.Fatalf("List against a closed port = %v, want a retryable net.Error without the token", err)
	}
}
