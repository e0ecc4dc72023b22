package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/kubectlplugin"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// runPlugin runs `kubectl claimscale` with a kubeconfig for config's user
// and returns what it printed and its error.
func runPlugin(t *testing.T, config *rest.Config, args ...string) (string, error) {
	t.Helper()
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["e2e"] = &clientcmdapi.Cluster{Server: config.Host, CertificateAuthorityData: config.CAData}
	kubeconfig.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: config.BearerToken, ClientCertificateData: config.CertData, ClientKeyData: config.KeyData}
	kubeconfig.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user", Namespace: "default"}
	kubeconfig.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append(args, "--kubeconfig", path))
	err := cmd.Execute()
	return out.String(), err
}

// A kubeconfig whose user has a client certificate and no token reads the
// decisions: the controller's endpoint accepts certificates signed by the
// cluster's client CA (read from kube-system's
// extension-apiserver-authentication, as the API server publishes it) and
// still asks the API server whether that user may read them. A user with
// a valid certificate but no binding is refused (403), and a certificate
// of another CA authenticates nobody (401).
func TestEndpointAcceptsClientCertificatesOfTheClustersClientCA(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	ctx := context.Background()
	g := NewWithT(t)
	reader := "decisions-reader-by-certificate"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: reader},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/decisions", "/decisions/*"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: reader},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: reader}},
	}
	for _, object := range []client.Object{role, binding} {
		g.Expect(env.Client.Create(ctx, object)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), object) })
	}
	endpoint := []string{"--endpoint", "https://" + address, "--insecure-skip-endpoint-verify"}
	why := append([]string{"why", "pod/never-pending", "-n", "default"}, endpoint...)

	allowed, err := env.UserConfig(reader)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allowed.BearerToken).To(BeEmpty())
	g.Eventually(func(g Gomega) {
		_, err := runPlugin(t, allowed, why...)
		// The endpoint's 404: through authentication and authorization.
		g.Expect(err).To(MatchError(ContainSubstring("claimscale has recorded no decision about pod default/never-pending")))
	}).Should(Succeed())

	unbound, err := env.UserConfig("not-a-decisions-reader")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = runPlugin(t, unbound, why...)
	g.Expect(err).To(MatchError(ContainSubstring("the controller refused the request (403 Forbidden)")))

	foreign := rest.CopyConfig(allowed)
	foreign.CertData, foreign.KeyData = foreignClientCertificate(t, reader)
	_, err = runPlugin(t, foreign, why...)
	g.Expect(err).To(MatchError(ContainSubstring("the controller refused the request (401 Unauthorized)")))
}

// foreignClientCertificate is a client certificate for user signed by a
// CA the cluster does not know.
func foreignClientCertificate(t *testing.T, user string) (certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the cluster's CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: user},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// Without --endpoint the plugin finds the controller by namespace and
// labels, picks among the ready pods the one that holds the leader lease
// (only the leader has records), and asks the API server for a
// port-forward to its metrics port, as kubectl port-forward does. kwok's
// pods have no kubelet to forward to, so the forward itself fails here;
// the test checks that it was asked of the right pod and port, through
// the API server, with the caller's own rights.
func TestWhyWithoutEndpointPortForwardsToTheLeaderPod(t *testing.T) {
	harness.StartOperator(t, harness.OperatorOptions{})
	s := harness.NewScenario(t, "find-controller")
	defer s.Cleanup()
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	s.CreateDeployment("controller", 2, "100m", func(deployment *appsv1.Deployment) {
		deployment.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9443}}
	})
	var pods []corev1.Pod
	s.G.Eventually(func(g Gomega) {
		pods = s.Pods("controller")
		g.Expect(pods).To(HaveLen(2))
		for _, pod := range pods {
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
			ready := false
			for _, condition := range pod.Status.Conditions {
				ready = ready || (condition.Type == corev1.PodReady && condition.Status == corev1.ConditionTrue)
			}
			g.Expect(ready).To(BeTrue())
		}
	}).Should(Succeed())
	// The lease names the second pod by name, so the first ready pod by
	// name is not it.
	leader := pods[0]
	if pods[1].Name > leader.Name {
		leader = pods[1]
	}
	holder := leader.Name + "_4c6a2d1e-8f0b-4c1e-9b8e-0d1f2a3b4c5d"
	s.G.Expect(env.Client.Create(s.Ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "claimscale-" + s.Name, Namespace: s.Namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	})).To(Succeed())

	admin := rest.CopyConfig(env.Config)
	flags := []string{"--controller-namespace", s.Namespace, "--controller-selector", "app=controller"}
	_, err := runPlugin(t, admin, append([]string{"why", "node/anything"}, flags...)...)
	s.G.Expect(err).To(MatchError(ContainSubstring("port-forwarding to port 9443 of controller pod %s/%s: ", s.Namespace, leader.Name)))
	t.Logf("why without --endpoint: %v", err)

	_, err = runPlugin(t, admin, "why", "node/anything", "--controller-namespace", s.Namespace, "--controller-selector", "app=nothing-here")
	s.G.Expect(err).To(MatchError(ContainSubstring("no ready controller pod with labels app=nothing-here in namespace " + s.Namespace)))

	// A user who may not port-forward in that namespace is refused by
	// the API server, not let through by the plugin.
	viewer, err := env.UserConfig("pod-lister-only")
	s.G.Expect(err).NotTo(HaveOccurred())
	lister := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-lister", Namespace: s.Namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}},
	}
	s.G.Expect(env.Client.Create(s.Ctx, lister)).To(Succeed())
	s.G.Expect(env.Client.Create(s.Ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-lister", Namespace: s.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: lister.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "pod-lister-only"}},
	})).To(Succeed())
	s.G.Eventually(func(g Gomega) {
		_, err := runPlugin(t, viewer, append([]string{"why", "node/anything"}, flags...)...)
		g.Expect(err).To(MatchError(And(ContainSubstring("port-forwarding to port 9443 of controller pod %s/", s.Namespace), ContainSubstring("forbidden"))))
		t.Logf("why without --endpoint, no pods/portforward right: %v", err)
	}).Should(Succeed())
}
