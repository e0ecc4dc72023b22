package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// The clusterapi component, added next to config/default as
// docs/clusterapi.md says, gives the controller's ServiceAccount the rights
// on Machines that a kustomize install otherwise lacks.
func TestKustomizeClusterAPIComponentGrantsMachines(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	overlay := t.TempDir()
	// kustomize takes only relative paths to other kustomizations.
	relative, err := filepath.Rel(overlay, root)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
		"resources:\n  - "+filepath.Join(relative, "config", "default")+"\n"+
			"components:\n  - "+filepath.Join(relative, "config", "components", "clusterapi")+"\n"), 0o600)).To(Succeed())
	objects := harness.Kustomize(t, overlay)

	serviceAccount := ""
	for _, object := range objects {
		if object.GetKind() == "ServiceAccount" {
			serviceAccount = "system:serviceaccount:" + object.GetNamespace() + ":" + object.GetName()
		}
		if object.GetName() != "claimscale-clusterapi" {
			continue
		}
		// Only the component's own objects are made for real: the
		// authorizer is what proves the binding.
		g.Expect(env.Client.Patch(ctx, object, client.Apply, client.FieldOwner("kustomize-test"), client.ForceOwnership)).To(Succeed(), "%s %s", object.GetKind(), object.GetName())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), object) })
	}
	g.Expect(serviceAccount).NotTo(BeEmpty())
	g.Eventually(func() bool {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: serviceAccount, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "cluster.x-k8s.io", Resource: "machines", Verb: "create", Namespace: "default"},
		}}
		g.Expect(env.Client.Create(ctx, review)).To(Succeed())
		return review.Status.Allowed
	}).WithTimeout(30*time.Second).Should(BeTrue(), "%s may create Machines", serviceAccount)
}
