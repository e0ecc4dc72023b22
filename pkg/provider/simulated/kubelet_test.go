package simulated

import (
	"strings"
	"testing"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/pkg/provider"
)

// User data carries a join token, so it is kept in a Secret beside the
// machine record, never in the record, and goes when the machine does.
func TestUserDataIsKeptInASecretAndGoesWithTheMachine(t *testing.T) {
	g := gomega.NewWithT(t)
	ns := newNamespace(t)
	claim := newClaim(uniqueName(t, "a"), "pool")
	p := newTestProvider(t, ns, "c1", nil, Config{})
	userData := "#cloud-config\n# token abcdef.0123456789abcdef\n"

	made, err := p.Create(t.Context(), claim, provider.CreateOptions{UserData: []byte(userData)})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var secret corev1.Secret
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: claim.Name}, &secret)).To(gomega.Succeed())
	g.Expect(string(secret.Data[secretUserData])).To(gomega.Equal(userData))
	g.Expect(secret.Annotations).To(gomega.HaveKeyWithValue(v1alpha1.TagCluster, "c1"))
	for _, record := range machineRecords(t, ns) {
		for key, value := range record.Data {
			g.Expect(value).NotTo(gomega.ContainSubstring("0123456789abcdef"), "record key %s carries the token", key)
		}
	}

	g.Expect(p.Delete(t.Context(), made.ProviderID)).To(gomega.Succeed())
	err = env.Client.Get(t.Context(), client.ObjectKeyFromObject(&secret), &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "user data left after the machine was deleted: %v", err)
}

// A machine with user data joins only with the token in it: with none, or
// with one the API server does not know, its Node is never made (where a
// machine without user data would register at once).
func TestMachineWithUserDataJoinsOnlyWithItsToken(t *testing.T) {
	for name, userData := range map[string]string{
		"no token":      "#cloud-config\nruncmd: [[true]]\n",
		"unknown token": "#cloud-config\n# token zzzzzz.zzzzzzzzzzzzzzzz\n",
	} {
		t.Run(name, func(t *testing.T) {
			g := gomega.NewWithT(t)
			ns := newNamespace(t)
			claim := newClaim(uniqueName(t, "a"), "pool")
			cfg := Config{RESTConfig: env.Config}
			p := newTestProvider(t, ns, "c1", &v1alpha1.SimulatedSettings{BootDelay: durationPtr(0)}, cfg)
			_, err := p.Create(t.Context(), claim, provider.CreateOptions{UserData: []byte(userData)})
			g.Expect(err).NotTo(gomega.HaveOccurred())

			err = NewRegistrar(env.Client, ns, "c1", cfg).RegisterDue(t.Context())
			g.Expect(err).To(gomega.HaveOccurred())
			g.Expect(getNode(g, t, claim.Name)).To(gomega.BeNil())
			if name == "unknown token" {
				g.Expect(apierrors.IsUnauthorized(err)).To(gomega.BeTrue(), "%v", err)
				g.Expect(strings.Contains(err.Error(), "zzzzzzzzzzzzzzzz")).To(gomega.BeFalse(), "the error carries the token")
			}
		})
	}
}
