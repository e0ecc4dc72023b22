package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/claimscale/claimscale/api/v1alpha1"
	"github.com/claimscale/claimscale/internal/testenv"
	"github.com/claimscale/claimscale/test/e2e/internal/harness"
)

// applyUserRoles creates config/rbac/user_roles.yaml's ClusterRoles, as
// kubectl apply -k config/default does, until the test ends.
func applyUserRoles(t *testing.T, g *WithT) {
	t.Helper()
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "user_roles.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	objects, err := testenv.DecodeManifests(data)
	g.Expect(err).NotTo(HaveOccurred())
	for _, object := range objects {
		g.Expect(env.Client.Create(context.Background(), object)).To(Succeed())
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), object) })
	}
}

// bindUser binds a user to a ClusterRole, until the test ends.
func bindUser(t *testing.T, g *WithT, user, clusterRole string) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	g.Expect(env.Client.Create(context.Background(), binding)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), binding) })
}

// A user bound to nothing but the built-in view ClusterRole lists pools,
// claims and providers, as `kubectl get nodeclaims` does, and may change
// none; one bound to edit may. kube-controller-manager's aggregation
// controller copies claimscale's roles into view and edit by their labels.
func TestViewAndEditUsersReachClaimscaleKinds(t *testing.T) {
	g := NewWithT(t)
	applyUserRoles(t, g)
	ctx := context.Background()
	asUser := func(name, clusterRole string) client.Client {
		bindUser(t, g, name, clusterRole)
		config, err := env.UserConfig(name)
		g.Expect(err).NotTo(HaveOccurred())
		c, err := client.New(config, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	viewer, editor := asUser("plain-viewer", "view"), asUser("plain-editor", "edit")
	g.Eventually(func(g Gomega) {
		for _, list := range []client.ObjectList{&v1alpha1.NodeClaimList{}, &v1alpha1.NodePoolList{}, &v1alpha1.NodeProviderList{}} {
			g.Expect(viewer.List(ctx, list)).To(Succeed(), "a view user lists %T", list)
		}
	}).WithTimeout(time.Minute).Should(Succeed(), "view aggregates claimscale-view")

	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"},
		Spec: v1alpha1.NodePoolSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "none"},
			Shapes:      v1alpha1.Shapes{Fixed: []v1alpha1.Shape{{Name: "c4", CPU: harness.Qty("4"), Memory: harness.Qty("16Gi"), Price: "0.1"}}},
		},
	}
	err := viewer.Create(ctx, pool.DeepCopy(), client.DryRunAll)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a view user may not create a pool: %v", err)
	g.Eventually(func() error { return editor.Create(ctx, pool.DeepCopy(), client.DryRunAll) }).
		WithTimeout(time.Minute).Should(Succeed(), "edit aggregates claimscale-edit")
	g.Expect(editor.List(ctx, &v1alpha1.NodeClaimList{})).To(Succeed(), "edit includes view")
}

// Each `kubectl claimscale` command runs for a user bound to its role
// (with the decisions reader role, as docs/install.md says), and a
// command that reads more than a role grants is refused.
func TestEachPluginCommandRunsWithItsRole(t *testing.T) {
	address := harness.FreeLocalAddress(t)
	harness.StartOperator(t, harness.OperatorOptions{MetricsAddress: address})
	s := harness.NewScenario(t, "plugin-roles")
	defer s.Cleanup()
	applyUserRoles(t, s.G)
	s.CreateProvider(v1alpha1.SimulatedSettings{})
	s.CreatePool(nil)
	workload := filepath.Join(t.TempDir(), "workload.yaml")
	data, err := yaml.Marshal(s.DeploymentObject("web", 2, "1"))
	s.G.Expect(err).NotTo(HaveOccurred())
	s.G.Expect(os.WriteFile(workload, data, 0o600)).To(Succeed())

	clis := map[string]*harness.ClaimscaleCLI{}
	for _, tt := range []struct {
		role     string
		commands [][]string
	}{
		{"claimscale-plugin-get", [][]string{{"get"}, {"get", "--pool", s.Name, "-o", "json"}}},
		{"claimscale-plugin-why", [][]string{{"why", "pods", "-A"}, {"why", "node", "no-such-node"}, {"why", "pod", "no-such-pod", "-n", s.Namespace}}},
		{"claimscale-plugin-simulate", [][]string{{"simulate", "-f", workload, "-n", s.Namespace}, {"simulate", "--scale-down"}}},
		{"claimscale-plugin-snapshot", [][]string{{"snapshot"}}},
	} {
		cli := harness.NewClaimscaleCLIAs(s.Ctx, t, address, tt.role)
		clis[tt.role] = cli
		for _, args := range tt.commands {
			s.G.Eventually(func(g Gomega) {
				out, err := cli.Run(args...)
				if err != nil {
					// why about nothing answers "not found"; a missing
					// right would say forbidden.
					g.Expect(err.Error()).To(ContainSubstring("not found"), "%s: %v", args, err)
					g.Expect(err.Error()).NotTo(ContainSubstring("forbidden"))
				}
				g.Expect(out).NotTo(ContainSubstring("pools left out"))
			}).Should(Succeed(), "%v as %s", args, tt.role)
		}
	}
	_, err = clis["claimscale-plugin-get"].Run("simulate", "-f", workload, "-n", s.Namespace)
	s.G.Expect(err).To(MatchError(ContainSubstring("forbidden")), "get's role does not let simulate read the cluster")
}
