package integration

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/claimscale/claimscale/internal/operator"
	"github.com/claimscale/claimscale/internal/scheme"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The metrics endpoint as the controller serves it by default: HTTPS, and
// only to a caller the API server authenticates and authorizes for GET
// /metrics (the chart's metrics-reader role). Anyone else who reaches the
// port learns nothing.
func TestMetricsAreServedOnlyToAuthorizedScrapers(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	address := harness.FreeLocalAddress(t)
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
	scraper := harness.ServiceAccountToken(ctx, t, clientset, "metrics-scraper")
	stranger := harness.ServiceAccountToken(ctx, t, clientset, "metrics-stranger")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "metrics-scraper", Namespace: harness.ControllerNamespace}},
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
