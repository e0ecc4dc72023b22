package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
)

// The metrics endpoint as the controller serves it by default: HTTPS, and
// only to a caller the API server authenticates and authorizes for GET
// /metrics (the chart's metrics-reader role). Anyone else who reaches the
// port learns nothing.
func TestMetricsAreServedOnlyToAuthorizedScrapers(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	address := freeLocalAddress(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                operator.MetricsOptions(address, true),
		HealthProbeBindAddress: "0",
	})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	defer func() { cancel(); <-stopped }()

	clientset, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	scraper := serviceAccountToken(ctx, t, clientset, "metrics-scraper")
	stranger := serviceAccountToken(ctx, t, clientset, "metrics-stranger")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "metrics-scraper", Namespace: controllerNamespace}},
	}
	g.Expect(env.Client.Create(ctx, role)).To(Succeed())
	g.Expect(env.Client.Create(ctx, binding)).To(Succeed())
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), role)
	})

	// The certificate is the server's own self-signed one, as Kubebuilder
	// serves it; the scrapers here only care who is let in.
	httpClient := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	scrape := func(token string) (int, string) {
		request, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+address+"/metrics", nil)
		if err != nil {
			return 0, err.Error()
		}
		if token != "" {
			request.Header.Set("Authorization", "Bearer "+token)
		}
		response, err := httpClient.Do(request)
		if err != nil {
			return 0, err.Error()
		}
		defer response.Body.Close()
		body, _ := io.ReadAll(response.Body)
		return response.StatusCode, string(body)
	}

	g.Eventually(func() int { code, _ := scrape(""); return code }, 30*time.Second).Should(Equal(http.StatusUnauthorized), "no token")
	g.Eventually(func() int { code, _ := scrape(stranger); return code }, 10*time.Second).Should(Equal(http.StatusForbidden), "a token without the role")
	g.Eventually(func() int { code, _ := scrape(scraper); return code }, 10*time.Second).Should(Equal(http.StatusOK), "the metrics-reader role")
	_, body := scrape(scraper)
	g.Expect(body).To(ContainSubstring("go_goroutines"), "the metrics themselves")

	// Plain HTTP gets nothing from the TLS listener.
	plain := &http.Client{Timeout: 5 * time.Second}
	response, err := plain.Get("http://" + address + "/metrics")
	if err == nil {
		defer response.Body.Close()
		g.Expect(response.StatusCode).To(Equal(http.StatusBadRequest), "plain HTTP to a TLS port")
	}
}

// freeLocalAddress is a loopback address with a port nothing listens on.
func freeLocalAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	if err := listener.Close(); err != nil {
		t.Fatal(err)
	}
	return address
}

// serviceAccountToken makes a ServiceAccount in the controller's namespace
// and returns a short-lived token for it.
func serviceAccountToken(ctx context.Context, t *testing.T, clientset kubernetes.Interface, name string) string {
	t.Helper()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controllerNamespace}}
	if err := env.Client.Create(ctx, account); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), account) })
	expiry := int64(600)
	token, err := clientset.CoreV1().ServiceAccounts(controllerNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return token.Status.Token
}
