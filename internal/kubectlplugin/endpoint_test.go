package kubectlplugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestRefusedSaysHowLongTheControllerCachesAccess(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Forbidden", http.StatusForbidden)
	}))
	defer server.Close()
	base, err := url.Parse(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	err = (&endpointClient{base: base, client: server.Client()}).get(context.Background(), "pods/shop/web", &struct{}{})
	for _, want := range []string{"the controller refused the request (403 Forbidden)", "bind the claimscale-decisions-reader ClusterRole",
		"a refusal for 30s and a grant for 5m", "a new binding takes effect within 30s and a removed one within 5m"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refused: %v, want it to say %q", err, want)
		}
	}
}
