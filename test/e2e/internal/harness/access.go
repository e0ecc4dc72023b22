package harness

import (
	"context"
	"net"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GrantClusterRole makes role and binds it, under its own name, to the
// ServiceAccount account of the controller's namespace, both removed when
// the test ends.
func GrantClusterRole(ctx context.Context, t *testing.T, role *rbacv1.ClusterRole, account string) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ControllerNamespace}},
	}
	for _, object := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, object); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), object) })
	}
}

// ServiceAccountToken makes a ServiceAccount in the controller's namespace
// and returns a short-lived token for it.
func ServiceAccountToken(ctx context.Context, t *testing.T, clientset kubernetes.Interface, name string) string {
	t.Helper()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ControllerNamespace}}
	if err := env.Client.Create(ctx, account); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), account) })
	expiry := int64(600)
	token, err := clientset.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return token.Status.Token
}

// Bearer is a client configuration of the test API server that
// authenticates with token alone.
func Bearer(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	return cfg
}

// FreeLocalAddress is a loopback address with a port nothing listens on.
func FreeLocalAddress(t *testing.T) string {
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
