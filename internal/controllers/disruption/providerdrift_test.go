package disruption

import (
	"context"
	"testing"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

type plainProvider struct{ provider.Provider }

type driftingProvider struct{ provider.Provider }

func (driftingProvider) Drifted(context.Context, *v1alpha1.NodeClaim) (string, string, error) {
	return "", "", nil
}

// wrapper answers Drifted for any provider, as the redacting wrapper does.
type wrapper struct {
	provider.Provider
	next provider.Provider
}

func (w wrapper) Drifted(context.Context, *v1alpha1.NodeClaim) (string, string, error) {
	return "", "", nil
}
func (w wrapper) Unwrap() provider.Provider { return w.next }

// A quiet controller comes back for provider drift only when a provider
// really tells drift of its own, seen through the wrapper every provider
// is handed out in.
func TestChecksDriftLooksThroughWrappers(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    provider.Provider
		want bool
	}{
		{"a provider without a drift check", plainProvider{}, false},
		{"a provider with one", driftingProvider{}, true},
		{"a wrapped provider without one", wrapper{next: plainProvider{}}, false},
		{"a wrapped provider with one", wrapper{next: driftingProvider{}}, true},
		{"twice wrapped", wrapper{next: wrapper{next: driftingProvider{}}}, true},
	} {
		if got := checksDrift(tc.p); got != tc.want {
			t.Errorf("%s: checksDrift = %t, want %t", tc.name, got, tc.want)
		}
	}
}
