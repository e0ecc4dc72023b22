package operator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Where the API server publishes the CA of the client certificates it
// accepts, readable through the standard Role
// extension-apiserver-authentication-reader in kube-system (as
// k8s.io/apiserver's delegating authentication reads it).
const (
	clientCANamespace = "kube-system"
	clientCAConfigMap = "extension-apiserver-authentication"
	clientCAKey       = "client-ca-file"
	// The published CA is read again at most this often.
	clientCARefresh = time.Minute
)

// requestClientCertificates asks callers for a certificate without
// requiring one: a bearer token still works, and a certificate is checked
// by the authenticator against the cluster's client CA, not by TLS.
func requestClientCertificates(config *tls.Config) { config.ClientAuth = tls.RequestClientCert }

// authenticateAndAuthorize is controller-runtime's
// WithAuthenticationAndAuthorization (a TokenReview for a bearer token, a
// SubjectAccessReview for the request's verb and path), with one addition
// that kubeconfigs with a client certificate need: a certificate signed
// by the cluster's client CA authenticates its common name and
// organisations as user and groups, as the API server itself does.
func authenticateAndAuthorize(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	clientset, err := kubernetes.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                           time.Minute,
		TokenAccessReviewClient:            clientset.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                backoff,
		ClientCertificateCAContentProvider: &clusterClientCA{kube: clientset},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the endpoint's authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: clientset.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the endpoint's authorizer: %w", err)
	}
	return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			res, ok, err := authenticator.AuthenticateRequest(req)
			if err != nil {
				// A certificate the cluster's CA did not sign is an
				// error here, and an unauthenticated caller like any.
				log.V(1).Info("authentication failed", "error", err.Error())
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			if !ok {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			attributes := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
			decision, reason, err := authz.Authorize(req.Context(), attributes)
			if err != nil {
				log.Error(err, "authorizing a request failed", "user", res.User.GetName())
				http.Error(w, "Authorization for user "+res.User.GetName()+" failed", http.StatusInternalServerError)
				return
			}
			if decision != authorizer.DecisionAllow {
				log.V(4).Info("request denied", "user", res.User.GetName(), "reason", reason)
				http.Error(w, "Authorization denied for user "+res.User.GetName(), http.StatusForbidden)
				return
			}
			handler.ServeHTTP(w, req)
		}), nil
	}, nil
}

// clusterClientCA is the client CA the API server publishes, read when a
// caller presents a certificate and at most every clientCARefresh, so
// the server needs no watch of its own and follows a rotated CA.
type clusterClientCA struct {
	kube kubernetes.Interface

	mu      sync.Mutex
	read    time.Time
	content dynamiccertificates.CAContentProvider
}

var _ dynamiccertificates.CAContentProvider = &clusterClientCA{}

func (c *clusterClientCA) Name() string { return "cluster-client-ca" }

func (c *clusterClientCA) current() dynamiccertificates.CAContentProvider {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.content != nil && time.Since(c.read) < clientCARefresh {
		return c.content
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var bundle []byte
	configMap, err := c.kube.CoreV1().ConfigMaps(clientCANamespace).Get(ctx, clientCAConfigMap, metav1.GetOptions{})
	if err == nil {
		bundle = []byte(configMap.Data[clientCAKey])
	}
	if len(bundle) == 0 {
		// Unreadable now: keep what was read before, if anything.
		return c.content
	}
	content, err := dynamiccertificates.NewStaticCAContent(c.Name(), bundle)
	if err != nil {
		return c.content
	}
	c.content, c.read = content, time.Now()
	return c.content
}

func (c *clusterClientCA) CurrentCABundleContent() []byte {
	if content := c.current(); content != nil {
		return content.CurrentCABundleContent()
	}
	return nil
}

// VerifyOptions is false while the CA cannot be read: certificates then
// authenticate nobody, and tokens still do.
func (c *clusterClientCA) VerifyOptions() (x509.VerifyOptions, bool) {
	if content := c.current(); content != nil {
		return content.VerifyOptions()
	}
	return x509.VerifyOptions{}, false
}

func (c *clusterClientCA) AddListener(dynamiccertificates.Listener) {}
