package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"k8s.io/client-go/rest"
)

// errNotFound is the endpoint's 404: no decision recorded.
var errNotFound = errors.New("not found")

// endpointClient reads the decision records from the controller with the
// caller's bearer token: the controller's server checks it with a
// TokenReview and a SubjectAccessReview on the path.
type endpointClient struct {
	base   *url.URL
	client *http.Client
}

func (o *options) endpointClient() (*endpointClient, error) {
	if o.endpoint == "" {
		return nil, fmt.Errorf("--endpoint is required: the URL of the controller's metrics server, e.g. https://127.0.0.1:8443 after `kubectl port-forward -n claimscale-system svc/claimscale-metrics 8443`")
	}
	base, err := url.Parse(o.endpoint)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("--endpoint %q is not a URL like https://HOST:PORT", o.endpoint)
	}
	config, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	token := config.BearerToken
	if token == "" && config.BearerTokenFile != "" {
		data, err := os.ReadFile(config.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig's token file: %w", err)
		}
		token = strings.TrimSpace(string(data))
	}
	if token == "" && config.ExecProvider == nil && config.AuthProvider == nil {
		return nil, fmt.Errorf("the controller authenticates callers by bearer token, and the kubeconfig's user has none: pass --token")
	}
	// Only the caller's credentials go along, never the API server's
	// address or CA: the endpoint is a different server.
	endpointConfig := &rest.Config{
		Host:            base.String(),
		BearerToken:     token,
		ExecProvider:    config.ExecProvider,
		AuthProvider:    config.AuthProvider,
		TLSClientConfig: rest.TLSClientConfig{CAFile: o.endpointCA, Insecure: o.insecureEndpoint},
	}
	if o.endpointCA == "" && !o.insecureEndpoint && base.Scheme == "https" {
		return nil, fmt.Errorf("the endpoint's certificate cannot be verified without --endpoint-ca; pass --insecure-skip-endpoint-verify to trust it anyway (the controller's default certificate is self-signed)")
	}
	client, err := rest.HTTPClientFor(endpointConfig)
	if err != nil {
		return nil, fmt.Errorf("building the endpoint's client: %w", err)
	}
	return &endpointClient{base: base, client: client}, nil
}

// get decodes the JSON at path (under /decisions/) into out.
func (c *endpointClient) get(ctx context.Context, path string, out any) error {
	u := c.base.JoinPath("decisions", path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("reading decisions from %s: %w", c.base.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading decisions from %s: %w", c.base.Host, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return json.Unmarshal(body, out)
	case http.StatusNotFound:
		return errNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("the controller refused the request (%s): bind the claimscale-decisions-reader ClusterRole to your user", resp.Status)
	default:
		return fmt.Errorf("reading decisions from %s: %s: %s", c.base.Host, resp.Status, strings.TrimSpace(string(body)))
	}
}
