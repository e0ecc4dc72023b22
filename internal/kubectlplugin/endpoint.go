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

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// How long the controller's metrics server caches the API server's
// answers to its SubjectAccessReviews (controller-runtime's
// filters.WithAuthenticationAndAuthorization, the delegating authorizer's
// defaults) and TokenReviews: a user who was just bound is still refused
// for up to the first, one just unbound still served for up to the second.
const (
	accessCacheRefused = "30s"
	accessCacheGranted = "5m"
)

// errNotFound is the endpoint's 404: no decision recorded.
var errNotFound = errors.New("not found")

// endpointClient reads the decision records from the controller with the
// caller's credentials, a bearer token or a client certificate: the
// controller's server checks a token with a TokenReview, a certificate
// against the cluster's client CA, and either caller with a
// SubjectAccessReview on the path.
type endpointClient struct {
	base   *url.URL
	client *http.Client
	// close ends the port-forward, if one was opened.
	close func()
}

// Close ends what the client opened.
func (c *endpointClient) Close() {
	if c.close != nil {
		c.close()
	}
}

// endpointClient reaches the controller at --endpoint or, by default, at a
// ready controller pod through a port-forward the API server opens with
// the caller's rights, as `kubectl port-forward` does.
func (o *options) endpointClient(ctx context.Context) (*endpointClient, error) {
	config, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	endpoint, insecure, closeForward := o.endpoint, o.insecureEndpoint, func() {}
	if endpoint == "" {
		kube, err := kubernetes.NewForConfig(config)
		if err != nil {
			return nil, fmt.Errorf("connecting to the API server: %w", err)
		}
		pod, err := findController(ctx, kube, o.controllerNamespace, o.controllerSelector)
		if err != nil {
			return nil, err
		}
		port := o.controllerPort
		if port == 0 {
			port = metricsPort(pod)
		}
		local, closeFn, err := forwardPort(ctx, config, pod, port, o.streams.ErrOut)
		if err != nil {
			return nil, err
		}
		endpoint, closeForward = fmt.Sprintf("https://127.0.0.1:%d", local), closeFn
		// The controller's certificate is self-signed by default. The
		// tunnel already ends in the pod chosen above, through the API
		// server, authenticated both ways; a CA given still verifies.
		insecure = insecure || o.endpointCA == ""
	}
	client, err := o.newEndpointClient(config, endpoint, insecure)
	if err != nil {
		closeForward()
		return nil, err
	}
	client.close = closeForward
	return client, nil
}

func (o *options) newEndpointClient(config *rest.Config, endpoint string, insecure bool) (*endpointClient, error) {
	base, err := url.Parse(endpoint)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("--endpoint %q is not a URL like https://HOST:PORT", endpoint)
	}
	token := config.BearerToken
	if token == "" && config.BearerTokenFile != "" {
		data, err := os.ReadFile(config.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig's token file: %w", err)
		}
		token = strings.TrimSpace(string(data))
	}
	hasCertificate := len(config.CertData) > 0 || config.CertFile != ""
	if token == "" && !hasCertificate && config.ExecProvider == nil && config.AuthProvider == nil {
		return nil, fmt.Errorf("the kubeconfig's user has neither a token nor a client certificate for the controller to authenticate; pass --token")
	}
	// Only the caller's credentials go along, never the API server's
	// address or CA: the endpoint is a different server.
	endpointConfig := &rest.Config{
		Host:         base.String(),
		BearerToken:  token,
		ExecProvider: config.ExecProvider,
		AuthProvider: config.AuthProvider,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: o.endpointCA, Insecure: insecure,
			CertFile: config.CertFile, KeyFile: config.KeyFile, CertData: config.CertData, KeyData: config.KeyData,
		},
	}
	if o.endpointCA == "" && !insecure && base.Scheme == "https" {
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
		return fmt.Errorf("the controller refused the request (%s): bind the claimscale-decisions-reader ClusterRole (and, in the controller's namespace, its Role) to your user; "+
			"the controller caches each answer of the API server about a caller, a refusal for %s and a grant for %s, so a new binding takes effect within %s and a removed one within %s",
			resp.Status, accessCacheRefused, accessCacheGranted, accessCacheRefused, accessCacheGranted)
	default:
		return fmt.Errorf("reading decisions from %s: %s: %s", c.base.Host, resp.Status, strings.TrimSpace(string(body)))
	}
}
